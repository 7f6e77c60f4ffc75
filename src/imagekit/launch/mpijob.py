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
from imagekit.launch.runtimes import Runtime
from imagekit.launch.schedulers import Kubernetes
from imagekit.launch.starters import Job, LauncherNeeds, Output, Starter

API_VERSION = "kubeflow.org/v2beta1"
# Where the operator mounts the hostfile it writes (mpi-operator: configMountPath + hostfileName).
HOSTFILE = "/etc/mpi/hostfile"
# A Kubernetes resource quantity (cpu: 500m, memory: 8Gi, 1.5e3): what the API server accepts.
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")
_MOUNT_PATH = re.compile(r"^/[A-Za-z0-9_./-]*$")


def check_quantity(what: str, value: str | None) -> str | None:
    """A Kubernetes resource quantity, as the API server takes it (one token: no YAML structure)."""
    if value is not None and not _QUANTITY.match(value):
        raise UsageError(f"{what} {value!r} is not a Kubernetes quantity", "e.g. 8, 500m, 16Gi, 1.5G")
    return value


@dataclass(frozen=True)
class MpiOperator(Starter):
    """The Kubeflow MPI Operator starts the ranks: ``workers`` sshd pods, ``slots_per_worker`` ranks each
    (None: one per GPU, else 1), the launcher pod runs ``mpirun``; per-pod ``cpu`` and ``memory`` limits."""

    workers: int
    slots_per_worker: int | None = None
    cpu: str | None = None
    memory: str | None = None
    ssh_auth_mount_path: str = pods.KEYS
    shm_size: str | None = "1Gi"
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
        check_count("--workers", self.workers)
        if self.slots_per_worker is not None:
            check_count("--slots-per-worker", self.slots_per_worker)
        if self.clean_pod_policy not in ("All", "Running", "None"):
            raise UsageError(f"unknown cleanPodPolicy {self.clean_pod_policy!r}", "use All, Running or None")
        for field_name, value in (("--cpu", self.cpu), ("--memory", self.memory), ("shm size", self.shm_size)):
            check_quantity(field_name, value)
        if not _MOUNT_PATH.match(self.ssh_auth_mount_path) or ".." in self.ssh_auth_mount_path.split("/"):
            raise UsageError(f"sshAuthMountPath {self.ssh_auth_mount_path!r} is not an absolute path",
                             "letters, digits, '_', '.', '-' and '/', no '..'")

    @classmethod
    def accepts(cls, runtime: Runtime) -> bool:
        return False    # the cluster's own container runtime starts the pods

    @classmethod
    def from_options(cls, values: dict) -> "MpiOperator":
        keys = ("slots_per_worker", "cpu", "memory")
        return cls(workers=values["workers"], **{k: values[k] for k in keys if values.get(k) is not None})

    def gpus(self, values: dict) -> int:
        return check_count("--gpus-per-worker", values.get("gpus") or 0, 0)

    def slots(self, gpus: int) -> int:
        return self.slots_per_worker or gpus or 1

    def files(self, job: Job) -> list[Output]:
        return [Output(f"{job.scheduler.name}.yaml", render(job), 0o644)]



def build(job: Job) -> dict:
    """The MPIJob as a plain dict (apiVersion, kind, metadata, spec)."""
    w, operator, cluster = job.workload, job.starter, job.scheduler
    assert isinstance(operator, MpiOperator) and isinstance(cluster, Kubernetes)
    both = w.container_env
    slots = operator.slots(w.gpus)
    launcher = {
        "name": "launcher",
        "image": w.image,
        "command": pods.launcher_command(pods.mpirun_argv(operator.workers * slots, list(both), list(w.command))),
        # The image's MPI's own words for the operator's hostfile and ssh (the operator sets ORTE's only).
        "env": pods.env_list({**pods.launcher_env(w.mpi, HOSTFILE), **both}),
    }
    res = pods.limits(0, operator.cpu, operator.memory)
    if res:
        launcher["resources"] = res
    worker = {"name": "worker", "image": w.image, "command": pods.worker_command()}
    if both:
        worker["env"] = pods.env_list(both)
    res = pods.limits(w.gpus, operator.cpu, operator.memory)
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
                                                                operator.shm_size)}},
                "Worker": {"replicas": operator.workers, "restartPolicy": "Never",
                           "template": {"spec": pods.with_shm({"containers": [worker]}, worker, operator.shm_size)}},
            },
        },
    }


def render(job: Job) -> str:
    import yaml

    return yaml.safe_dump(build(job), sort_keys=False, default_flow_style=False)
