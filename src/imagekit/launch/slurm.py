"""Outside-in under Slurm: an sbatch script whose ``srun --mpi=pmix`` starts one container per task.

Runtimes:

- ``pyxis``: ``srun --mpi=pmix --container-image=REF --container-mounts=…``
  (flags as documented in NVIDIA/pyxis's usage: ``--container-image``,
  ``--container-mounts=SRC:DST[:FLAGS]`` with ``+``-separated flags,
  ``--container-workdir``, ``--container-name``, ``--container-env``,
  ``--[no-]container-mount-home``, ``--container-remap-root``). Pyxis/Enroot
  hooks bring in PMIx and GPUs.
- ``apptainer`` / ``enroot`` / ``docker``: ``srun --mpi=pmix`` runs the rank
  wrapper (``wrapper.py``) through ``bash -c`` so the script is self-contained
  (no shared filesystem needed for the wrapper); the wrapper binds
  ``$PMIX_SERVER_TMPDIR`` (set per step by slurmstepd), without which every
  rank comes up as rank 0 of 1.

Defaults: one task per GPU (``--ntasks-per-node`` = GPUs per node); CPU-only
jobs take ``--ntasks-per-node`` from the option (default 1).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, ClassVar

from imagekit import __version__, quoting
from imagekit.errors import ImagekitError
from imagekit.image_facts import BENCHMARK
from imagekit.launch import wrapper
from imagekit.launch.common import (Mount, check_choice, check_count, check_image_env, check_job, check_token,
                                    new_job_id, quote, require_tool, write_atomic)

RUNTIMES = ("pyxis", "apptainer", "enroot", "docker")


@dataclass
class SlurmJob:
    image: str
    nodes: int
    command: list[str]
    runtime: str = "pyxis"
    gpus_per_node: int = 0
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    partition: str | None = None
    time: str | None = None
    job_name: str = "imagekit"
    account: str | None = None
    mounts: list[Mount] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    nccl_debug: bool = False
    mount_home: bool | None = None      # pyxis: None keeps the site's enroot default
    container_name: str | None = None   # pyxis: reuse one container across steps of the job
    srun_args: list[str] = field(default_factory=list)
    job_id: str = field(default_factory=new_job_id)
    # The image's own variables (its benchmark label): the containers' only, see common.check_image_env.
    image_env: dict[str, str] = field(default_factory=dict)
    image_env_label: str = BENCHMARK
    # Slurm's topology/block placement (launch profile nvl72): nodes per segment, each segment in one block.
    segment: int | None = None

    def __post_init__(self) -> None:
        check_choice("runtime", self.runtime, RUNTIMES)
        check_count("--nodes", self.nodes)
        check_count("--gpus-per-node", self.gpus_per_node, 0)
        if self.ntasks_per_node is not None:
            check_count("--ntasks-per-node", self.ntasks_per_node)
        if self.cpus_per_task is not None:
            check_count("--cpus-per-task", self.cpus_per_task)
        check_job(command=self.command, image=self.image, env=self.env, job_id=self.job_id,
                  args=self.srun_args, args_name="--srun-arg", workdir=self.workdir)
        # Pyxis takes a container's variables from the job's environment, which the host's programs see.
        check_image_env(self.image, self.image_env, self.image_env_label, host=self.runtime == "pyxis")
        if self.container_name is not None:
            check_token("--container-name", self.container_name)
        check_sbatch(self.sbatch_options())
        if self.runtime in ("pyxis", "enroot"):
            # --container-mounts separates entries with ',' and Enroot writes each as an fstab line.
            for m in self.mounts:
                m.check_fstab(self.runtime)

    def sbatch_options(self) -> dict[str, str]:
        """The ``#SBATCH --OPTION=VALUE`` lines, in order (values are checked to be one token)."""
        opts = {"job-name": self.job_name, "nodes": str(self.nodes), "ntasks-per-node": str(self.tasks_per_node)}
        if self.gpus_per_node:
            opts["gpus-per-node"] = str(self.gpus_per_node)
        if self.cpus_per_task:
            opts["cpus-per-task"] = str(self.cpus_per_task)
        if self.segment:
            # topology/block: every `segment` nodes from one block (the site's block is one NVLink domain),
            # and the job's one srun step spans them. An sbatch that predates the option refuses it.
            opts["segment"] = str(self.segment)
        for opt, val in (("partition", self.partition), ("time", self.time), ("account", self.account)):
            if val:
                opts[opt] = val
        return opts

    @property
    def tasks_per_node(self) -> int:
        if self.ntasks_per_node:
            return self.ntasks_per_node
        return self.gpus_per_node or 1


def check_sbatch(options: dict[str, str]) -> None:
    for option, value in options.items():
        quoting.sbatch_value(value, f"--{option}", "launch")


def sbatch_header(options: dict[str, str]) -> list[str]:
    return ["#!/bin/bash"] + [f"#SBATCH --{opt}={quoting.sbatch_value(val, f'--{opt}')}"
                              for opt, val in options.items()]


NOTES = """\
# Generated by imagekit {version} ({runtime} runtime). Notes for the site:
# - {tasks} task(s) per node{gpu_note}; srun --mpi=pmix needs Slurm's pmix plugin with the same
#   PMIx major as the image (check: `srun --mpi=list`, `imagekit preflight --scheduler slurm`).
# - RDMA (UCX/verbs/NCCL IB) pins memory: tasks inherit slurmd's memlock limit, so slurmd needs
#   LimitMEMLOCK=infinity and MEMLOCK must not be excluded by PropagateResourceLimits(Except).
# - NCCL and shared-memory transports use /dev/shm: the runtime shares the node's /dev/shm{shm_note}.
# - Set NCCL_DEBUG=INFO (imagekit: --nccl-debug) to see which transport NCCL picked."""


