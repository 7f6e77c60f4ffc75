"""Inside-out: worker containers run sshd; ``mpirun`` inside the first one starts the ranks.

For one launch imagekit makes a key pair and an sshd host key (never in the
image), mounts them read-only at ``/run/imagekit`` and each worker copies them
into place with mode 600 before starting ``sshd -D -p 2222`` (a non-default
port, so a node's own sshd is never in the way when workers use the host
network under Slurm). The launcher pins the job's host key in known_hosts
instead of turning host-key checking off.

Everything is labelled ``io.imagekit.job=<id>`` and removed on exit, failure,
Ctrl-C or SIGTERM (``finally`` + signal handlers), within ``cleanup_timeout``
seconds however slow the engine is: what it did not remove by then is named,
and carries the launcher's owner label, so the next imagekit command sweeps it
(``imagekit launch cleanup --job ID`` removes it at once). Leftovers from a
killed launcher can be found with ``docker ps -a --filter label=io.imagekit.job``.
"""

from __future__ import annotations

import concurrent.futures
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from imagekit import __version__, engine, owners, procs, quoting
from imagekit.errors import EngineError, ImagekitError, UsageError
from imagekit.image_facts import BENCHMARK
from imagekit.launch.common import (JOB_LABEL, Mount, check_choice, check_count, check_image_env, check_job,
                                    check_token, new_job_id, quote, write_atomic)
from imagekit.signals import interruptible, shielded
from imagekit.launch.slurm import check_sbatch, sbatch_header

RUNTIMES = ("docker",)
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
        check_choice("runtime", self.runtime, RUNTIMES)
        check_choice("scheduler", self.scheduler, SCHEDULERS)
        check_count("--nodes", self.nodes)
        check_count("--slots", self.slots)
        check_job(command=self.command, image=self.image, env=self.env, job_id=self.job_id,
                  args=self.mpirun_args, args_name="--mpirun-arg")
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


# --- the local (Docker) launcher ------------------------------------------------------------

