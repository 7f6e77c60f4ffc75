#!/usr/bin/env python3
"""A real single-node cluster on loopback: munge, slurmctld and slurmd, with Pyxis in plugstack.conf.

It is what the tests and ``bench/`` start imagekit's images under, and what a site can use to try
imagekit's output before its own cluster does. ``scripts/setup-cluster.sh`` installs the pieces
(Debian's Slurm 22.05 and munge; Enroot, Pyxis and Apptainer built from their sources); this file
only starts and stops the daemons::

    sudo python3 scripts/cluster.py up [--importer PATH] [--squashfuse]   # prints the SLURM_CONF line
    export SLURM_CONF=/run/imagekit-cluster/slurm.conf
    srun --container-image=./out/debian-mpi.sqsh --mpi=pmix -n 2 python3 -m mpi4py.bench helloworld
    sudo python3 scripts/cluster.py down

Every daemon is started detached and stopped by its own pid file, so ``down`` (or the next ``up``)
stops what an interrupted run left behind; munged is stopped only when this file started it. The
Slurm configuration lives in one directory (``--dir``, default ``/run/imagekit-cluster``); nothing
under /etc/slurm is touched. Clients find it through ``SLURM_CONF``. The machine's hostname is not
the node name: the node is ``localhost`` at 127.0.0.1.

Standard library only: it runs with the distro's python3 and is imported by the tests and benches.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_DIR = Path(os.environ.get("IMAGEKIT_CLUSTER_DIR", "/run/imagekit-cluster"))
PYXIS = Path("/usr/local/lib/slurm/spank_pyxis.so")
MUNGE_PID = Path("/run/munge/munged.pid")
TEST_USER = os.environ.get("IMAGEKIT_TEST_USER", "imagekit-user")
SETUP = "bash scripts/setup-cluster.sh"
TOOLS = {"slurmctld": "slurm-wlm", "slurmd": "slurm-wlm", "srun": "slurm-wlm", "sinfo": "slurm-wlm",
         "munged": "munge", "munge": "munge", "unmunge": "munge", "enroot": SETUP}

SLURM_CONF = """\
# Written by imagekit's scripts/cluster.py: one node, localhost at 127.0.0.1, Pyxis in plugstack.conf.
ClusterName=imagekit
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
PlugStackConfig={d}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
KillWait=5
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


class ClusterError(RuntimeError):
    pass


def missing() -> str | None:
    """Why this machine cannot start the cluster, with the fix; None when it can."""
    for tool, fix in TOOLS.items():
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            how = fix if fix == SETUP else f"apt-get install {fix}, or {SETUP}"
            return f"`{tool}` is not installed ({how})"
    if not PYXIS.is_file():
        return f"Pyxis is not installed at {PYXIS} ({SETUP})"
    if os.geteuid() != 0:
        return "starting slurmd needs root"
    return None


def _pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def _stop_pid_file(path: Path, timeout: float = 20.0) -> bool:
    """SIGTERM the process a pid file names, SIGKILL after ``timeout``; remove the file. True if one ran."""
    pid = _pid(path)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _pid(path) == pid and time.monotonic() < deadline:
                time.sleep(0.1)
            if _pid(path) == pid:
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    path.unlink(missing_ok=True)
    return pid is not None


