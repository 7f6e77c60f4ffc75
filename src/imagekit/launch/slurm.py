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

from dataclasses import dataclass
from typing import ClassVar

from imagekit import __version__
from imagekit.util import quoting
from imagekit.util.errors import UsageError
from imagekit.launch.common import check_choice, check_count, check_line, check_token, check_words
from imagekit.launch.opts import FILE, opt
from imagekit.launch.runtimes import RankStart, Runtime, SrunStep
from imagekit.launch.schedulers import Slurm
from imagekit.launch.starters import Job, LauncherNeeds, Output, Starter
from imagekit.launch.workload import ALL_GPUS, Workload

STAGES = ("none", "shared", "sbcast")


@dataclass(frozen=True)
class Srun(Starter):
    """``srun --mpi=pmix`` starts one container per task: the options of the srun step (``srun_args``,
    ``nccl_debug``), Pyxis's (``container_name``, ``mount_home``: None keeps the site's Enroot default)
    and ``--stage`` (module docstring)."""

    srun_args: tuple[str, ...] = ()
    nccl_debug: bool = False
    mount_home: bool | None = None
    container_name: str | None = None
    stage: str = "none"
    stage_dir: str = "/tmp"
    importer: str = "imagekit-pyxis-importer"
    needs: ClassVar = LauncherNeeds(here=False, gpu_fix="imagekit launch slurm sets it for jobs without "
                                                        "--gpus-per-node")
    hides_gpus: ClassVar = True
    options: ClassVar = (
        opt("--nodes", "-N", type=int, required=True),
        opt("--gpus-per-node", dest="gpus", type=int, default=0, show_default=True,
            help="GPUs per node; one task per GPU unless --ntasks-per-node. 0: a CPU-only job, whose "
                 "containers get NVIDIA_VISIBLE_DEVICES=void if the image asks for GPUs."),
        opt("--ntasks-per-node", dest="tasks_per_node", type=int, help="Tasks per node (CPU-only default 1)."),
        opt("--cpus-per-task", type=int),
        opt("--partition", "-p"),
        opt("--time", "-t", metavar="[D-]HH:MM:SS"),
        opt("--account", "-A"),
        opt("--job-name", default="imagekit", show_default=True),
        opt("--container-name", help="Pyxis: keep/reuse a named container for the job."),
        opt("--mount-home/--no-mount-home", type=bool, default=None,
            help="Pyxis: (do not) bind the home directory."),
        opt("--nccl-debug", type=bool, help="export NCCL_DEBUG=INFO in the job."),
        opt("--srun-arg", dest="srun_args", multiple=True, help="Extra srun argument (repeatable)."),
        opt("--stage", type=STAGES, default="none", show_default=True,
            help="Pyxis, registry image, many nodes (docs/many-nodes.md): resolve and fill the store once "
                 "in the job's first step; sbcast: then copy the image to each node's local disk (one read "
                 "of the shared file system per job); shared: nodes mount the shared store's file lazily "
                 "(Pyxis use_squashfuse=1)."),
        opt("--stage-dir", default="/tmp", show_default=True, metavar="DIR",
            help="--stage sbcast: node-local directory for the copies (a local disk, not a tmpfs)."),
        opt("--importer", default="imagekit-pyxis-importer", show_default=True, metavar="PATH",
            help="--stage: the importer on the nodes (the path in Pyxis's plugstack.conf importer=)."),
        opt("--output", "-o", path=FILE, help="Write the sbatch script here."),
        opt("--dry-run/--submit", type=bool, default=True,
            help="Print the script (default) or submit it with sbatch."),
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "srun_args", tuple(check_words("--srun-arg", list(self.srun_args))))
        check_choice("--stage", self.stage, STAGES)
        if self.container_name is not None:
            check_token("--container-name", self.container_name)

    @classmethod
    def accepts(cls, runtime: Runtime) -> bool:
        return True     # each runtime starts a task's container: its own srun flags, or the rank wrapper

    @classmethod
    def from_options(cls, values: dict) -> "Srun":
        keys = ("nccl_debug", "mount_home", "container_name", "stage", "stage_dir", "importer")
        return cls(srun_args=tuple(values.get("srun_args") or ()),
                   **{k: values[k] for k in keys if values.get(k) is not None})

    def gpus(self, values: dict) -> int:
        # Anything naming GPUs among srun's own arguments (--gres=gpu:N, --gpus…, a gpu partition) keeps the
        # GPU runtime: in doubt, GPUs the user may have asked for are not hidden.
        asked = check_count("--gpus-per-node", values.get("gpus") or 0, 0)
        return asked or (ALL_GPUS if any("gpu" in a.lower() for a in self.srun_args) else 0)

    def job_env(self, env: dict[str, str]) -> dict[str, str]:
        """--nccl-debug: NCCL_DEBUG=INFO, unless the job sets it."""
        return {**env, "NCCL_DEBUG": env.get("NCCL_DEBUG", "INFO")} if self.nccl_debug else env

    def check(self, job: Job) -> None:
        """What only this starter refuses: ``--stage`` without Pyxis or with a file image."""
        workload = job.workload
        for flag, given in (("--container-name", self.container_name is not None),
                            ("--mount-home/--no-mount-home", self.mount_home is not None)):
            if given and not workload.runtime.container_flags:
                raise UsageError(f"slurm --runtime {workload.runtime.name}: {flag} is Pyxis's, and this runtime has "
                                 "no such setting", f"drop {flag.split('/')[0]}, or use --runtime pyxis")
        if self.stage == "none":
            return
        if workload.runtime is None or not workload.runtime.stages:
            raise UsageError(f"--stage {self.stage} stages what Pyxis's importer serves: it needs --runtime pyxis",
                             "drop --stage, or use --runtime pyxis")
        if workload.image.startswith(("/", ".")):
            raise UsageError(f"--stage {self.stage} works with registry images (the importer's store entries), "
                             f"not the file {workload.image}",
                             "Pyxis mounts a file straight from where it is: drop --stage, or give the registry "
                             "reference")
        if not self.stage_dir.startswith("/"):
            raise UsageError(f"--stage-dir {self.stage_dir!r} is not an absolute path",
                             "e.g. --stage-dir /local/scratch")
        check_line("--stage-dir", self.stage_dir)
        check_line("--importer", self.importer)

    def files(self, job: Job) -> list[Output]:
        beside = job.workload.runtime.files(job.workload)
        script = Output(f"{job.scheduler.job_name}-{job.workload.job_id}.sbatch", render(job, beside))
        return [script] + [Output(name, text, 0o644) for name, text in beside.items()]



