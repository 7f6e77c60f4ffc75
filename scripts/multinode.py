#!/usr/bin/env python3
"""A real multi-node Slurm cluster on one machine: N nodes, one shared file system, nothing faked.

``scripts/cluster.py up --nodes 8`` starts it (``down --nodes 8`` stops it). Each node is a set of
Linux namespaces around its own ``slurmd``, as close to a separate machine as one kernel allows:

- its own network namespace and address (``10.77.0.1K`` on a private bridge; slurmctld listens on
  ``10.77.0.1:6917``), so slurmd, PMIx and MPI talk node to node over TCP, and Slurm's tree fan-out
  (``TreeWidth``, used by ``sbcast``) forwards from node to node;
- its own mount namespace and host name, with a node-local disk (an ext4 file system on a loop
  device, :attr:`MultiCluster.local` on the node) that also holds the node's ``/tmp`` and Enroot's
  data, cache and runtime directories, so containers of one step on eight nodes never share them;
- its own client of the shared file system: ``imagekit-countfs`` (``scripts/countfs.c``), a
  pass-through FUSE mount of one ext4 file system (the stand-in for the parallel file system) at
  :attr:`MultiCluster.pfs`. Every node's mount is a file system of its own to the kernel, hence a
  page cache of its own: what node 3 read is not free for node 4. The daemon counts the bytes each
  node fetched (:meth:`MultiCluster.pfs_reads`), and the loop device under the shared file system
  counts what reached its disk (:meth:`MultiCluster.pfs_device_reads`).

Why namespaces and not one container per node: the nodes run the host's own Slurm, Enroot, Pyxis and
imagekit (nothing to build or keep in step), and an idle node costs one slurmd and one FUSE daemon,
a few MiB each, on this 2-core machine. Why not Slurm's multiple-slurmd mode: it is not built into
Debian's Slurm, and per-node disks, /tmp and Enroot paths would still need mount namespaces.

It shares nothing with the single-node cluster of ``scripts/cluster.py`` but the installed programs:
its own configuration directory (``/run/imagekit-multinode``), its own munged (own socket), its own
ports and network. Every daemon (slurmctld, each slurmd, each countfs, munged) is started detached and
stopped by its pid file; every loop device, mount, namespace and link it made is recorded in
``state.json`` and removed by ``down`` (or by the next ``up``, after an interrupted run).

Standard library only: it runs with the distro's python3 and is imported by the tests and benches.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from cluster import PYXIS, Cluster, ClusterError, _pid, _stop_pid_file, _wait
from cluster import missing as single_missing

DEFAULT_DIR = Path(os.environ.get("IMAGEKIT_MULTINODE_DIR", "/run/imagekit-multinode"))
DISKS = Path(os.environ.get("IMAGEKIT_MULTINODE_DISKS", "/var/tmp/imagekit-multinode"))
SUBNET = os.environ.get("IMAGEKIT_MULTINODE_SUBNET", "10.77.0")    # a /24: .1 is the head, .1K node K
PREFIX = "ikmn"
CTLD_PORT = 6917          # not the single-node cluster's 6817: both may run at once
COUNTFS = Path(os.environ.get("IMAGEKIT_COUNTFS", "/usr/local/bin/imagekit-countfs"))
STATS = ".imagekit-countfs"
# Node-local as on a real node: Enroot's directories, /tmp, and Pyxis's runtime path, where a stock
# `enroot import` writes each node's squashfs under one name (nodes sharing it would overwrite).
ENROOT_DIRS = {"enroot/data": "/var/tmp/enroot-data", "enroot/cache": "/var/tmp/enroot-cache",
               "enroot/run": "/run/enroot", "pyxis/run": "/run/pyxis", "tmp": "/tmp"}

SLURM_CONF = """\
# Written by imagekit's scripts/multinode.py: {n} nodes in network namespaces, Pyxis in plugstack.conf.
ClusterName=imagekit-multi
SlurmctldHost=localhost({head})
SlurmctldPort={port}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge/munge.socket
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/nodes/%n/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/nodes/%n/slurmd.log
SlurmdParameters=config_overrides
PlugStackConfig={d}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
# The site's prolog at allocation, on every node of a job, before its script (scripts/multinode.py
# writes {d}/prolog: it runs {d}/prolog.site when there is one, the hook a bench or test sets).
Prolog={d}/prolog
PrologFlags=Alloc
ReturnToService=2
SlurmdTimeout=120
MessageTimeout=30
KillWait=5
TreeWidth={tree_width}
{nodes}
PartitionName=nodes Nodes={names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""

# Slurm's Prolog (PrologFlags=Alloc: once per node when a job is given it, before its script), as root
# in the node's namespaces. A site stages its images here (docs/many-nodes.md, "Staged by the prolog").
PROLOG = """\
#!/bin/sh
# A hook that fails is logged by slurmd and never fails the prolog: a failed prolog drains the node,
# and this cluster is shared by every test and bench of the machine.
if [ -x {site} ]; then {site} || echo "prolog: {site} failed ($?)" >&2; fi
exit 0
"""

# Run in the node's new mount and UTS namespaces (inside its network namespace), then becomes slurmd.
# The spool directory is bound, not named per node (%n) in slurm.conf: Enroot's PMIx hook reads
# SlurmdSpoolDir from `scontrol show config` and mounts it into the container as it reads.
NODE_INIT = """\
set -eu
hostname "$1"
mount --bind "$2/pfs-client" "$3"
mount --bind "$2/local" "$4"
for pair in {binds}; do mount --bind "$2/local/${{pair%%=*}}" "${{pair#*=}}"; done
mount --bind "$5" /etc/hosts
# /dev/fuse as compute nodes have it (0666, Debian's udev rule): users' squashfuse mounts (Pyxis
# use_squashfuse=1) need it, and this machine's own may be root's only. A node's own device node,
# on its local disk; the machine's is not changed.
rm -f "$2/local/.dev-fuse"
mknod -m 0666 "$2/local/.dev-fuse" c 10 229
mount --bind "$2/local/.dev-fuse" /dev/fuse
mount --bind "$2/spool" "$7"
exec slurmd -f "$6" -N "$1"
"""


def missing() -> str | None:
    """Why this machine cannot start the multi-node cluster, with the fix; None when it can."""
    problem = single_missing()
    if problem:
        return problem
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux"), ("nsenter", "util-linux"),
                          ("losetup", "mount"), ("mkfs.ext4", "e2fsprogs"), ("fusermount3", "fuse3")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install {package})"
    if not os.access(COUNTFS, os.X_OK):
        return f"{COUNTFS} is not installed (bash scripts/setup-cluster.sh builds it from scripts/countfs.c)"
    if not Path("/dev/fuse").exists():
        return "/dev/fuse is missing (the shared file system's node clients are FUSE mounts)"
    return None


