"""The workload: what runs in every rank's container, whichever scheduler and rank starter run it.

One :class:`Workload` is built per launch, from the request, the image's facts and the launch
profiles, and checked once here: the command, the image, the job's and the image's environment, the
mounts the runtime can carry. The GPU policy is decided here too: whether the job asks for GPUs, and
so whether a CPU-only job's containers get ``NVIDIA_VISIBLE_DEVICES=void`` (the runtime says whether
the variable alone would start its GPU hook). Schedulers and rank starters read the workload; none of
them declares its fields again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from imagekit.image_facts import BENCHMARK
from imagekit.launch import gpu_env
from imagekit.launch.common import Mount, check_image_env, check_job, new_job_id
from imagekit.launch.mpi import MpiFlavour
from imagekit.launch.traits import ImageTraits

# Workload.gpus where GPUs are asked for without a count: "all of the host's" (docker --gpus all,
# apptainer --nv), or a GPU request among srun's own arguments (--gres=gpu:4).
ALL_GPUS = -1


class Runtime(Protocol):
    """What the workload asks of its container runtime (:class:`imagekit.launch.runtimes.Runtime`, which
    builds on this module: a runtime's rank wrapper starts a workload)."""

    name: str
    host_env: bool

    def check_mounts(self, mounts: Sequence[Mount]) -> None: ...

    def check_image(self, image: str) -> None: ...

    def cpu_only_env(self, env: dict[str, str], image_env: Mapping[str, str] | None) -> dict[str, str]: ...


@dataclass(frozen=True)
class Workload:
    """What runs: the image and its command, the job's environment (profiles, then ``--env``, then what
    the GPU policy adds) and the image's own (``image_env``, from its label ``image_env_label``: for its
    containers only, never a host script's), the mounts and working directory, the GPUs asked for
    (per node; :data:`ALL_GPUS` for the host's; 0: none), the container ``runtime`` (None where the
    cluster's own starts the containers: Kubernetes), the ``job_id`` that names what the job makes, and
    what the targets must match of the image (``traits``, from its facts: its MPI, base, CUDA, network)."""

    image: str
    command: Sequence[str]
    runtime: Runtime | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    image_env: Mapping[str, str] = field(default_factory=dict)
    image_env_label: str = BENCHMARK
    mounts: Sequence[Mount] = ()
    workdir: str | None = None
    gpus: int = 0
    job_id: str = field(default_factory=new_job_id)
    traits: ImageTraits = ImageTraits()

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", list(self.command))
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "image_env", dict(self.image_env))
        object.__setattr__(self, "mounts", list(self.mounts))
        check_job(command=self.command, image=self.image, env=self.env, job_id=self.job_id, workdir=self.workdir)
        # Pyxis takes a container's variables from the job's environment, which the host's programs see.
        host = self.runtime is not None and self.runtime.host_env
        check_image_env(self.image, self.image_env, self.image_env_label, host=host)
        if self.runtime is not None:
            self.runtime.check_image(self.image)
            # --container-mounts separates entries with ',' and Enroot writes each as an fstab line.
            self.runtime.check_mounts(self.mounts)

    @property
    def mpi(self) -> MpiFlavour:
        """The image's MPI."""
        return self.traits.mpi

    @property
    def wants_gpus(self) -> bool:
        return self.gpus != 0

    @property
    def container_image_env(self) -> dict[str, str]:
        """The image's variables that the job's own do not override (``--env`` wins)."""
        return {k: v for k, v in self.image_env.items() if k not in self.env}

    @property
    def container_env(self) -> dict[str, str]:
        """Everything a container gets as values: the image's variables, then the job's."""
        return {**self.image_env, **self.env}


def job_environment(env: Mapping[str, str], *, gpus: bool, hides_gpus: bool, runtime: Runtime | None,
                    image_env: Mapping[str, str] | None, log: Callable[[str], None]) -> dict[str, str]:
    """The GPU policy for the job's environment ``env``: a job that asks for no ``gpus``, started by a
    rank starter that hides GPUs from such jobs (``hides_gpus``), gets ``NVIDIA_VISIBLE_DEVICES=void``
    where its ``runtime`` would start the GPU hook for the variable alone and the image asks for GPUs
    (``image_env``: the image's environment, None when it was not read here); said once on ``log``."""
    env = dict(env)
    if gpus or not hides_gpus or runtime is None:
        return env
    out = runtime.cpu_only_env(env, image_env)
    if out is not env:
        why = (f"the image sets {gpu_env.VAR}={image_env.get(gpu_env.VAR)}" if image_env is not None
               else "the image's environment was not read here")
        log(f"imagekit: no GPUs asked for and {why}: the containers get {gpu_env.VAR}={gpu_env.NO_GPU} "
            f"(--env {gpu_env.VAR}=VALUE overrides)")
    return out