NOTES = """\
# Generated by imagekit {version} ({runtime} runtime). Notes for the site:
# - {tasks} task(s) per node{gpu_note}; srun --mpi=pmix needs Slurm's pmix plugin with the same
#   PMIx major as the image (check: `srun --mpi=list`, `imagekit preflight --scheduler slurm`).
# - RDMA (UCX/verbs/NCCL IB) pins memory: tasks inherit slurmd's memlock limit, so slurmd needs
#   LimitMEMLOCK=infinity and MEMLOCK must not be excluded by PropagateResourceLimits(Except).
# - NCCL and shared-memory transports use /dev/shm: the runtime shares the node's /dev/shm{shm_note}.
# - Set NCCL_DEBUG=INFO (imagekit: --nccl-debug) to see which transport NCCL picked."""


def render(job: Job, beside: dict[str, str] | None = None) -> str:
    """The complete sbatch script for ``job`` (an :class:`Srun` job under :class:`Slurm`); ``beside``:
    the files its runtime writes next to it, which the script names by their absolute paths."""
    w, slurm, srun = job.workload, job.scheduler, job.starter
    assert isinstance(slurm, Slurm) and isinstance(srun, Srun)
    gpus = w.gpus if w.gpus > 0 else 0
    gpu_note = f", one per GPU ({gpus} GPUs per node)" if gpus else " (CPU only)"
    lines = slurm.preamble(w.gpus)
    lines.append(NOTES.format(version=__version__, runtime=w.runtime.name, tasks=slurm.tasks(w.gpus),
                              gpu_note=gpu_note, shm_note=w.runtime.shm_note))
    lines.append("set -euo pipefail")
    lines += [f"export {k}={quoting.sh_arg(v)}" for k, v in w.env.items()]
    lines += stage_lines(w, srun)
    rank = RankStart(workload=w, env_names=list(w.env), pass_gpus=bool(gpus))
    beside = w.runtime.files(w) if beside is None else beside
    where = {name: str(slurm.beside(name)) for name in beside}
    lines += w.runtime.srun_lines(SrunStep(rank=rank, srun=["srun", "--mpi=pmix", *srun.srun_args],
                                           container_name=srun.container_name, mount_home=srun.mount_home,
                                           files=where))
    return "\n".join(lines) + "\n"


STAGE_NOTE = """\
# {mode}: {why}
# The importer's stage step (docs/many-nodes.md) resolves the image once, fills the store once
# and pins every node to that image ID; a failure names the node and stops the job here."""
STAGE_WHY = {"sbcast": "copy the image to every node's local disk (Slurm's sbcast tree), reading it once "
                       "from the shared file system",
             "shared": "every node mounts the shared store's file (Pyxis use_squashfuse=1) and reads only "
                       "the blocks it touches"}


def stage_lines(workload: Workload, srun: Srun) -> list[str]:
    """The job's first step for ``--stage`` (none: no lines)."""
    if srun.stage == "none":
        return []
    image = workload.image
    uri = image if image.startswith(("docker://", "dockerd://")) else f"docker://{image}"
    env = {"IMAGEKIT_STAGE": srun.stage, "IMAGEKIT_STAGE_IMAGE": uri, "IMAGEKIT_IMPORTER": srun.importer}
    if srun.stage == "sbcast":
        env["IMAGEKIT_STAGE_DIR"] = srun.stage_dir
    return [STAGE_NOTE.format(mode=f"--stage {srun.stage}", why=STAGE_WHY[srun.stage])] + \
        [f"export {k}={quoting.sh_arg(v)}" for k, v in env.items()] + [
        f'staged=$("$IMAGEKIT_IMPORTER" stage --mode {srun.stage} "$IMAGEKIT_STAGE_IMAGE")',
        'read -r IMAGEKIT_STAGE_IMAGE_ID IMAGEKIT_STAGE_SHA256 <<<"$staged"',
        "export IMAGEKIT_STAGE_IMAGE_ID IMAGEKIT_STAGE_SHA256",
    ]
