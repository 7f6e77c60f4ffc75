"""A single-node Slurm on localhost from Debian's packages, for tests and benchmarks.

munged runs as the munge user with /run/munge (no systemd here); slurmctld and
``slurmd -N localhost`` run in the foreground (``-D``) as children so teardown
can stop exactly what was started. Clients find the cluster through
``SLURM_CONF`` (no file under /etc/slurm is touched).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from imagekit.procs import stop

PACKAGES = "slurm-wlm munge libpmix2 libpmix-dev"


def missing() -> str | None:
    for tool in ("slurmctld", "slurmd", "sbatch", "srun", "munged", "munge", "unmunge"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"`{tool}` is not installed (apt-get install {PACKAGES})"
    if os.geteuid() != 0:
        return "starting slurmd needs root"
    return None


def _munge_ok() -> bool:
    try:
        enc = subprocess.run(["munge", "-n"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=5)
        if enc.returncode != 0:
            return False
        dec = subprocess.run(["unmunge"], input=enc.stdout, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, timeout=5)
        return dec.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


CONF = """\
ClusterName=imagekit-test
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


class LocalSlurm:
    def __init__(self, workdir: Path) -> None:
        self.dir = Path(workdir)
        self.conf = self.dir / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.started_munged = False

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 60) -> "LocalSlurm":
        for sub in ("state", "spool"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(CONF.format(d=self.dir, cpus=max(2, os.cpu_count() or 2)))
        if not _munge_ok():
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True)
            self.started_munged = True
            deadline = time.monotonic() + 10
            while not _munge_ok():
                if time.monotonic() > deadline:
                    raise RuntimeError("munged did not come up")
                time.sleep(0.2)
        log = open(self.dir / "daemons.out", "ab")
        self.procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(self.conf)],
                                           stdout=log, stderr=log, env=self.env))
        self.procs.append(subprocess.Popen(["slurmd", "-D", "-N", "localhost", "-f", str(self.conf)],
                                           stdout=log, stderr=log, env=self.env))
        deadline = time.monotonic() + timeout
        while True:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, env=self.env).stdout.strip()
            if out in ("idle", "mixed", "allocated"):
                return self
            if any(p.poll() is not None for p in self.procs) or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Slurm did not come up (sinfo: {out!r}); logs in {self.dir}")
            time.sleep(0.5)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop(proc, grace=20)
        self.procs.clear()
        if self.started_munged:
            pid_file = Path("/run/munge/munged.pid")
            if pid_file.is_file():
                try:
                    os.kill(int(pid_file.read_text().strip()), 15)
                except (OSError, ValueError):
                    pass
            self.started_munged = False
