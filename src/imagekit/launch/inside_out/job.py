"""The inside-out job: its options checked, the scripts and ssh files every worker gets, its key directory."""

from __future__ import annotations

import resource
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.util.errors import ImagekitError, UsageError
from imagekit.image_facts import BENCHMARK
from imagekit.launch import runtimes
from imagekit.launch.common import (Mount, check_choice, check_count, check_image_env, check_job, ScriptValues, check_token,
                                    new_job_id, write_atomic)
from imagekit.launch.slurm import check_sbatch

SCHEDULERS = ("local", "slurm")
PORT = 2222
MOUNT = "/run/imagekit"
EXIT_NO_SSHD, EXIT_NO_MPI = 97, 98
# Each engine call of the launcher (start, status, logs) gives up after this long: a busy engine
# answers well within it, and the docker package's own 600 s would hold a Ctrl-C that long.
CALL_TIMEOUT = 120.0
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}

START_SH = f"""\
#!/bin/sh
# imagekit inside-out worker: install this job's keys (mounted read-only), then run sshd.
set -eu
src={MOUNT}
if [ ! -x /usr/sbin/sshd ]; then
  echo "imagekit: this image has no /usr/sbin/sshd; inside-out needs openssh-server in the image" >&2
  exit {EXIT_NO_SSHD}
fi
if ! command -v mpirun >/dev/null 2>&1 || ! command -v orted >/dev/null 2>&1; then
  echo "imagekit: this image has no Open MPI (mpirun/orted not on PATH)" >&2
  exit {EXIT_NO_MPI}
fi
umask 077
mkdir -p /root/.ssh /etc/imagekit
cp "$src/id_ed25519" /root/.ssh/id_ed25519
cp "$src/id_ed25519.pub" /root/.ssh/authorized_keys
cp "$src/known_hosts" /root/.ssh/known_hosts
cp "$src/ssh_config" /root/.ssh/config
cp "$src/ssh_host_ed25519_key" /etc/imagekit/ssh_host_ed25519_key
chmod 600 /root/.ssh/id_ed25519 /root/.ssh/authorized_keys /etc/imagekit/ssh_host_ed25519_key
# orted arrives over ssh: give those sessions the image's environment (PATH, LD_LIBRARY_PATH, ...).
env | grep -v -E '^(HOSTNAME|HOME|PWD|SHLVL|_)=' > /root/.ssh/environment || true
mkdir -p /run/sshd
chmod 755 /run/sshd
exec /usr/sbin/sshd -D -e -p {PORT} -h /etc/imagekit/ssh_host_ed25519_key \\
  -o PermitUserEnvironment=yes -o PasswordAuthentication=no \\
  -o PermitRootLogin=prohibit-password -o AuthorizedKeysFile=.ssh/authorized_keys
"""

WAIT_SH = """\
#!/bin/sh
# imagekit: wait until every worker's sshd accepts this job's key. Usage: wait.sh SECONDS HOST...
set -u
deadline=$(( $(date +%s) + $1 ))
shift
for host in "$@"; do
  until ssh -o ConnectTimeout=2 "$host" true 2>/dev/null; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "imagekit: worker $host does not answer ssh on its port" >&2
      exit 1
    fi
    sleep 0.1
  done
done
"""

SSH_CONFIG = f"""\
Host *
    Port {PORT}
    User root
    IdentityFile ~/.ssh/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile ~/.ssh/known_hosts
    StrictHostKeyChecking yes
    CheckHostIP no
    BatchMode yes
    LogLevel ERROR
    ConnectTimeout 10
"""


