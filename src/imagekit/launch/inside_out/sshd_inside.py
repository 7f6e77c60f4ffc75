"""The inside-out rank starter: sshd worker containers, ``mpirun`` inside the first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

from imagekit.util.errors import UsageError
from imagekit.launch.common import MPIRUN, check_count, check_token, check_words
from imagekit.launch.inside_out.local import InsideOutRun
from imagekit.launch.inside_out.sbatch import render_sbatch
from imagekit.launch.opts import FILE, opt
from imagekit.launch.runtimes import Runtime
from imagekit.launch.schedulers import Local, Slurm
from imagekit.launch.starters import Job, LauncherNeeds, Output, Starter
from imagekit.launch.workload import ALL_GPUS


@dataclass(frozen=True)
class SshdInside(Starter):
    """Inside-out: ``nodes`` worker containers run sshd, ``mpirun`` in the first starts ``slots`` ranks on
    each (``iface``: the MPI TCP interface; default eth0 on the private network, Open MPI's choice under
    Slurm); ``shm_size`` and the two timeouts are the local engine's."""

    nodes: int
    slots: int = 1
    iface: str | None = None
    mpirun_args: tuple[str, ...] = ()
    shm_size: str = "1g"
    ready_timeout: float = 60.0
    cleanup_timeout: float = 60.0
    as_json: bool = False
    needs: ClassVar = LauncherNeeds(sshd=True)
    # Today's inside-out starts the image's environment as it is: no NVIDIA_VISIBLE_DEVICES=void.
    hides_gpus: ClassVar = False
    # Under Slurm: one worker container per node, named for inside-out.
    scheduler_defaults: ClassVar = {"job_name": "imagekit-io", "tasks_per_node": 1}
    options: ClassVar = (
        opt("--nodes", "-N", type=int, required=True, help="Worker containers (the first also launches)."),
        opt("--slots", type=int, default=1, show_default=True, help="Ranks per worker."),
        opt("--iface", help="MPI TCP interface (default eth0 locally, Open MPI's choice on Slurm)."),
        opt("--mpirun-arg", dest="mpirun_args", multiple=True, help="Extra mpirun argument (repeatable)."),
        opt("--shm-size", default="1g", show_default=True),
        opt("--gpus", type=bool, help="Give workers all GPUs (docker --gpus all)."),
        opt("--ready-timeout", type=float, default=60.0, show_default=True, help="Seconds to wait for sshd."),
        opt("--cleanup-timeout", type=float, default=60.0, show_default=True,
            help="Seconds the engine gets to remove the job's containers on exit or Ctrl-C; what it has "
                 "not removed by then is named, and the next imagekit command removes it."),
        opt("--partition", "-p", help="Slurm partition (--scheduler slurm)."),
        opt("--time", "-t", help="Slurm time limit (--scheduler slurm)."),
        opt("--output", "-o", path=FILE, help="--scheduler slurm: write the sbatch script here."),
        opt("--submit", type=bool, help="--scheduler slurm: submit the script with sbatch."),
        opt("--json", dest="as_json", type=bool, help="Print the job id, exit code and timings as JSON."),
    )

    def __post_init__(self) -> None:
        check_count("--nodes", self.nodes)
        check_count("--slots", self.slots)
        object.__setattr__(self, "mpirun_args", tuple(check_words("--mpirun-arg", list(self.mpirun_args))))
        check_token("--shm-size", self.shm_size)
        if not self.cleanup_timeout > 0:
            raise UsageError(f"--cleanup-timeout must be > 0, not {self.cleanup_timeout}",
                             "give the seconds the engine may take to remove the job's containers")
        if self.iface is not None:
            check_token("--iface", self.iface)

    @classmethod
    def accepts(cls, runtime: Runtime) -> bool:
        return runtime.engine     # the workers are containers of this host's engine (docker run under Slurm)

    @classmethod
    def from_options(cls, values: dict) -> "SshdInside":
        keys = ("slots", "iface", "shm_size", "ready_timeout", "cleanup_timeout", "as_json")
        return cls(nodes=values["nodes"], mpirun_args=tuple(values.get("mpirun_args") or ()),
                   **{k: values[k] for k in keys if values.get(k) is not None})

    def gpus(self, values: dict) -> int:
        return ALL_GPUS if values.get("gpus") else 0

    @property
    def hosts(self) -> list[str]:
        return [f"node{i}" for i in range(self.nodes)]

    def files(self, job: Job) -> list[Output]:
        if not isinstance(job.scheduler, Slurm):
            return []
        return [Output(f"{job.scheduler.job_name}-{job.workload.job_id}.sbatch", render_sbatch(job))]

    def launcher(self, job: Job, log: Callable[[str], None]) -> InsideOutRun | None:
        return InsideOutRun(job, log, as_json=self.as_json) if isinstance(job.scheduler, Local) else None

    def mpirun_argv(self, job: Job, hostfile: str) -> list[str]:
        w, local = job.workload, isinstance(job.scheduler, Local)
        argv = [MPIRUN, "--hostfile", hostfile, "-np", str(self.nodes * self.slots)]
        iface = self.iface or ("eth0" if local else None)
        if iface:
            argv += ["--mca", "btl_tcp_if_include", iface, "--mca", "oob_tcp_if_include", iface]
        if local and not any(a.startswith("--bind-to") for a in self.mpirun_args):
            # Every container's orted believes it owns the whole machine and would pin its
            # first rank to core 0: N busy-polling ranks on one core (ms latencies). Local
            # workers share one host, so leave placement to the kernel.
            argv += ["--bind-to", "none"]
        for name in w.container_env:
            argv += ["-x", name]
        return argv + list(self.mpirun_args) + list(w.command)