class _Launch:
    def __init__(self, job: InsideOutJob, log) -> None:
        self.job, self.log = job, log
        engine.client()  # the one clear error when no engine answers; sweeps what killed runs left
        self.client = engine.bounded_client(CALL_TIMEOUT)
        self.docker = engine.docker_cli()
        self.network = f"imagekit-{job.job_id}"
        self.names = [f"imagekit-{job.job_id}-{i}" for i in range(job.nodes)]
        self.job_dir: Path | None = None
        self.timings: dict[str, float] = {}

    # lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        import docker.errors
        from docker.types import Ulimit

        job = self.job
        t0 = time.monotonic()
        # Checked first: containers.run would otherwise try to pull it from a registry.
        engine.inspect(job.image)
        self.job_dir = make_job_dir(job)

        self.client.networks.create(self.network, driver="bridge", labels={JOB_LABEL: job.job_id, **owners.labels()})
        volumes = {str(self.job_dir): {"bind": MOUNT, "mode": "ro"}}
        for m in job.mounts:
            volumes[m.src] = {"bind": m.dst, "mode": "ro" if m.readonly else "rw"}
        ml = _memlock()
        extra = {}
        if job.gpus:
            extra["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]

        def run_one(i: int):
            return self.client.containers.run(
                job.image, entrypoint=["/bin/sh", f"{MOUNT}/start.sh"], command=[], detach=True,
                name=self.names[i], hostname=job.hosts[i], network=self.network, user="0",
                labels={JOB_LABEL: job.job_id, "io.imagekit.job.role": "launcher" if i == 0 else "worker",
                        **owners.labels()},
                volumes=volumes, environment=job.container_env, shm_size=job.shm_size,
                # CMA single copy between ranks of one container (--slots > 1) needs SYS_PTRACE.
                cap_add=["SYS_PTRACE"],
                ulimits=[Ulimit(name="memlock", soft=ml, hard=ml)], **extra)

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(job.nodes, 8))
        try:
            list(pool.map(run_one, range(job.nodes)))
        except docker.errors.ImageNotFound:  # removed since the check above
            raise engine.ImageMissing(job.image) from None
        except docker.errors.APIError as exc:
            msg = str(getattr(exc, "explanation", None) or exc).strip().splitlines()[-1]
            if "/bin/sh" in msg:
                raise ImagekitError(f"image {job.image!r} has no /bin/sh", "inside-out needs a shell in the image") from None
            raise EngineError(f"starting the workers failed: {msg}", "check `docker info` and the image") from None
        finally:
            # Interrupted: start no more workers, but let the ones being created finish (each call is
            # bounded), so that the cleanup's list finds them all.
            pool.shutdown(wait=True, cancel_futures=True)
        self.timings["containers_up"] = time.monotonic() - t0

    def wait_ready(self) -> None:
        """Until the launcher reaches every worker over ssh; a worker that exits fails fast, with why."""
        job = self.job
        t0 = time.monotonic()
        proc = subprocess.Popen([self.docker, "exec", self.names[0], "sh", f"{MOUNT}/wait.sh",
                                 str(int(job.ready_timeout)), *job.hosts],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            while proc.poll() is None:
                self._raise_if_exited("while starting")
                time.sleep(0.05)
            if proc.returncode != 0:
                self._raise_if_exited("while starting")
                err = (proc.stderr.read() or "").strip().splitlines()
                raise ImagekitError(f"workers not ready after {job.ready_timeout:.0f} s: "
                                    f"{err[-1] if err else 'ssh failed'}",
                                    f"see `docker logs {self.names[-1]}`; raise --ready-timeout on a slow engine")
        finally:
            procs.stop(proc, grace=0)
        self.timings["sshd_ready"] = time.monotonic() - t0

    def _states(self) -> dict[str, tuple[str, int]]:
        import docker.errors
        import requests.exceptions

        out = {}
        try:
            listed = self.client.containers.list(all=True, filters={"label": f"{JOB_LABEL}={self.job.job_id}"})
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise EngineError(f"the engine did not list job {self.job.job_id}'s containers: {exc}",
                              "check `docker info`; the engine may be overloaded") from None
        for c in listed:
            out[c.name] = (c.status, int(c.attrs.get("State", {}).get("ExitCode", 0)))
        return out

    def _raise_if_exited(self, when: str) -> None:
        states = self._states()
        for i, name in enumerate(self.names):
            status, code = states.get(name, ("removed", -1))
            if status in ("running", "created"):
                continue
            host = self.job.hosts[i]
            if code == EXIT_NO_SSHD:
                raise ImagekitError(f"image {self.job.image!r} has no sshd (/usr/sbin/sshd)",
                                    "add the sshd component to the stack (openssh-server), "
                                    "or use an outside-in launcher: `imagekit launch mpirun|slurm`")
            if code == EXIT_NO_MPI:
                raise ImagekitError(f"image {self.job.image!r} has no MPI (mpirun/orted not on PATH)",
                                    "build from a stack with the openmpi component")
            raise ImagekitError(f"worker {host} ({name}) {status} {when} (exit code {code}): {self._tail(name)}",
                                f"see its log with `docker logs {name}` before it is removed, or rerun")

    def _tail(self, name: str) -> str:
        try:
            text = self.client.containers.get(name).logs(tail=3).decode(errors="replace").strip()
        except Exception:  # the container may already be gone
            return "no log"
        return " | ".join(text.splitlines()[-3:]) or "no log"

    def run_mpi(self, stdout=None, stderr=None) -> int:
        """``mpirun`` in the launcher container, output streamed; watches the workers meanwhile."""
        job = self.job
        cmd = [self.docker, "exec"]
        for k, v in ROOT_ENV.items():  # the containers run as root (sshd needs it)
            cmd += ["-e", f"{k}={v}"]
        cmd += [self.names[0], *job.mpirun_argv(f"{MOUNT}/hostfile")]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr)
        lost: list[str] = []
        stop = threading.Event()

        def watch() -> None:
            lost_at = None
            while not stop.wait(0.5):
                try:
                    states = self._states()
                except EngineError:  # a slow engine: ask again; the job itself is still running
                    continue
                gone = [n for n in self.names if states.get(n, ("removed", -1))[0] != "running"]
                if gone and not lost:
                    lost.extend(gone)
                    lost_at = time.monotonic()
                # mpirun normally notices a lost daemon at once; never wait forever for it.
                if lost_at is not None and time.monotonic() - lost_at > 15 and proc.poll() is None:
                    proc.terminate()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            rc = proc.wait()
        finally:
            stop.set()
            # It only reads, and is a daemon: one stuck in a slow engine call must not hold up cleanup.
            watcher.join(timeout=1.0)
            procs.stop(proc, grace=0)
        self.timings["mpirun"] = time.monotonic() - t0
        if not lost:
            states = self._states()
            lost = [n for n in self.names if states.get(n, ("removed", -1))[0] != "running"]
        if lost:
            states = self._states()
            which = ", ".join(f"{job.hosts[self.names.index(n)]} ({n}, {states.get(n, ('removed', -1))[0]}, "
                              f"exit {states.get(n, ('removed', -1))[1]})" for n in lost)
            raise ImagekitError(f"job {job.job_id} failed: worker {which} stopped while the job ran "
                                f"(mpirun exit {rc})",
                                "check the node/engine (OOM, docker stop/kill) and rerun; "
                                "no containers of this job are left")
        return rc

    def cleanup(self) -> None:
        """Remove the job's containers, network and keys; EngineError naming what is left when the
        engine has not removed them within the job's cleanup_timeout."""
        job = self.job
        with shielded():
            try:
                remove_job(job.job_id, timeout=job.cleanup_timeout)
            except engine.Unfinished as exc:
                left = list(exc.pending)
                if "containers" in exc.unlisted:
                    left += [f"container {n}" for n in self.names]
                if "networks" in exc.unlisted:
                    left.append(f"network {self.network}")
                raise EngineError(
                    f"job {job.job_id}: {exc.message}; it may have left {', '.join(left) or 'nothing'}",
                    f"they carry {JOB_LABEL}={job.job_id} and {owners.LABEL}={owners.me()}: once this "
                    f"process has exited, the next imagekit command that talks to the engine removes them, "
                    f"or run `imagekit launch cleanup --job {job.job_id}`; raise --cleanup-timeout "
                    f"for a slow engine") from None
            finally:
                if self.job_dir is not None:
                    shutil.rmtree(self.job_dir, ignore_errors=True)
                    self.job_dir = None


