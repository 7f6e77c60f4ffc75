"""Outside-in without Slurm: the host's ``mpirun`` starts one container per rank.

``imagekit launch mpirun`` writes two scripts into a job directory:
``rank.sh`` (the per-rank wrapper, see ``wrapper.py``) and ``run.sh`` (the
``mpirun`` line). Across several hosts the directory must be on a filesystem
every host sees at the same path, as with any ``mpirun`` executable. The host's
Open MPI must match the image's (same major.minor): host ``mpirun``/``orted``
and the ranks' MPI library speak one wire protocol.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, ClassVar

from imagekit import __version__
from imagekit.util import procs, quoting
from imagekit.engines import docker as engine
from imagekit.util.errors import EngineError, UsageError
from imagekit.launch.common import (JOB_LABEL, MPIRUN, check_count, check_token, check_words, quote, require_tool,
                                    write_atomic)
from imagekit.launch.opts import DIR, opt
from imagekit.launch.runtimes import RankStart, Runtime
from imagekit.launch.starters import Job, LauncherNeeds, Output, Starter
from imagekit.launch.workload import ALL_GPUS
from imagekit.util.signals import interruptible, shielded


def parse_hosts(text: str) -> list[tuple[str, int]]:
    """``h1:4,h2:4`` (slots after the colon, default 1) or the path of an Open MPI hostfile."""
    path = Path(text)
    if "," not in text and ":" not in text and path.is_file():
        out = []
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.match(r"^(\S+)(?:\s+slots\s*=\s*(\d+))?", line)
            out.append((m.group(1), int(m.group(2) or 1)))
        if not out:
            raise UsageError(f"hostfile {text} lists no hosts", "write one `HOST slots=N` per line")
        return out
    out = []
    for item in text.split(","):
        host, _, slots = item.strip().partition(":")
        if not host or (slots and not slots.isdigit()):
            raise UsageError(f"bad host entry {item!r}", "write HOST[:SLOTS],HOST[:SLOTS] or a hostfile path")
        out.append((host, check_count("slots", int(slots or 1))))
    return out


def on_this_host(hosts: list[tuple[str, int]]) -> bool:
    """True when mpirun starts ranks on this machine (so a runtime missing here fails the job)."""
    # No getfqdn(): its reverse DNS lookup can hang for seconds where DNS is broken.
    name = socket.gethostname()
    here = {"localhost", "127.0.0.1", "::1", name, name.split(".")[0]}
    return any(host in here for host, _ in hosts)


@dataclass(frozen=True)
class HostMpirun(Starter):
    """The host's ``mpirun`` starts one container per rank through ``rank.sh``: on ``hosts`` (name,
    slots), ``np`` ranks (None: every slot), with the extra ``mpirun_args``."""

    hosts: tuple[tuple[str, int], ...]
    np: int | None = None
    mpirun_args: tuple[str, ...] = ()
    needs: ClassVar = LauncherNeeds(host_mpirun=True,
                                    gpu_fix="imagekit launch mpirun sets it for ranks without --gpus")
    hides_gpus: ClassVar = True
    options: ClassVar = (
        opt("--hosts", "-H", required=True, help="HOST[:SLOTS],... or an Open MPI hostfile path."),
        opt("--np", type=int, help="Ranks (default: sum of slots)."),
        opt("--gpus", type=bool, help="Give each rank the host's GPUs (--gpus all / --nv / Enroot's GPU hook); "
                                      "without it ranks get NVIDIA_VISIBLE_DEVICES=void if the image asks for GPUs."),
        opt("--mpirun-arg", dest="mpirun_args", multiple=True, help="Extra mpirun argument (repeatable)."),
        opt("--output-dir", "-o", dest="into", path=DIR, help="Write run.sh + rank.sh here and do not run them."),
        opt("--dry-run", type=bool, help="Print run.sh and rank.sh instead of running."),
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "hosts", tuple(self.hosts))
        if not self.hosts:
            raise UsageError("no hosts given", "pass --hosts HOST[:SLOTS],...")
        if self.np is not None:
            check_count("--np", self.np)
        for host, slots in self.hosts:
            check_token("host", host)
            check_count("slots", slots)
        object.__setattr__(self, "mpirun_args", tuple(check_words("--mpirun-arg", list(self.mpirun_args))))

    @classmethod
    def accepts(cls, runtime: Runtime) -> bool:
        return runtime.rank_wrapper_kind

    @classmethod
    def from_options(cls, values: dict) -> "HostMpirun":
        hosts = values["hosts"]
        return cls(hosts=tuple(parse_hosts(hosts) if isinstance(hosts, str) else hosts), np=values.get("np"),
                   mpirun_args=tuple(values.get("mpirun_args") or ()))

    def gpus(self, values: dict) -> int:
        return ALL_GPUS if values.get("gpus") else 0

    @property
    def ranks(self) -> int:
        return self.np or sum(slots for _, slots in self.hosts)

    def files(self, job: Job, docker: str = "docker") -> list[Output]:
        return [Output("run.sh", render_run(job, docker)), Output("rank.sh", render_wrapper(job, docker))]

    def launcher(self, job: Job, log: Callable[[str], None]) -> "MpirunRun":
        require_tool(MPIRUN, "install Open MPI on the hosts (Debian: apt-get install openmpi-bin), "
                               "or use `imagekit launch inside-out`")
        return MpirunRun(job, log)

    def runs_here(self) -> bool:
        return on_this_host(list(self.hosts))


def render_run(job: Job, docker: str = "docker") -> str:
    """``run.sh``: exports, root opt-in, ``mpirun … rank.sh CMD``, and container cleanup on exit.
    It runs on the host: it exports the job's ``--env`` only, never the image's variables."""
    q = quoting.sh_arg
    w, starter = job.workload, job.starter
    hosts = ",".join(f"{h}:{s}" for h, s in starter.hosts)
    lines = [
        "#!/bin/bash",
        f"# Generated by imagekit {__version__}: outside-in mpirun, {w.runtime.name} runtime, job {w.job_id}.",
        "# Host Open MPI starts one container per rank through rank.sh (same directory).",
        "set -euo pipefail",
        'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        f"export IMAGEKIT_JOB_ID={q(w.job_id)}",
    ]
    lines += [f"export {k}={q(v)}" for k, v in w.env.items()]
    lines += w.runtime.run_cleanup(docker)
    lines += [
        'if [ "$(id -u)" = 0 ]; then',
        "  # Open MPI refuses root unless told twice; containers commonly run as root.",
        "  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
        "fi",
        "rc=0",
        # -x: Open MPI passes the exports to ranks on other hosts only when named.
        f"mpirun -np {starter.ranks} --host {q(hosts)} -x IMAGEKIT_JOB_ID"
        + "".join(f" -x {k}" for k in w.env)
        + (" " + quote(list(starter.mpirun_args)) if starter.mpirun_args else "")
        + f' "$here/rank.sh" {quote(w.command)} || rc=$?',
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def render_wrapper(job: Job, docker: str = "docker") -> str:
    w = job.workload
    return w.runtime.rank_wrapper(RankStart(workload=w, env_names=list(w.env), pass_gpus=w.wants_gpus,
                                            docker=docker))


def write(job: Job, directory: Path, docker: str = "docker") -> Path:
    """Write ``rank.sh`` and ``run.sh`` into ``directory``; returns the run script."""
    directory = Path(directory)
    write_atomic(directory / "rank.sh", render_wrapper(job, docker))
    return write_atomic(directory / "run.sh", render_run(job, docker))


def _docker_cli() -> str:
    return engine.docker_cli()


def execute(job: Job, directory: Path | None = None, *, keep: bool = False, log=None,
            stdout=None, stderr=None) -> int:
    """Write the scripts, run them with the host's mpirun, stream output; return the job's exit code."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    require_tool(MPIRUN, "install Open MPI on the hosts (Debian: apt-get install openmpi-bin), "
                           "or use `imagekit launch inside-out` / `launch slurm`")
    w, rt = job.workload, job.workload.runtime
    # The engine's CLI starts the engine runtime's ranks; the others are a program every host needs.
    docker = _docker_cli() if rt.engine else "docker"
    if not rt.engine:
        require_tool(rt.name, f"install {rt.name} on every host, or use --runtime docker")
    made = directory is None
    directory = Path(directory or Path.cwd() / f"imagekit-{w.job_id}")
    run_sh = write(job, directory, docker)
    log(f"imagekit: job {w.job_id}: {job.starter.ranks} ranks on {len(job.starter.hosts)} host(s), "
        f"scripts in {directory}")
    proc = None
    try:
        with interruptible():
            proc = subprocess.Popen(["bash", str(run_sh)], start_new_session=False, stdout=stdout,
                                    stderr=stderr)
            return proc.wait()
    finally:
        with shielded():
            if proc is not None:
                procs.stop(proc, grace=15)
            if rt.engine:
                remove_containers(w.job_id)
            if made and not keep:
                shutil.rmtree(directory, ignore_errors=True)


def remove_containers(job_id: str) -> None:
    """Remove this host's containers of the job (its rank wrappers label them); best effort."""
    try:
        engine.remove_labelled(JOB_LABEL, job_id)
    except EngineError:  # no engine answers: nothing of the job can be left in it to remove
        pass


@dataclass
class MpirunRun:
    """A :class:`HostMpirun` job as a :class:`~imagekit.launch.launcher.Launcher`: the host's mpirun starts it."""

    job: Job
    log: Callable[[str], None]

    def run(self, stdout: IO[str] | None) -> int:
        return execute(self.job, log=self.log, stdout=stdout)