def _run(argv: list[str], *, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if check and proc.returncode != 0:
        raise ClusterError(f"`{' '.join(argv)}` failed: {proc.stdout.strip()[-400:]}")
    return proc


def _mounted(path: Path) -> bool:
    target = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo") as fh:
            return any(line.split()[4] == target for line in fh)
    except OSError:
        return False


def _umount(path: Path) -> None:
    for _ in range(3):
        if not _mounted(path):
            return
        if _run(["umount", str(path)], check=False).returncode != 0:
            _run(["umount", "-l", str(path)], check=False)


class MultiCluster(Cluster):
    """N Slurm nodes on this machine (see the module docstring); ``up()`` and ``down()`` start and stop it."""

    def __init__(self, directory: Path = DEFAULT_DIR, nodes: int = 8, *, tree_width: int = 50,
                 disks: Path = DISKS, subnet: str = SUBNET, prefix: str = PREFIX, port: int = CTLD_PORT,
                 pfs_size: str = "8G", local_size: str = "2G") -> None:
        super().__init__(directory)
        self.port = port
        self.prefix = prefix     # node names, network namespaces and links: PREFIX1.., PREFIX-br, ...
        if not 1 <= nodes <= 50:
            raise ClusterError(f"--nodes {nodes}: between 1 and 50 nodes")
        self.n = nodes
        self.tree_width = tree_width
        self.disks = Path(disks)
        self.subnet = subnet
        self.pfs_size, self.local_size = pfs_size, local_size
        self.pfs = self.dir / "pfs"          # the shared file system, at the same path on the head and every node
        self.local = self.dir / "local"      # on a node: its node-local disk (on the head: an empty directory)
        self.state_file = self.dir / "state.json"
        self.prolog_site = self.dir / "prolog.site"   # the prolog's hook: absent, the prolog does nothing

    # --- names --------------------------------------------------------------------------------

    @property
    def nodes(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(1, self.n + 1)]

    @property
    def head(self) -> str:
        return f"{self.subnet}.1"

    def addr(self, node: str) -> str:
        return f"{self.subnet}.{10 + int(node[len(self.prefix):])}"

    def node_dir(self, node: str) -> Path:
        return self.dir / "nodes" / node

    def node_local(self, node: str) -> Path:
        """The node's local disk, as the head sees it (the node itself sees it at :attr:`local`)."""
        return self.node_dir(node) / "local"

    def node_pfs(self, node: str) -> Path:
        """The node's client mount of the shared file system, as the head sees it."""
        return self.node_dir(node) / "pfs-client"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # --- state --------------------------------------------------------------------------------

    def _state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def _record(self, key: str, item, name: str | None = None) -> None:
        """Note something made (a list item, or ``name``: item in a mapping) before using it, so that
        ``down`` removes it whatever fails next."""
        state = self._state()
        if name is None:
            state.setdefault(key, []).append(item)
        else:
            state.setdefault(key, {})[name] = item
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, self.state_file)

    # --- up -----------------------------------------------------------------------------------

    def up(self, *, importer: str | None = None, squashfuse: bool = False, timeout: float = 120) -> "MultiCluster":
        problem = missing()
        if problem:
            raise ClusterError(problem)
        self.down()
        try:
            self._files(importer, squashfuse)
            self._munge()
            self._network()
            self._pfs()
            for node in self.nodes:
                self._node_disk(node)
                self._countfs(node)
            proc = _run(["slurmctld", "-c", "-i", "-f", str(self.conf)], check=False, env=self.env)
            if proc.returncode != 0:
                raise ClusterError(f"slurmctld failed: {proc.stdout.strip()[-400:]} (log: {self.dir}/slurmctld.log)")
            for node in self.nodes:
                self._slurmd(node)
            _wait(f"{self.n} nodes idle", self._all_idle, timeout, self.dir / "slurmctld.log")
        except BaseException:
            self.down()
            raise
        return self

    def _files(self, importer: str | None, squashfuse: bool) -> None:
        for sub in ("state", "nodes"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)
        self.state_file.write_text("{}")
        for path in (self.pfs, self.local, self.dir / "spool"):
            path.mkdir(exist_ok=True)
            os.chmod(path, 0o755)
        # 8 CPUs whatever the machine has (config_overrides): room for 8 tasks a node, as the tests ask.
        lines = [f"NodeName={n} NodeAddr={self.addr(n)} CPUs=8 State=UNKNOWN"
                 for n in self.nodes]
        for target in ENROOT_DIRS.values():      # what each node binds its own directory over
            Path(target).mkdir(parents=True, exist_ok=True)
        prolog = self.dir / "prolog"
        prolog.write_text(PROLOG.format(site=self.prolog_site))
        os.chmod(prolog, 0o755)
        self.conf.write_text(SLURM_CONF.format(n=self.n, d=self.dir, head=self.head, port=self.port,
                                               tree_width=self.tree_width, nodes="\n".join(lines),
                                               names=",".join(self.nodes)))
        os.chmod(self.conf, 0o644)
        self.pyxis(importer=importer, squashfuse=squashfuse)
        hosts = ["127.0.0.1 localhost", f"{self.head} {self.prefix}-head"] + [f"{self.addr(n)} {n}" for n in self.nodes]
        (self.dir / "hosts").write_text("\n".join(hosts) + "\n")
        os.chmod(self.dir / "hosts", 0o644)

    def _munge(self) -> None:
        """A munged of this cluster's own: the single-node cluster may stop the machine's at any time."""
        d = self.dir / "munge"
        d.mkdir(exist_ok=True)
        shutil.chown(d, "munge", "munge")
        os.chmod(d, 0o755)
        _run(["runuser", "-u", "munge", "--", "munged", f"--socket={d}/munge.socket",
              f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed"])

        def answers() -> bool:
            enc = subprocess.run(["munge", "-n", "-S", f"{d}/munge.socket"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
            return enc.returncode == 0
        _wait("munged", answers, 10, d / "munged.log")

    def _network(self) -> None:
        """A bridge with no ports, and one macvlan (bridge mode) per node: node-to-node traffic is
        switched by macvlan itself, so the host's firewall (Docker's FORWARD policy) never sees it."""
        bridge, host = f"{self.prefix}-br", f"{self.prefix}-head"
        _run(["ip", "link", "add", bridge, "type", "bridge"])
        self._record("links", bridge)
        _run(["ip", "link", "set", bridge, "up"])
        _run(["ip", "link", "add", host, "link", bridge, "type", "macvlan", "mode", "bridge"])
        _run(["ip", "addr", "add", f"{self.head}/24", "dev", host])
        _run(["ip", "link", "set", host, "up"])
        for node in self.nodes:
            ns, link = node, f"{self.prefix}-m{node[len(self.prefix):]}"
            _run(["ip", "netns", "add", ns])
            self._record("netns", ns)
            _run(["ip", "link", "add", link, "link", bridge, "type", "macvlan", "mode", "bridge"])
            _run(["ip", "link", "set", link, "netns", ns, "name", "eth0"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.addr(node)}/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def _loop_fs(self, name: str, size: str, mountpoint: Path) -> str:
        """A fresh ext4 file system in a sparse image, on a loop device (direct I/O: its read counters
        see every read that missed the file system's own page cache), mounted at ``mountpoint``."""
        self.disks.mkdir(parents=True, exist_ok=True)
        image = self.disks / (f"{name}.img" if name.startswith(self.prefix) else f"{self.prefix}-{name}.img")
        image.unlink(missing_ok=True)
        _run(["truncate", "-s", size, str(image)])
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", str(image)])
        dev = _run(["losetup", "--find", "--show", "--direct-io=on", str(image)]).stdout.strip()
        self._record("loops", [dev, str(image)], name)
        mountpoint.mkdir(parents=True, exist_ok=True)
        _run(["mount", "-o", "noatime", dev, str(mountpoint)])
        self._record("mounts", str(mountpoint))
        os.chmod(mountpoint, 0o755)
        return dev

    def _pfs(self) -> None:
        self._loop_fs("pfs", self.pfs_size, self.pfs)

    def _node_disk(self, node: str) -> None:
        local = self.node_local(node)
        self._loop_fs(node, self.local_size, local)
        for sub in [*ENROOT_DIRS, "scratch"]:      # scratch: for anyone, like /tmp (stage directories)
            (local / sub).mkdir(parents=True, exist_ok=True)
            os.chmod(local / sub, 0o1777)
        for sub in ("spool",):
            (self.node_dir(node) / sub).mkdir(exist_ok=True)

    def _countfs(self, node: str) -> None:
        """The node's client of the shared file system: detaches once mounted, its pid in countfs.pid."""
        client, pid_file = self.node_pfs(node), self.node_dir(node) / "countfs.pid"
        client.mkdir(parents=True, exist_ok=True)
        pid_file.unlink(missing_ok=True)
        self._record("mounts", str(client))
        with open(self.node_dir(node) / "countfs.log", "ab") as log:
            proc = subprocess.run([str(COUNTFS), str(self.pfs), str(client), str(pid_file), "-o",
                                   f"allow_other,default_permissions,auto_cache,fsname={self.prefix}-pfs-{node}"],
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        if proc.returncode != 0:
            raise ClusterError(f"imagekit-countfs for {node} failed: see {self.node_dir(node) / 'countfs.log'}")
        _wait(f"{node}'s shared file system client", lambda: _pid(pid_file) is not None and (client / STATS).exists(),
              10, self.node_dir(node) / "countfs.log")

    def _slurmd(self, node: str) -> None:
        binds = " ".join(f"{sub}={target}" for sub, target in ENROOT_DIRS.items())
        script = NODE_INIT.format(binds=binds)
        argv = ["nsenter", f"--net=/run/netns/{node}", "--", "unshare", "--mount", "--uts", "--propagation", "slave",
                "--", "sh", "-c", script, "node-init", node, str(self.node_dir(node)), str(self.pfs), str(self.local),
                str(self.dir / "hosts"), str(self.conf), str(self.dir / "spool")]
        proc = _run(argv, check=False, env=self.env)
        if proc.returncode != 0:
            raise ClusterError(f"slurmd on {node} failed: {proc.stdout.strip()[-400:]} "
                               f"(log: {self.node_dir(node) / 'slurmd.log'})")

    def _all_idle(self) -> bool:
        out = _run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False, env=self.env).stdout.split("\n")
        states = dict(line.split() for line in out if len(line.split()) == 2)
        return len(states) == self.n and all(s in ("idle", "mixed", "allocated") for s in states.values())

    # --- down ---------------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stop every daemon by its pid file and remove what ``state.json`` says was made."""
        state = self._state()
        stopped: list[str] = []
        if _pid(self.dir / "slurmctld.pid") is not None:
            # Jobs first, so that their steps end under Slurm (KillWait) before the daemons go.
            jobs = _run(["squeue", "-h", "-o", "%i"], check=False, env=self.env, timeout=30).stdout.split()
            if jobs:
                _run(["scancel", *jobs], check=False, env=self.env, timeout=30)
                try:
                    _wait("cancelled jobs", lambda: not _run(["squeue", "-h", "-o", "%i"], check=False,
                                                             env=self.env, timeout=30).stdout.split(), 30)
                except ClusterError:
                    pass   # their processes are stopped with the nodes' namespaces below
        names = sorted(p.name for p in (self.dir / "nodes").iterdir()) if (self.dir / "nodes").is_dir() else []
        for node in names:
            if _stop_pid_file(self.node_dir(node) / "slurmd.pid"):
                stopped.append(f"slurmd@{node}")
        if _stop_pid_file(self.dir / "slurmctld.pid"):
            stopped.append("slurmctld")
        for ns in state.get("netns", []):
            self._kill_namespace(ns)
        # All at once: each FUSE daemon takes a second or two to end its loop after SIGTERM.
        pids = {node: _pid(self.node_dir(node) / "countfs.pid") for node in names}
        for pid in (p for p in pids.values() if p is not None):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for node in names:
            if _stop_pid_file(self.node_dir(node) / "countfs.pid", timeout=5) or pids[node] is not None:
                stopped.append(f"countfs@{node}")
        for mount in reversed(state.get("mounts", [])):
            _umount(Path(mount))
        for name, (dev, image) in state.get("loops", {}).items():
            back = _run(["losetup", "--noheadings", "--output", "BACK-FILE", dev], check=False).stdout.strip()
            if back == image:
                _run(["losetup", "-d", dev], check=False)
            Path(image).unlink(missing_ok=True)
        for ns in state.get("netns", []):
            _run(["ip", "netns", "del", ns], check=False)
        for link in state.get("links", []):
            _run(["ip", "link", "del", link], check=False)     # its macvlans go with it
        if _stop_pid_file(self.dir / "munge" / "munged.pid"):
            stopped.append("munged")
        self.state_file.unlink(missing_ok=True)
        return stopped

    def _kill_namespace(self, ns: str) -> None:
        """What jobs left in a node after its slurmd stopped (steps, squashfuse): stopped by pid."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = [int(p) for p in _run(["ip", "netns", "pids", ns], check=False).stdout.split() if p.isdigit()]
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and _run(["ip", "netns", "pids", ns], check=False).stdout.split():
                time.sleep(0.1)

    def restart_node(self, node: str, timeout: float = 120) -> None:
        """``node`` as after a power cycle: its slurmd and whatever jobs left in it stopped (by pid), its
        shared file system client made afresh, then a new slurmd in new mount and UTS namespaces."""
        _stop_pid_file(self.node_dir(node) / "slurmd.pid")
        self._kill_namespace(node)
        _stop_pid_file(self.node_dir(node) / "countfs.pid", timeout=5)
        _umount(self.node_pfs(node))
        self._countfs(node)
        self._slurmd(node)
        _wait(f"{node} idle again", self._all_idle, timeout, self.node_dir(node) / "slurmd.log")

    def running(self) -> dict[str, int | None]:
        out = {"slurmctld": _pid(self.dir / "slurmctld.pid"), "munged": _pid(self.dir / "munge" / "munged.pid")}
        for node in self.nodes:
            out[f"slurmd@{node}"] = _pid(self.node_dir(node) / "slurmd.pid")
            out[f"countfs@{node}"] = _pid(self.node_dir(node) / "countfs.pid")
        return out

    # --- on the nodes -------------------------------------------------------------------------

    def on(self, node: str, argv: list[str], *, user: str | None = None, **kw) -> subprocess.CompletedProcess:
        """Run ``argv`` inside ``node`` (its network, mounts and host name), as root or ``user``."""
        pid = _pid(self.node_dir(node) / "slurmd.pid")
        if pid is None:
            raise ClusterError(f"{node}'s slurmd is not running")
        prefix = ["nsenter", "-t", str(pid), "-m", "-n", "-u", "--"]
        if user is not None:
            prefix += ["runuser", "-u", user, "--"]
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.STDOUT)
        kw.setdefault("text", True)
        return subprocess.run(prefix + argv, **kw)

    # --- counters -----------------------------------------------------------------------------

    def pfs_reads(self) -> dict[str, dict[str, int]]:
        """Per node: what its client fetched from the shared file system (read_bytes: bytes that missed
        the node's page cache), wrote, and how many metadata operations it sent."""
        out = {}
        for node in self.nodes:
            try:
                out[node] = json.loads((self.node_pfs(node) / STATS).read_text())
            except (OSError, ValueError):
                out[node] = {}
        return out

    def _pfs_dev(self) -> str | None:
        loop = self._state().get("loops", {}).get("pfs")
        return loop[0] if loop else None

    def pfs_device_reads(self) -> int:
        """Bytes read from the shared file system's disk (its loop device), since it was made."""
        dev = self._pfs_dev()
        if dev is None:
            raise ClusterError("the multi-node cluster is not up")
        fields = Path(f"/sys/block/{Path(dev).name}/stat").read_text().split()
        return int(fields[2]) * 512

    def drop_caches(self, paths: list[Path] | None = None) -> None:
        """Make every node cold for the shared file system: drop the pages of the files under ``paths``
        (default: all of it) from every node client's page cache and from the shared file system's own
        (posix_fadvise DONTNEED), and the loop device's buffers. Nothing else on the machine is dropped."""
        roots = [self.node_pfs(n) for n in self.nodes] + [self.pfs]
        rels = [Path(p).relative_to(self.pfs) for p in paths] if paths else [Path(".")]
        for root in roots:
            for rel in rels:
                for dirpath, _dirs, files in os.walk(root / rel):
                    for name in files:
                        _fadvise_dontneed(Path(dirpath) / name)
        dev = self._pfs_dev()
        if dev:
            os.sync()
            _run(["blockdev", "--flushbufs", dev], check=False)

    def cut_pfs(self, node: str) -> None:
        """The shared file system disappears from ``node``: its client daemon is killed (reads there fail
        with ENOTCONN, as after a lost server), the other nodes keep theirs."""
        pid = _pid(self.node_dir(node) / "countfs.pid")
        if pid is not None:
            os.kill(pid, signal.SIGKILL)


def _fadvise_dontneed(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["MultiCluster", "missing", "PYXIS", "DEFAULT_DIR"]
