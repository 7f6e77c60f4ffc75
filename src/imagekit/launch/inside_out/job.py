"""The inside-out job's files: the scripts and ssh files every worker gets, and its key directory."""

from __future__ import annotations

import resource
import shutil
import subprocess
import tempfile
from pathlib import Path

from imagekit.util.errors import ImagekitError
from imagekit.launch.common import write_atomic
from imagekit.launch.starters import Job

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
# mpirun starts orted (Open MPI 4, ORTE) or prted (Open MPI 5, PRRTE) on every worker over ssh.
if ! command -v mpirun >/dev/null 2>&1 || ! {{ command -v orted || command -v prted; }} >/dev/null 2>&1; then
  echo "imagekit: this image has no Open MPI (mpirun, and orted or prted, not on PATH)" >&2
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


# --- keys and files ---------------------------------------------------------------------

def make_job_dir(job: Job, parent: Path | None = None) -> Path:
    """A 0700 directory with this job's client key, host key, ssh config and scripts."""
    job_id, starter = job.workload.job_id, job.starter
    ssh_keygen = shutil.which("ssh-keygen")
    if ssh_keygen is None:
        raise ImagekitError("`ssh-keygen` not found on this host", "apt-get install openssh-client")
    d = Path(tempfile.mkdtemp(prefix=f"imagekit-{job_id}-", dir=parent))
    try:
        for name, comment in (("id_ed25519", f"imagekit-{job_id}"),
                              ("ssh_host_ed25519_key", f"imagekit-{job_id}-host")):
            subprocess.run([ssh_keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(d / name)],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        host_pub = (d / "ssh_host_ed25519_key.pub").read_text().split()
        # One pinned host key for every worker of this job: `*` matches "[nodeN]:2222" too.
        write_atomic(d / "known_hosts", f"* {host_pub[0]} {host_pub[1]}\n", 0o644)
        write_atomic(d / "ssh_config", SSH_CONFIG, 0o644)
        write_atomic(d / "start.sh", START_SH, 0o755)
        write_atomic(d / "wait.sh", WAIT_SH, 0o755)
        write_atomic(d / "hostfile", "".join(f"{h} slots={starter.slots}\n" for h in starter.hosts), 0o644)
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
    return d


def _memlock() -> int:
    _soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return -1 if hard == resource.RLIM_INFINITY else hard
