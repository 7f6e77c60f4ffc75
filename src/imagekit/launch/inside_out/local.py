"""Inside-out on this host's engine: the private network, the workers, sshd, mpirun in the first, cleanup."""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable

from imagekit.util import leases, procs
from imagekit.engines import docker as engine
from imagekit.util.errors import EngineError, ImagekitError
from imagekit.launch.common import JOB_LABEL, MPIRUN
from imagekit.launch.inside_out.job import (CALL_TIMEOUT, EXIT_NO_MPI, EXIT_NO_SSHD, MOUNT, ROOT_ENV, _memlock,
                                            make_job_dir)
from imagekit.launch.starters import Job
from imagekit.util.signals import interruptible, shielded

class _Launch:
    def __init__(self, job: Job, log) -> None:
        self.job, self.log = job, log
        engine.client()  # the one clear error when no engine answers; sweeps what killed runs left
        self.client = engine.bounded_client(CALL_TIMEOUT)
        self.docker = engine.docker_cli()
        self.network = f"imagekit-{job.workload.job_id}"
        self.names = [f"imagekit-{job.workload.job_id}-{i}" for i in range(job.starter.nodes)]
        self.job_dir: Path | None = None
        self.timings: dict[str, float] = {}

    # lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        import docker.errors
        from docker.types import Ulimit

        job = self.job
        t0 = time.monotonic()
        # Checked first: containers.run would otherwise try to pull it from a registry.
        engine.inspect(job.workload.image)
        self.job_dir = make_job_dir(job)

        self.client.networks.create(self.network, driver="bridge", labels={JOB_LABEL: job.workload.job_id, **leases.labels()})
        volumes = {str(self.job_dir): {"bind": MOUNT, "mode": "ro"}}
        for m in job.workload.mounts:
            volumes[m.src] = {"bind": m.dst, "mode": "ro" if m.readonly else "rw"}
        ml = _memlock()
        extra = {}
        if job.workload.wants_gpus:
            extra["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]

        def run_one(i: int):
            return self.client.containers.run(
                job.workload.image, entrypoint=["/bin/sh", f"{MOUNT}/start.sh"], command=[], detach=True,
                name=self.names[i], hostname=job.starter.hosts[i], network=self.network, user="0",
                labels={JOB_LABEL: job.workload.job_id, "io.imagekit.job.role": "launcher" if i == 0 else "worker",
                        **leases.labels()},
                volumes=volumes, environment=job.workload.container_env, shm_size=job.starter.shm_size,
                # CMA single copy between ranks of one container (--slots > 1) needs SYS_PTRACE.
                cap_add=["SYS_PTRACE"],
                ulimits=[Ulimit(name="memlock", soft=ml, hard=ml)], **extra)

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(job.starter.nodes, 8))
        try:
            list(pool.map(run_one, range(job.starter.nodes)))
        except docker.errors.ImageNotFound:  # removed since the check above
            raise engine.ImageMissing(job.workload.image) from None
        except docker.errors.APIError as exc:
            msg = str(getattr(exc, "explanation", None) or exc).strip().splitlines()[-1]
            if "/bin/sh" in msg:
                raise ImagekitError(f"image {job.workload.image!r} has no /bin/sh", "inside-out needs a shell in the image") from None
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
                                 str(int(job.starter.ready_timeout)), *job.starter.hosts],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            while proc.poll() is None:
                self._raise_if_exited("while starting")
                time.sleep(0.05)
            if proc.returncode != 0:
                self._raise_if_exited("while starting")
                err = (proc.stderr.read() or "").strip().splitlines()
                raise ImagekitError(f"workers not ready after {job.starter.ready_timeout:.0f} s: "
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
            listed = self.client.containers.list(all=True, filters={"label": f"{JOB_LABEL}={self.job.workload.job_id}"})
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise EngineError(f"the engine did not list job {self.job.workload.job_id}'s containers: {exc}",
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
            host = self.job.starter.hosts[i]
            if code == EXIT_NO_SSHD:
                raise ImagekitError(f"image {self.job.workload.image!r} has no sshd (/usr/sbin/sshd)",
                                    "add the sshd component to the stack (openssh-server), "
                                    "or use an outside-in launcher: `imagekit launch mpirun|slurm`")
            if code == EXIT_NO_MPI:
                raise ImagekitError(f"image {self.job.workload.image!r} has no MPI (mpirun/orted not on PATH)",
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
        cmd += [self.names[0], *job.starter.mpirun_argv(job, f"{MOUNT}/hostfile")]
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
        self.timings[MPIRUN] = time.monotonic() - t0
        if not lost:
            states = self._states()
            lost = [n for n in self.names if states.get(n, ("removed", -1))[0] != "running"]
        if lost:
            states = self._states()
            which = ", ".join(f"{job.starter.hosts[self.names.index(n)]} ({n}, {states.get(n, ('removed', -1))[0]}, "
                              f"exit {states.get(n, ('removed', -1))[1]})" for n in lost)
            raise ImagekitError(f"job {job.workload.job_id} failed: worker {which} stopped while the job ran "
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
                remove_job(job.workload.job_id, timeout=job.starter.cleanup_timeout)
            except engine.Unfinished as exc:
                left = list(exc.pending)
                if "containers" in exc.unlisted:
                    left += [f"container {n}" for n in self.names]
                if "networks" in exc.unlisted:
                    left.append(f"network {self.network}")
                raise EngineError(
                    f"job {job.workload.job_id}: {exc.message}; it may have left {', '.join(left) or 'nothing'}",
                    f"they carry {JOB_LABEL}={job.workload.job_id} and {leases.LABEL}={leases.me()}: once this "
                    f"process has exited, the next imagekit command that talks to the engine removes them, "
                    f"or run `imagekit launch cleanup --job {job.workload.job_id}`; raise --cleanup-timeout "
                    f"for a slow engine") from None
            finally:
                if self.job_dir is not None:
                    shutil.rmtree(self.job_dir, ignore_errors=True)
                    self.job_dir = None


def remove_job(job_id: str, timeout: float | None = None) -> int:
    """Remove every container and network labelled with ``job_id``; returns how many objects went.
    With ``timeout``, within about that many seconds, or engine.Unfinished naming what is left."""
    return engine.remove_labelled(JOB_LABEL, job_id, timeout=timeout)


def execute(job: Job, *, log=None, stdout=None, stderr=None, timings: dict | None = None) -> int:
    """Start the workers, wait for sshd, run mpirun, stream output, clean up; return mpirun's exit code."""
    if not job.scheduler.runs:
        raise ImagekitError("execute() runs local Docker jobs", "use render_sbatch() for --scheduler slurm")
    log = log or (lambda msg: print(msg, file=sys.stderr))
    launch = _Launch(job, log)
    # The cleanup runs inside interruptible(): a signal during the unwinding is ignored there, where
    # outside it SIGTERM's default action would kill the launcher before it removed anything.
    with interruptible():
        ran = False
        try:
            log(f"imagekit: job {job.workload.job_id}: starting {job.starter.nodes} worker(s) from "
                f"{job.workload.image}")
            launch.start()
            launch.wait_ready()
            log(f"imagekit: workers up in {launch.timings['containers_up']:.1f} s, sshd ready in "
                f"{launch.timings['sshd_ready']:.1f} s; mpirun -np {job.starter.nodes * job.starter.slots}")
            rc = launch.run_mpi(stdout=stdout, stderr=stderr)
            ran = True
            return rc
        except KeyboardInterrupt:
            log(f"imagekit: job {job.workload.job_id} interrupted; removing its containers "
                f"(at most {job.starter.cleanup_timeout:g} s)")
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


@dataclass
class InsideOutRun:
    """An inside-out :class:`Job` as a :class:`~imagekit.launch.launcher.Launcher`: sshd containers on this
    host, mpirun inside the first; ``timings`` is filled as it runs, and with ``as_json`` the job id, exit
    code and timings are its report."""

    job: Job
    log: Callable[[str], None]
    as_json: bool = False
    timings: dict = field(default_factory=dict)

    def run(self, stdout: IO[str] | None) -> int:
        return execute(self.job, log=self.log, stdout=stdout, timings=self.timings)

    def report(self, rc: int) -> str | None:
        if not self.as_json:
            return None
        return json.dumps({"job": self.job.workload.job_id, "exit_code": rc, "timings": self.timings}) + "\n"