def _munge_ok() -> bool:
    try:
        enc = subprocess.run(["munge", "-n"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=5)
        return enc.returncode == 0 and subprocess.run(
            ["unmunge"], input=enc.stdout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _wait(what: str, ok, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            tail = ""
            if log is not None and log.is_file():
                tail = "\n  " + "\n  ".join(log.read_text(errors="replace").splitlines()[-8:])
            raise ClusterError(f"{what} did not come up within {timeout:.0f} s{tail}")
        time.sleep(0.2)


class Cluster:
    """The cluster's files in ``directory``; ``up()`` and ``down()`` start and stop its daemons."""

    def __init__(self, directory: Path = DEFAULT_DIR) -> None:
        self.dir = Path(directory)
        self.conf = self.dir / "slurm.conf"
        self.plugstack = self.dir / "plugstack.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment of a client of this cluster (srun, sbatch, scontrol, Enroot's Slurm hook)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def pyxis(self, *, importer: str | None = None, squashfuse: bool = False) -> None:
        """(Re)write Pyxis's plugstack line; srun and every new step's slurmstepd read it afresh."""
        args = [f"importer={importer}"] if importer else []
        if squashfuse:
            args.append("use_squashfuse=1")
        text = f"required {PYXIS} {' '.join(args)}".rstrip() + "\n"
        tmp = self.plugstack.with_name(self.plugstack.name + ".tmp")
        tmp.write_text(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.plugstack)

    def up(self, *, importer: str | None = None, squashfuse: bool = False, timeout: float = 60) -> "Cluster":
        problem = missing()
        if problem:
            raise ClusterError(problem)
        self.down()  # whatever an interrupted run left, by its pid files
        for sub in ("state", "spool"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        # Readable by the unprivileged test user: its srun reads slurm.conf through SLURM_CONF.
        os.chmod(self.dir, 0o755)
        self.conf.write_text(SLURM_CONF.format(d=self.dir, cpus=max(2, os.cpu_count() or 2)))
        os.chmod(self.conf, 0o644)
        self.pyxis(importer=importer, squashfuse=squashfuse)
        Path("/run/enroot").mkdir(mode=0o1777, exist_ok=True)
        os.chmod("/run/enroot", 0o1777)
        if not _munge_ok():
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            subprocess.run(["runuser", "-u", "munge", "--", "munged", f"--pid-file={MUNGE_PID}"], check=True)
            _wait("munged", _munge_ok, 10)
            pid = _pid(MUNGE_PID)
            if pid is not None:
                (self.dir / "munged.pid").write_text(f"{pid}\n")
        env = self.env
        # Detached (no -D): the daemons write their pid files and outlive this process until down().
        # -c: no jobs carried over from an earlier run, whose processes are gone with its slurmd.
        for argv, log in ((["slurmctld", "-c", "-i", "-f", str(self.conf)], self.dir / "slurmctld.log"),
                          (["slurmd", "-N", "localhost", "-f", str(self.conf)], self.dir / "slurmd.log")):
            proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if proc.returncode != 0:
                self.down()
                raise ClusterError(f"`{' '.join(argv)}` failed: {proc.stdout.strip()[-500:]} (log: {log})")

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True, env=env).stdout.strip()
            return out in ("idle", "mixed", "allocated")
        try:
            _wait("slurmd (node localhost idle)", idle, timeout, self.dir / "slurmd.log")
        except ClusterError:
            self.down()
            raise
        return self

    def down(self) -> list[str]:
        """Stop every daemon this directory's pid files name; returns which ones ran."""
        stopped = [name for name in ("slurmd", "slurmctld")
                   if _stop_pid_file(self.dir / f"{name}.pid")]
        ours = self.dir / "munged.pid"
        if ours.is_file():
            if _pid(ours) is not None and _pid(ours) == _pid(MUNGE_PID):
                _stop_pid_file(MUNGE_PID)
                stopped.append("munged")
            ours.unlink(missing_ok=True)
        return stopped

    def running(self) -> dict[str, int | None]:
        return {name: _pid(self.dir / f"{name}.pid") for name in ("slurmctld", "slurmd")}

    # Several test sessions (or a session and a bench) on one machine share the one cluster: each
    # holds it while it runs, and the last to let go stops it.
    def hold(self, **up_args) -> "Cluster":
        with self._locked():
            if not (self._holders() and all(self.running().values())):
                self.up(**up_args)
            (self.dir / "holders").mkdir(parents=True, exist_ok=True)
            (self.dir / "holders" / str(os.getpid())).write_text(f"{os.getpid()}\n")
        return self

    def release(self) -> list[str]:
        with self._locked():
            (self.dir / "holders" / str(os.getpid())).unlink(missing_ok=True)
            return [] if self._holders() else self.down()

    def _holders(self) -> list[Path]:
        """Holders whose process still runs (a killed session's file is ignored)."""
        holders = self.dir / "holders"
        return [p for p in (holders.glob("*") if holders.is_dir() else []) if _pid(p) is not None]

    @contextlib.contextmanager
    def _locked(self):
        import fcntl

        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example:\n  sudo python3 scripts/cluster.py up && "
                                        "export SLURM_CONF=/run/imagekit-cluster/slurm.conf\n"
                                        "  srun --container-image=./out/debian-mpi.sqsh --mpi=pmix -n 2 "
                                        "python3 -m mpi4py.bench helloworld\n"
                                        "  sudo python3 scripts/cluster.py up --nodes 8 && "
                                        "export SLURM_CONF=/run/imagekit-multinode/slurm.conf\n"
                                        "  srun -N 8 --container-image=./out/debian-mpi.sqsh --mpi=pmix hostname")
    ap.add_argument("action", choices=("up", "down", "status"))
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"configuration and state (default {DEFAULT_DIR})")
    ap.add_argument("--importer", help="Pyxis importer= (e.g. the path of imagekit-pyxis-importer)")
    ap.add_argument("--squashfuse", action="store_true", help="Pyxis use_squashfuse=1")
    ap.add_argument("--nodes", type=int, default=1,
                    help="more than 1: the multi-node cluster of scripts/multinode.py (its own --dir default, "
                         "/run/imagekit-multinode; see that file)")
    ap.add_argument("--tree-width", type=int, default=50, help="multi-node: Slurm's TreeWidth (sbcast's fan-out)")
    args = ap.parse_args(argv)
    if args.nodes > 1:
        import multinode   # beside this file; it needs this module, so it is imported only here

        cluster = multinode.MultiCluster(args.dir if args.dir != DEFAULT_DIR else multinode.DEFAULT_DIR,
                                         args.nodes, tree_width=args.tree_width)
    else:
        cluster = Cluster(args.dir)
    try:
        if args.action == "up":
            cluster.up(importer=args.importer, squashfuse=args.squashfuse)
            print(f"export SLURM_CONF={cluster.conf}")
        elif args.action == "down":
            stopped = cluster.down()
            print("stopped: " + (", ".join(stopped) or "nothing was running"))
        else:
            for name, pid in cluster.running().items():
                print(f"{name}: {'running, pid ' + str(pid) if pid else 'stopped'}")
    except ClusterError as exc:
        print(f"cluster: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