@dataclass
class InsideOutJob:
    image: str
    nodes: int
    command: list[str]
    runtime: str = "docker"
    scheduler: str = "local"
    slots: int = 1
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    iface: str | None = None            # default: eth0 on the private network; unset under Slurm
    mpirun_args: list[str] = field(default_factory=list)
    shm_size: str = "1g"
    gpus: bool = False
    ready_timeout: float = 60.0
    cleanup_timeout: float = 60.0
    partition: str | None = None
    time: str | None = None
    job_name: str = "imagekit-io"
    job_id: str = field(default_factory=new_job_id)
    # The image's own variables (its benchmark label): every one goes to the containers only (docker
    # run's environment, mpirun -x inside them), as --env does, which wins for a name in both.
    image_env: dict[str, str] = field(default_factory=dict)
    image_env_label: str = BENCHMARK

    def __post_init__(self) -> None:
        runtimes.of(self.runtime, runtimes.INSIDE_OUT)
        check_choice("scheduler", self.scheduler, SCHEDULERS)
        check_count("--nodes", self.nodes)
        check_count("--slots", self.slots)
        check_job(ScriptValues(self.command, self.image, self.env, self.job_id), self.mpirun_args, "--mpirun-arg")
        check_image_env(self.image, self.image_env, self.image_env_label)
        check_token("--shm-size", self.shm_size)
        if not self.cleanup_timeout > 0:
            raise UsageError(f"--cleanup-timeout must be > 0, not {self.cleanup_timeout}",
                             "give the seconds the engine may take to remove the job's containers")
        if self.iface is not None:
            check_token("--iface", self.iface)

        check_sbatch(self.sbatch_options())

    def sbatch_options(self) -> dict[str, str]:
        opts = {"job-name": self.job_name, "nodes": str(self.nodes), "ntasks-per-node": "1"}
        opts.update({k: v for k, v in (("partition", self.partition), ("time", self.time)) if v})
        return opts

    @property
    def container_env(self) -> dict[str, str]:
        """What every worker container gets: the image's variables, then --env's."""
        return {**self.image_env, **self.env}

    @property
    def hosts(self) -> list[str]:
        return [f"node{i}" for i in range(self.nodes)]

    def mpirun_argv(self, hostfile: str) -> list[str]:
        argv = ["mpirun", "--hostfile", hostfile, "-np", str(self.nodes * self.slots)]
        iface = self.iface or ("eth0" if self.scheduler == "local" else None)
        if iface:
            argv += ["--mca", "btl_tcp_if_include", iface, "--mca", "oob_tcp_if_include", iface]
        if self.scheduler == "local" and not any(a.startswith("--bind-to") for a in self.mpirun_args):
            # Every container's orted believes it owns the whole machine and would pin its
            # first rank to core 0: N busy-polling ranks on one core (ms latencies). Local
            # workers share one host, so leave placement to the kernel.
            argv += ["--bind-to", "none"]
        for name in self.container_env:
            argv += ["-x", name]
        return argv + list(self.mpirun_args) + list(self.command)


# --- keys and files ---------------------------------------------------------------------

def make_job_dir(job: InsideOutJob, parent: Path | None = None) -> Path:
    """A 0700 directory with this job's client key, host key, ssh config and scripts."""
    ssh_keygen = shutil.which("ssh-keygen")
    if ssh_keygen is None:
        raise ImagekitError("`ssh-keygen` not found on this host", "apt-get install openssh-client")
    d = Path(tempfile.mkdtemp(prefix=f"imagekit-{job.job_id}-", dir=parent))
    try:
        for name, comment in (("id_ed25519", f"imagekit-{job.job_id}"),
                              ("ssh_host_ed25519_key", f"imagekit-{job.job_id}-host")):
            subprocess.run([ssh_keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(d / name)],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        host_pub = (d / "ssh_host_ed25519_key.pub").read_text().split()
        # One pinned host key for every worker of this job: `*` matches "[nodeN]:2222" too.
        write_atomic(d / "known_hosts", f"* {host_pub[0]} {host_pub[1]}\n", 0o644)
        write_atomic(d / "ssh_config", SSH_CONFIG, 0o644)
        write_atomic(d / "start.sh", START_SH, 0o755)
        write_atomic(d / "wait.sh", WAIT_SH, 0o755)
        write_atomic(d / "hostfile", "".join(f"{h} slots={job.slots}\n" for h in job.hosts), 0o644)
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
    return d


def _memlock() -> int:
    _soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return -1 if hard == resource.RLIM_INFINITY else hard