def render(job: SlurmJob) -> str:
    """The complete sbatch script for ``job``."""
    gpu_note = f", one per GPU ({job.gpus_per_node} GPUs per node)" if job.gpus_per_node else " (CPU only)"
    shm_note = "; size it to several GiB" if job.runtime != "docker" else " (--ipc=host)"
    lines = sbatch_header(job.sbatch_options())
    lines.append(NOTES.format(version=__version__, runtime=job.runtime, tasks=job.tasks_per_node,
                              gpu_note=gpu_note, shm_note=shm_note))
    lines.append("set -euo pipefail")
    env = dict(job.env)
    if job.nccl_debug:
        env.setdefault("NCCL_DEBUG", "INFO")
    lines += [f"export {k}={quoting.sh_arg(v)}" for k, v in env.items()]
    image_env = {k: v for k, v in job.image_env.items() if k not in env}   # --env wins
    srun = ["srun", "--mpi=pmix"] + list(job.srun_args)
    if job.runtime == "pyxis":
        if image_env:
            # Pyxis reads them from srun's environment: only names checked safe there (check_image_env).
            lines.append(f"# The image's own variables (label {job.image_env_label}), for --container-env:")
            lines += [f"export {k}={quoting.sh_arg(v)}" for k, v in image_env.items()]
        srun += _pyxis_flags(job, list(env) + list(image_env))
        lines.append(quote(srun) + " " + quote(job.command))
    else:
        text = wrapper.render(job.runtime, job.image, job_id=job.job_id, mounts=job.mounts,
                              env_names=list(env), gpus=bool(job.gpus_per_node), workdir=job.workdir,
                              image_env=image_env)
        lines += [
            'export IMAGEKIT_JOB_ID="imagekit-${SLURM_JOB_ID:-local}"',
            "# The per-rank wrapper, passed to every task with bash -c (no shared filesystem needed).",
            # One single-quoted word: no heredoc marker for a value to collide with.
            "# shellcheck disable=SC2016 # expanded by each task's bash, not here",
            f"rank_wrapper={quoting.sh(text)}",
        ]
        if job.runtime == "docker":
            lines += [
                "# Ranks killed hard leave containers behind: remove this job's on every node at exit.",
                "trap 'srun --overlap --nodes=\"$SLURM_JOB_NUM_NODES\" --ntasks=\"$SLURM_JOB_NUM_NODES\" sh -c \"docker ps -q --filter "
                "label=io.imagekit.job=$IMAGEKIT_JOB_ID | xargs -r docker rm -f >/dev/null\" || true' EXIT",
            ]
        lines.append(quote(srun) + ' bash -c "$rank_wrapper" imagekit-rank ' + quote(job.command))
    return "\n".join(lines) + "\n"


def _pyxis_flags(job: SlurmJob, env_names: list[str]) -> list[str]:
    flags = [f"--container-image={job.image}"]
    if job.mounts:
        flags.append("--container-mounts=" + ",".join(
            f"{m.src}:{m.dst}" + (":ro" if m.readonly else "") for m in job.mounts))
    if job.workdir:
        flags.append(f"--container-workdir={job.workdir}")
    if job.container_name:
        flags.append(f"--container-name={job.container_name}")
    if env_names:
        # Exported variables reach the container anyway, but the image's values win unless listed here.
        flags.append("--container-env=" + ",".join(env_names))
    if job.mount_home is True:
        flags.append("--container-mount-home")
    elif job.mount_home is False:
        flags.append("--no-container-mount-home")
    return flags


def write(job: SlurmJob, path: Path) -> Path:
    return write_atomic(Path(path), render(job))


def submit(script: Path, *, extra: list[str] = ()) -> str:
    """``sbatch --parsable SCRIPT``; returns the Slurm job id."""
    sbatch = require_tool("sbatch", "run on a Slurm login node, or write the script with --dry-run / -o and "
                                    "copy it there")
    proc = subprocess.run([sbatch, "--parsable", *extra, str(script)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        msg = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        raise ImagekitError(f"sbatch refused {script}: {msg}", "check the partition/time/GPU options with `sinfo`")
    return proc.stdout.strip().split(";")[0]


def submit_and_wait(script: Path, output: Path) -> tuple[str, int, str]:
    """``sbatch --wait`` with the job's output in ``output``: (job id, the job's exit code, its output)."""
    sbatch = require_tool("sbatch", "run on a Slurm login node, or write the script with --dry-run / -o and "
                                    "copy it there")
    proc = subprocess.run([sbatch, "--parsable", "--wait", f"--output={output}", str(script)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job_id = proc.stdout.strip().split(";")[0]
    if not job_id:
        msg = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        raise ImagekitError(f"sbatch refused {script}: {msg}", "check the partition/time/GPU options with `sinfo`")
    text = output.read_text(errors="replace") if output.exists() else ""
    return job_id, proc.returncode, text


@dataclass
class SlurmRun:
    """A written sbatch script as a :class:`~imagekit.launch.launcher.Launcher`: submitted, waited for,
    and its job's output file handed to ``stdout`` at the end (the job runs on the compute nodes)."""

    script: Path
    output: Path
    log: Callable[[str], None]
    name: ClassVar[str] = "slurm"

    def run(self, stdout: IO[str] | None) -> int:
        job_id, rc, text = submit_and_wait(self.script, self.output)
        self.log(f"imagekit: Slurm job {job_id} ended (exit {rc})")
        if stdout is not None:
            stdout.write(text)
            stdout.flush()
        return rc
