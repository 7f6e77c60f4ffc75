"""Rank starters: how a job's ranks start, one class per way (ReFrame's launcher axis).

A starter is the third axis of a launch, beside the scheduler that gives it nodes
(:mod:`imagekit.launch.schedulers`) and the container runtime that starts each container
(:mod:`imagekit.launch.runtimes`): ``srun`` per task (:mod:`~imagekit.launch.slurm`), the host's
``mpirun`` (:mod:`~imagekit.launch.mpirun`), ``mpirun`` inside sshd containers
(:mod:`~imagekit.launch.inside_out`), the Kubeflow MPI Operator (:mod:`~imagekit.launch.mpijob`),
Kubeflow Trainer, a bare JobSet and SkyPilot. Each declares what preflight checks for it
(:class:`LauncherNeeds`), which runtimes can start its containers (``accepts``), its options, and what
it makes of a :class:`Job`: the files it writes, and, where imagekit runs the job itself, the
:class:`~imagekit.launch.launcher.Launcher` that runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Protocol

from imagekit.launch.launcher import Launcher
from imagekit.launch.opts import Opt
from imagekit.launch.workload import Runtime, Workload

if TYPE_CHECKING:
    from imagekit.launch.request import LaunchRequest


@dataclass(frozen=True)
class LauncherNeeds:
    """What a rank starter declares to preflight: the checks its way of starting containers needs."""

    host_mpirun: bool = False      # the host's mpirun starts the ranks: its Open MPI must match the image's
    sshd: bool = False             # the containers run sshd and take the job's ssh keys
    here: bool = True              # the containers start on this host (not on compute nodes elsewhere)
    gpu_fix: str | None = None     # how the launcher itself hides GPUs from jobs that ask for none


@dataclass(frozen=True)
class Output:
    """A file a job is written as: its ``name`` (beside the others), its text and its mode."""

    name: str
    text: str
    mode: int = 0o755


class Scheduler(Protocol):
    """What a rank starter reads of its scheduler (:mod:`imagekit.launch.schedulers`, which builds on
    this module: a scheduler delivers a starter's outputs)."""

    @property
    def runs(self) -> bool:
        """imagekit runs the job on this host."""
        ...


@dataclass(frozen=True)
class Job:
    """One launch, composed: what runs, what gives it nodes, and how its ranks start."""

    workload: Workload
    scheduler: Scheduler
    starter: "Starter"

    def __post_init__(self) -> None:
        self.starter.check(self)


class Starter:
    """One way of starting ranks; each is a frozen dataclass of its own options, with these defaults."""

    needs: ClassVar[LauncherNeeds] = LauncherNeeds()
    # Its target's options beyond the workload's (the scheduler's among them; the CLI makes click options).
    options: ClassVar[tuple[Opt, ...]] = ()
    # It hides GPUs from jobs that ask for none (NVIDIA_VISIBLE_DEVICES=void where the runtime reads it).
    hides_gpus: ClassVar[bool] = False
    # Option values its Slurm scheduler starts from (inside-out: one worker per node, its own job name).
    scheduler_defaults: ClassVar[dict] = {}

    @classmethod
    def accepts(cls, runtime: Runtime) -> bool:
        """Whether ``runtime`` can start this starter's containers (none: the cluster starts them)."""
        return False

    @classmethod
    def amend(cls, request: "LaunchRequest", log: Callable[[str], None]) -> "LaunchRequest":
        """The request with what the starter's own options bring to it (trainer's --from-mpijob)."""
        return request

    @classmethod
    def from_options(cls, values: dict) -> "Starter":
        """The starter for the options a command was given (by their ``dest``)."""
        raise NotImplementedError

    def gpus(self, values: dict) -> int:
        """The GPUs per node the options ask for (``workload.ALL_GPUS``: the host's; 0: none)."""
        return 0

    def check(self, job: Job) -> None:
        """Refuse what this starter cannot do with the job's workload and scheduler."""

    def job_env(self, env: dict[str, str]) -> dict[str, str]:
        """The job's environment with what the starter's own options add."""
        return env

    def runs_here(self) -> bool:
        """The containers start on this host (when the scheduler is :class:`~imagekit.launch.schedulers.Local`)."""
        return self.needs.here

    def files(self, job: Job) -> list[Output]:
        """What the job is written as, the main file first (none: it only runs here)."""
        return []

    def launcher(self, job: Job, log: Callable[[str], None]) -> Launcher | None:
        """What runs the job on this host (None: imagekit only writes it)."""
        return None
