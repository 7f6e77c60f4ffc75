"""Kubernetes: an MPIJob manifest for the Kubeflow MPI Operator (``kubeflow.org/v2beta1``).

Field names follow the operator's v2beta1 API (MPIJobSpec: ``slotsPerWorker``,
``runPolicy``, ``mpiReplicaSpecs`` with ``Launcher``/``Worker`` ReplicaSpecs,
``sshAuthMountPath``, ``mpiImplementation``). The operator makes the ssh
key Secret, mounts it at ``sshAuthMountPath`` and writes the hostfile; the
image must run sshd on the workers. imagekit images ship sshd without host
keys, so the worker command creates them at start (``ssh-keygen -A``), after
installing the job's keys (:mod:`imagekit.launch.pods`); the launcher names
the operator's hostfile and the ssh options in the image's own MPI's words
(:mod:`imagekit.launch.mpi`: Open MPI 5's PRRTE reads none of the ORTE names
the operator sets, and would run every rank on the launcher).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from imagekit.util.errors import UsageError
from imagekit.launch import pods
from imagekit.launch.common import check_count
from imagekit.launch.opts import FILE, opt
from imagekit.launch.schedulers import Kubernetes
from imagekit.launch.starters import Job, LauncherNeeds, Output, Starter

API_VERSION = "kubeflow.org/v2beta1"
# Where the operator mounts the hostfile it writes (mpi-operator: configMountPath + hostfileName).
HOSTFILE = "/etc/mpi/hostfile"
_MOUNT_PATH = re.compile(r"^/[A-Za-z0-9_./-]*$")


@dataclass(frozen=True)
class MpiOperator(Starter):
    """The Kubeflow MPI Operator starts the ranks: ``sizes.nodes`` sshd worker pods, ``sizes.procs_per_node``
    ranks each (``slotsPerWorker``), the launcher pod runs ``mpirun``."""

    sizes: pods.PodSizes
    ssh_auth_mount_path: str = pods.KEYS
    clean_pod_policy: str = "Running"
    needs: ClassVar = LauncherNeeds(here=False)
    hides_gpus: ClassVar = False
    options: ClassVar = (
        opt("--name", default="imagekit", show_default=True, help="MPIJob name (DNS-1123 label)."),
        opt("--workers", type=int, required=True),
        opt("--gpus-per-worker", dest="gpus", type=int, default=0, show_default=True),
        opt("--slots-per-worker", type=int, help="Default: GPUs per worker, or 1."),
        opt("--namespace"),
        opt("--cpu", help="CPU limit per pod, e.g. 16."),
        opt("--memory", help="Memory limit per pod, e.g. 64Gi."),
        opt("--output", "-o", path=FILE, help="Write the manifest here (default: stdout)."),
    )

    def __post_init__(self) -> None:
        if self.clean_pod_policy not in ("All", "Running", "None"):
            raise UsageError(f"unknown cleanPodPolicy {self.clean_pod_policy!r}", "use All, Running or None")
        if not _MOUNT_PATH.match(self.ssh_auth_mount_path) or ".." in self.ssh_auth_mount_path.split("/"):
            raise UsageError(f"sshAuthMountPath {self.ssh_auth_mount_path!r} is not an absolute path",
                             "letters, digits, '_', '.', '-' and '/', no '..'")

    @classmethod
    def from_options(cls, values: dict) -> "MpiOperator":
        return cls(pods.PodSizes.from_options(values, nodes="workers", procs="slots_per_worker",
                                              nodes_flag="--workers", procs_flag="--slots-per-worker"))

    def gpus(self, values: dict) -> int:
        return check_count("--gpus-per-worker", values.get("gpus") or 0, 0)


    def files(self, job: Job) -> list[Output]:
        return [Output(f"{job.scheduler.name}.yaml", render(job), 0o644)]



def build(job: Job) -> dict:
    """The MPIJob as a plain dict (apiVersion, kind, metadata, spec)."""
    w, operator, cluster = job.workload, job.starter, job.scheduler
    assert isinstance(operator, MpiOperator) and isinstance(cluster, Kubernetes)
    both = w.container_env
    sizes = operator.sizes
    slots = sizes.slots(w.gpus)
    launcher = {
        "name": "launcher",
        "image": w.image,
        "command": pods.launcher_command(pods.mpirun_argv(sizes.nodes * slots, list(both), list(w.command))),
        # The image's MPI's own words for the operator's hostfile and ssh (the operator sets ORTE's only).
        "env": pods.env_list({**pods.launcher_env(w.mpi, HOSTFILE), **both}),
    }
    res = pods.limits(0, sizes.cpu, sizes.memory)
    if res:
        launcher["resources"] = res
    worker = {"name": "worker", "image": w.image, "command": pods.worker_command()}
    if both:
        worker["env"] = pods.env_list(both)
    res = pods.limits(w.gpus, sizes.cpu, sizes.memory)
    if res:
        worker["resources"] = res
    return {
        "apiVersion": API_VERSION,
        "kind": "MPIJob",
        "metadata": cluster.metadata(),
        "spec": {
            "slotsPerWorker": slots,
            "runPolicy": {"cleanPodPolicy": operator.clean_pod_policy},
            "sshAuthMountPath": operator.ssh_auth_mount_path,
            "mpiImplementation": "OpenMPI",
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "OnFailure",
                             "template": {"spec": pods.with_shm({"containers": [launcher]}, launcher,
                                                                sizes.shm_size)}},
                "Worker": {"replicas": sizes.nodes, "restartPolicy": "Never",
                           "template": {"spec": pods.with_shm({"containers": [worker]}, worker, sizes.shm_size)}},
            },
        },
    }


def render(job: Job) -> str:
    import yaml

    return yaml.safe_dump(build(job), sort_keys=False, default_flow_style=False)
