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

Many nodes (``--stage``, pyxis with a registry image; docs/many-nodes.md): the script's first
command is the importer's ``stage`` on the job's first node, which resolves the image once, fills
the store once, and pins every node's import to that image ID; with ``sbcast`` it also copies the
store entry to each node's local disk (``--stage-dir``) through Slurm's tree, so the job reads the
image from the shared file system once; with ``shared`` the nodes mount the shared entry itself
(Pyxis ``use_squashfuse=1``) and read only the blocks they touch.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, ClassVar

from imagekit import __version__
from imagekit.util import quoting
from imagekit.util.errors import ImagekitError, UsageError
from imagekit.image_facts import BENCHMARK
from imagekit.launch import runtimes
from imagekit.launch.common import (Mount, ScriptValues, check_choice, check_count, check_image_env, check_job,
                                    check_line, check_token, new_job_id, require_tool, write_atomic)
from imagekit.launch.runtimes import RankStart, Runtime, SrunStep

STAGES = ("none", "shared", "sbcast")


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
    stage: str = "none"                  # pyxis: none | shared | sbcast (module docstring)
    stage_dir: str = "/tmp"              # sbcast: node-local directory for the copies
    importer: str = "imagekit-pyxis-importer"   # the site's importer (its plugstack.conf importer=)
    # Slurm's topology/block placement (launch profile nvl72): nodes per segment, each segment in one block.
    segment: int | None = None
    # The runtime itself, resolved once from ``runtime`` (a name in runtimes.RUNTIMES).
    rt: Runtime = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.rt = runtimes.of(self.runtime, runtimes.SLURM)
        check_stage(self)
        check_count("--nodes", self.nodes)
        check_count("--gpus-per-node", self.gpus_per_node, 0)
        if self.ntasks_per_node is not None:
            check_count("--ntasks-per-node", self.ntasks_per_node)
        if self.cpus_per_task is not None:
            check_count("--cpus-per-task", self.cpus_per_task)
        check_job(ScriptValues(self.command, self.image, self.env, self.job_id, self.workdir), self.srun_args,
                  "--srun-arg")
        # Pyxis takes a container's variables from the job's environment, which the host's programs see.
        check_image_env(self.image, self.image_env, self.image_env_label, host=self.rt.host_env)
        if self.container_name is not None:
            check_token("--container-name", self.container_name)
        check_sbatch(self.sbatch_options())
        # --container-mounts separates entries with ',' and Enroot writes each as an fstab line.
        self.rt.check_mounts(self.mounts)

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


def check_stage(job: "SlurmJob") -> None:
    check_choice("--stage", job.stage, STAGES)
    if job.stage == "none":
        return
    if not job.rt.stages:
        raise UsageError(f"--stage {job.stage} stages what Pyxis's importer serves: it needs --runtime pyxis",
                         "drop --stage, or use --runtime pyxis")
    if job.image.startswith(("/", ".")):
        raise UsageError(f"--stage {job.stage} works with registry images (the importer's store entries), "
                         f"not the file {job.image}",
                         "Pyxis mounts a file straight from where it is: drop --stage, or give the registry "
                         "reference")
    if not job.stage_dir.startswith("/"):
        raise UsageError(f"--stage-dir {job.stage_dir!r} is not an absolute path", "e.g. --stage-dir /local/scratch")
    check_line("--stage-dir", job.stage_dir)
    check_line("--importer", job.importer)


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
    lines = sbatch_header(job.sbatch_options())
    lines.append(NOTES.format(version=__version__, runtime=job.runtime, tasks=job.tasks_per_node,
                              gpu_note=gpu_note, shm_note=job.rt.shm_note))
    lines.append("set -euo pipefail")
    env = dict(job.env)
    if job.nccl_debug:
        env.setdefault("NCCL_DEBUG", "INFO")
    lines += [f"export {k}={quoting.sh_arg(v)}" for k, v in env.items()]
    image_env = {k: v for k, v in job.image_env.items() if k not in env}   # --env wins
    srun = ["srun", "--mpi=pmix"] + list(job.srun_args)
    lines += stage_lines(job)
    rank = RankStart(image=job.image, job_id=job.job_id, mounts=job.mounts, env_names=list(env),
                     image_env=image_env, gpus=bool(job.gpus_per_node), workdir=job.workdir)
    lines += job.rt.srun_lines(SrunStep(rank=rank, srun=srun, command=list(job.command),
                                        image_env_label=job.image_env_label, container_name=job.container_name,
                                        mount_home=job.mount_home))
    return "\n".join(lines) + "\n"


STAGE_NOTE = """\
# {mode}: {why}
# The importer's stage step (docs/many-nodes.md) resolves the image once, fills the store once
# and pins every node to that image ID; a failure names the node and stops the job here."""
STAGE_WHY = {"sbcast": "copy the image to every node's local disk (Slurm's sbcast tree), reading it once "
                       "from the shared file system",
             "shared": "every node mounts the shared store's file (Pyxis use_squashfuse=1) and reads only "
                       "the blocks it touches"}


def stage_lines(job: SlurmJob) -> list[str]:
    """The job's first step for ``--stage`` (none: no lines)."""
    if job.stage == "none":
        return []
    uri = job.image if job.image.startswith(("docker://", "dockerd://")) else f"docker://{job.image}"
    env = {"IMAGEKIT_STAGE": job.stage, "IMAGEKIT_STAGE_IMAGE": uri, "IMAGEKIT_IMPORTER": job.importer}
    if job.stage == "sbcast":
        env["IMAGEKIT_STAGE_DIR"] = job.stage_dir
    return [STAGE_NOTE.format(mode=f"--stage {job.stage}", why=STAGE_WHY[job.stage])] + \
        [f"export {k}={quoting.sh_arg(v)}" for k, v in env.items()] + [
        f'staged=$("$IMAGEKIT_IMPORTER" stage --mode {job.stage} "$IMAGEKIT_STAGE_IMAGE")',
        'read -r IMAGEKIT_STAGE_IMAGE_ID IMAGEKIT_STAGE_SHA256 <<<"$staged"',
        "export IMAGEKIT_STAGE_IMAGE_ID IMAGEKIT_STAGE_SHA256",
    ]


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
