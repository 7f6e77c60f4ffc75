"""The ``imagekit launch`` targets: one row each, and the options every target may share.

A row names the target (the command), its rank starter, the schedulers it runs under (more than one:
``--scheduler`` chooses, the first is the default), its default container runtime, which of the
workload's options it takes, whether it takes ``--validate``, and its help with examples. The CLI
makes one command per row (:mod:`imagekit.cli.launch_cmds`) and :func:`imagekit.launch.plan.launch`
runs it. A new target is its starter's module and one row here.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagekit.util.errors import UsageError
from imagekit.launch import profiles, runtimes
from imagekit.launch.inside_out.sshd_inside import SshdInside
from imagekit.launch.jobset import JobSetPods
from imagekit.launch.mpijob import MpiOperator
from imagekit.launch.mpirun import HostMpirun
from imagekit.launch.opts import Opt, opt
from imagekit.launch.schedulers import Kubernetes, Local, Slurm
from imagekit.launch.skypilot import NodeZeroMpirun, SkyPilot
from imagekit.launch.slurm import Srun
from imagekit.launch.trainer import Trainer


@dataclass(frozen=True)
class Target:
    """One ``imagekit launch`` command."""

    name: str
    starter: type
    schedulers: tuple[type, ...]
    help: str
    workload: tuple[str, ...] = ("image", "runtime", "env", "mounts", "profile", "preflight")
    default_runtime: str | None = None
    image_help: str | None = None
    validate: bool = True
    image_required: bool = True

    def options(self) -> tuple[Opt, ...]:
        """Every option the command takes: the workload's it names, then the starter's own."""
        shared = {
            "image": opt("--image", required=self.image_required, help=self.image_help),
            "runtime": opt("--runtime", default=self.default_runtime, show_default=True,
                           metavar="|".join(runtimes.names(self.starter))),
            "workdir": opt("--workdir", help="Working directory inside the container."),
            "env": opt("--env", multiple=True, metavar="NAME=VALUE",
                       help="Set in every rank (repeatable; bare NAME copies it from here)."),
            "mounts": opt("--mounts", multiple=True, metavar="SRC:DST[:ro]",
                          help="Bind mounts, repeatable or comma-separated."),
            "profile": opt("--profile", dest="profiles", multiple=True, metavar="NAME",
                           help="A launch profile's environment (and placement): " + ", ".join(profiles.PROFILES)
                                + " (repeatable; --env wins)."),
            "preflight": opt("--no-preflight", type=bool, help="Launch even if preflight finds a problem."),
        }
        chooser = ()
        if len(self.schedulers) > 1:
            names = tuple(s.name for s in self.schedulers)
            chooser = (opt("--scheduler", type=names, default=names[0], show_default=True, metavar="|".join(names),
                           help="local: containers on this engine; slurm: write an sbatch script."),)
        return tuple(shared[w] for w in self.workload) + chooser + tuple(self.starter.options)

    def scheduler(self, name: str | None) -> type:
        """The scheduler class ``--scheduler`` names (None: the first)."""
        if name is None:
            return self.schedulers[0]
        for scheduler in self.schedulers:
            if scheduler.name == name:
                return scheduler
        raise UsageError(f"unknown scheduler {name!r}", "use one of: " + ", ".join(s.name for s in self.schedulers))


TARGETS: tuple[Target, ...] = (
    Target("slurm", Srun, (Slurm,), default_runtime="pyxis",
           workload=("image", "runtime", "workdir", "env", "mounts", "profile", "preflight"),
           image_help="Registry image (Pyxis/Enroot URI), ./x.sqsh or ./x.sif path.",
           help="""Write (and optionally submit) an sbatch script: srun --mpi=pmix, one container per task.

    \b
    Examples:
      imagekit launch slurm --image nvcr.io#org/img:tag --nodes 2 --gpus-per-node 8 \\
          --partition gpu --time 01:00:00 --mounts /data:/data:ro -- python3 train.py
      imagekit launch slurm --runtime apptainer --image ./mpi.sif -N 4 --ntasks-per-node 32 \\
          -o job.sbatch -- ./app
      imagekit launch slurm --runtime docker --image REF -N 1 --ntasks-per-node 2 --submit -- ./app
      imagekit launch slurm --image ./nccl.sqsh -N 2 --gpus-per-node 8 --submit --validate \\
          --system dgx-h100 -- all_reduce_perf -b 8 -e 8G -f 2 -g 1
      imagekit launch slurm --image registry.site#hpc/mpi:1 -N 512 --stage sbcast \\
          --stage-dir /local/scratch -- ./app
      imagekit launch slurm --profile nvl72 --image ./nccl.sqsh -N 18 --gpus-per-node 4 \\
          -- all_reduce_perf -b 512M -e 8G -f 2 -g 1     # one rack, multi-node NVLink required
    """),
    Target("mpirun", HostMpirun, (Local,), default_runtime="docker",
           workload=("runtime", "image", "workdir", "env", "mounts", "profile", "preflight"),
           image_help="Engine image (docker), .sif (apptainer) or .sqsh (enroot).",
           help="""Host mpirun starts one container per rank (sites without Slurm).

    \b
    Examples:
      imagekit launch mpirun --image imagekit/debian-mpi:latest --hosts localhost:2 \\
          -- python3 -m mpi4py.bench helloworld
      imagekit launch mpirun --runtime apptainer --image ./mpi.sif --hosts n1:8,n2:8 -- ./app
      imagekit launch mpirun --image imagekit/debian-mpi:latest --hosts localhost:2 --validate \\
          --max-latency-us 500
    """),
    Target("inside-out", SshdInside, (Local, Slurm), default_runtime="docker",
           help="""N sshd worker containers on a private network; mpirun runs in the first.

    \b
    Examples:
      imagekit launch inside-out --image imagekit/debian-mpi:latest --nodes 3 \\
          -- python3 -m mpi4py.bench ringtest
      imagekit launch inside-out --scheduler slurm --image REF --nodes 4 -o io.sbatch -- ./app
      imagekit launch inside-out --image REF --nodes 2 --gpus --validate --system site/cluster.yaml
    """),
    Target("mpijob", MpiOperator, (Kubernetes,), workload=("image", "env", "profile"), validate=False,
           help="""Write a Kubeflow MPIJob (kubeflow.org/v2beta1) manifest.

    \b
    Example:
      imagekit launch mpijob --name nccl --image reg/img:tag --workers 2 --gpus-per-worker 8 \\
          -o nccl.yaml -- all_reduce_perf -b 8 -e 1G -f 2 -g 1
      kubectl apply -f nccl.yaml
    """),
    Target("trainer", Trainer, (Kubernetes,), workload=("image", "env", "profile"), validate=False,
           image_required=False,
           help="""Write a Kubeflow Trainer runtime and TrainJob (trainer.kubeflow.org/v1alpha1) running mpirun.

    \b
    The runtime (ClusterTrainingRuntime, or TrainingRuntime) has the jobs `launcher` and `node`
    (sshd from the image, port 22), the ancestor label on `launcher` only, runLauncherAsNode false
    (numNodes = the worker pods), and the hostfile and ssh settings in the words of the image's
    own Open MPI (4: ORTE, 5: PRRTE, both when its facts do not say).
    \b
    Examples:
      imagekit launch trainer --name nccl --image reg/img:tag --nodes 2 --gpus-per-node 8 \\
          -o nccl.yaml -- all_reduce_perf -b 8 -e 1G -f 2 -g 1
      imagekit launch trainer --from-mpijob nccl-mpijob.yaml -o nccl-trainjob.yaml
      kubectl apply -f nccl.yaml
    """),
    Target("jobset", JobSetPods, (Kubernetes,), workload=("image", "env", "profile"), validate=False,
           help="""Write a JobSet (jobset.x-k8s.io/v1alpha2) of sshd pods and an mpirun launcher, for clusters without Trainer.

    \b
    The ssh key is a Secret made once (NAME-ssh, or --ssh-secret):
      ssh-keygen -t ed25519 -N '' -f key
      kubectl create secret generic imagekit-ssh --from-file=id_rsa=key --from-file=authorized_keys=key.pub
    \b
    Example:
      imagekit launch jobset --image reg/img:tag --nodes 4 --gpus-per-node 8 -o job.yaml -- ./app
    """),
    Target("skypilot", NodeZeroMpirun, (SkyPilot,), workload=("image", "env", "profile", "mounts"), validate=False,
           help="""Write a SkyPilot task (0.13/0.14 YAML): the image on N nodes, mpirun from node 0.

    \b
    Examples:
      imagekit launch skypilot --image reg/img:tag --nodes 2 --gpus-per-node 8 --accelerator H100 \\
          -o task.yaml -- all_reduce_perf -b 8 -e 1G -f 2 -g 1
      sky launch -c mpi task.yaml
    """),
)


def of(name: str) -> Target:
    """The target called ``name`` (preflight's ``--launcher``)."""
    for target in TARGETS:
        if target.name == name:
            return target
    raise UsageError(f"unknown launcher {name!r}", f"use one of: {', '.join(t.name for t in TARGETS)}")