def remove_job(job_id: str, timeout: float | None = None) -> int:
    """Remove every container and network labelled with ``job_id``; returns how many objects went.
    With ``timeout``, within about that many seconds, or engine.Unfinished naming what is left."""
    return engine.remove_labelled(JOB_LABEL, job_id, timeout=timeout)


def execute(job: InsideOutJob, *, log=None, stdout=None, stderr=None, timings: dict | None = None) -> int:
    """Start the workers, wait for sshd, run mpirun, stream output, clean up; return mpirun's exit code."""
    if job.scheduler != "local":
        raise ImagekitError("execute() runs local Docker jobs", "use render_sbatch() for --scheduler slurm")
    log = log or (lambda msg: print(msg, file=sys.stderr))
    launch = _Launch(job, log)
    # The cleanup runs inside interruptible(): a signal during the unwinding is ignored there, where
    # outside it SIGTERM's default action would kill the launcher before it removed anything.
    with interruptible():
        ran = False
        try:
            log(f"imagekit: job {job.job_id}: starting {job.nodes} worker(s) from {job.image}")
            launch.start()
            launch.wait_ready()
            log(f"imagekit: workers up in {launch.timings['containers_up']:.1f} s, sshd ready in "
                f"{launch.timings['sshd_ready']:.1f} s; mpirun -np {job.nodes * job.slots}")
            rc = launch.run_mpi(stdout=stdout, stderr=stderr)
            ran = True
            return rc
        except KeyboardInterrupt:
            log(f"imagekit: job {job.job_id} interrupted; removing its containers "
                f"(at most {job.cleanup_timeout:g} s)")
            raise
        finally:
            if timings is not None:
                timings.update(launch.timings)
            try:
                launch.cleanup()
            except EngineError as exc:
                if ran:
                    raise
                # The job's own failure (or the interrupt) is what propagates; what is left is said here.
                log(f"imagekit: error: {exc}")


# --- the same over Slurm: srun starts the workers, the first node launches ---------------------

def render_sbatch(job: InsideOutJob) -> str:
    """An sbatch script: one worker container per node (host network, sshd on 2222), mpirun from the first."""
    q = quoting.sh_arg
    mounts = " ".join(f"-v {q(f'{m.src}:{m.dst}' + (':ro' if m.readonly else ''))}" for m in job.mounts)
    envs = " ".join(f"-e {q(f'{k}={v}')}" for k, v in job.container_env.items())
    gpus = "--gpus all " if job.gpus else ""
    argv = quote(job.mpirun_argv(f"{MOUNT}/hostfile"))

    lines = sbatch_header(job.sbatch_options())
    lines += [
        f"# Generated by imagekit {__version__}: inside-out over Slurm. srun starts one worker container",
        f"# per node (host network, sshd on port {PORT}); this script, on the first node, runs mpirun in",
        "# its local worker. The key directory must be on a filesystem all nodes see (IMAGEKIT_KEYS_DIR,",
        "# default the submit directory) and readable by the Docker daemon's root.",
        "set -euo pipefail",
        f"image={q(job.image)}",
        'name="imagekit-${SLURM_JOB_ID}"',
        'keys="${IMAGEKIT_KEYS_DIR:-$SLURM_SUBMIT_DIR}/.imagekit-${SLURM_JOB_ID}"',
        "workers=",
        "# shellcheck disable=SC2317 # invoked by the EXIT trap",
        "cleanup() {",
        '  if [ -n "$workers" ]; then kill "$workers" 2>/dev/null || true; fi',
        '  srun --overlap --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" \\',
        '    docker rm -f "$name" >/dev/null 2>&1 || true',
        '  rm -rf "$keys"',
        "}",
        "trap cleanup EXIT",
        "trap 'exit 130' INT TERM",
        'install -d -m 700 "$keys"',
        "# This job's keys: made now, mounted read-only, never part of the image.",
        'ssh-keygen -q -t ed25519 -N "" -C "$name" -f "$keys/id_ed25519"',
        'ssh-keygen -q -t ed25519 -N "" -C "$name-host" -f "$keys/ssh_host_ed25519_key"',
        'read -r kt kv _ < "$keys/ssh_host_ed25519_key.pub"',
        'printf \'* %s %s\\n\' "$kt" "$kv" > "$keys/known_hosts"',
        "cat > \"$keys/ssh_config\" <<'IMAGEKIT_EOF'",
        SSH_CONFIG.rstrip("\n"),
        "IMAGEKIT_EOF",
        "cat > \"$keys/start.sh\" <<'IMAGEKIT_EOF'",
        START_SH.rstrip("\n"),
        "IMAGEKIT_EOF",
        "cat > \"$keys/wait.sh\" <<'IMAGEKIT_EOF'",
        WAIT_SH.rstrip("\n"),
        "IMAGEKIT_EOF",
        'mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        f'printf \'%s slots={job.slots}\\n\' "${{hosts[@]}}" > "$keys/hostfile"',
        'srun --ntasks-per-node=1 --ntasks="$SLURM_JOB_NUM_NODES" \\',
        f'  docker run --rm --name "$name" --label "{JOB_LABEL}=$name" --network=host --ipc=host '
        '--cap-add=SYS_PTRACE \\',
        f'  --user 0 {gpus}{mounts + " " if mounts else ""}{envs + " " if envs else ""}'
        f'-v "$keys:{MOUNT}:ro" --entrypoint /bin/sh "$image" {MOUNT}/start.sh &',
        "workers=$!",
        "# Wait for the local worker container, then for every worker's sshd.",
        f"for _ in $(seq 1 {int(job.ready_timeout * 2)}); do",
        '  if docker exec "$name" true 2>/dev/null; then break; fi',
        "  sleep 0.5",
        "done",
        f'docker exec "$name" sh {MOUNT}/wait.sh {int(job.ready_timeout)} "${{hosts[@]}}"',
        "rc=0",
        "docker exec " + " ".join(f"-e {k}={v}" for k, v in ROOT_ENV.items()) + f' "$name" {argv} || rc=$?',
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"
