"""Kubernetes: an MPIJob manifest for the Kubeflow MPI Operator (``kubeflow.org/v2beta1``).

Field names follow the operator's v2beta1 API (MPIJobSpec: ``slotsPerWorker``,
``runPolicy``, ``mpiReplicaSpecs`` with ``Launcher``/``Worker`` ReplicaSpecs,
``sshAuthMountPath``, ``mpiImplementation``). The operator makes the ssh
key Secret, mounts it at ``sshAuthMountPath`` and writes the hostfile; the
image must run sshd on the workers. imagekit images ship sshd without host
keys, so the worker command creates them at start (``ssh-keygen -A``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.util.errors import UsageError
from imagekit.image_facts import BENCHMARK
from imagekit.launch.common import check_count, check_image_env, check_job, ScriptValues, write_atomic

API_VERSION = "kubeflow.org/v2beta1"
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A Kubernetes resource quantity (cpu: 500m, memory: 8Gi, 1.5e3): what the API server accepts.
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")
_MOUNT_PATH = re.compile(r"^/[A-Za-z0-9_./-]*$")


@dataclass
class MPIJobSpec:
    name: str
    image: str
    workers: int
    command: list[str]
    gpus_per_worker: int = 0
    slots_per_worker: int | None = None
    namespace: str | None = None
    cpu: str | None = None
    memory: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    ssh_auth_mount_path: str = "/root/.ssh"
    shm_size: str | None = "1Gi"
    clean_pod_policy: str = "Running"
    # The image's own variables (a label): the pods' environment only, as env's, which wins.
    image_env: dict[str, str] = field(default_factory=dict)
    image_env_label: str = BENCHMARK

    def __post_init__(self) -> None:
        if not _DNS1123.match(self.name) or len(self.name) > 63:
            raise UsageError(f"MPIJob name {self.name!r} is not a DNS-1123 label",
                             "use lower-case letters, digits and '-', at most 63 characters")
        check_count("--workers", self.workers)
        check_count("--gpus-per-worker", self.gpus_per_worker, 0)
        if self.slots_per_worker is not None:
            check_count("--slots-per-worker", self.slots_per_worker)
        if self.clean_pod_policy not in ("All", "Running", "None"):
            raise UsageError(f"unknown cleanPodPolicy {self.clean_pod_policy!r}", "use All, Running or None")
        if self.namespace is not None and (not _DNS1123.match(self.namespace) or len(self.namespace) > 63):
            raise UsageError(f"--namespace {self.namespace!r} is not a DNS-1123 label",
                             "use lower-case letters, digits and '-', at most 63 characters")
        for field_name, value in (("--cpu", self.cpu), ("--memory", self.memory), ("shm size", self.shm_size)):
            if value is not None and not _QUANTITY.match(value):
                raise UsageError(f"{field_name} {value!r} is not a Kubernetes quantity",
                                 "e.g. 8, 500m, 16Gi, 1.5G")
        if not _MOUNT_PATH.match(self.ssh_auth_mount_path) or ".." in self.ssh_auth_mount_path.split("/"):
            raise UsageError(f"sshAuthMountPath {self.ssh_auth_mount_path!r} is not an absolute path",
                             "letters, digits, '_', '.', '-' and '/', no '..'")
        check_job(ScriptValues(self.command, self.image, self.env))
        check_image_env(self.image, self.image_env, self.image_env_label)

    @property
    def slots(self) -> int:
        return self.slots_per_worker or self.gpus_per_worker or 1


def _resources(spec: MPIJobSpec, gpus: int) -> dict:
    limits: dict[str, object] = {}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    if spec.cpu:
        limits["cpu"] = spec.cpu
    if spec.memory:
        limits["memory"] = spec.memory
    return {"limits": limits} if limits else {}


def _pod(spec: MPIJobSpec, container: dict) -> dict:
    pod: dict = {"containers": [container]}
    if spec.shm_size:
        # Pods get a 64 MiB /dev/shm; NCCL and shared-memory transports need more.
        pod["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}}]
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    return {"spec": pod}


def build(spec: MPIJobSpec) -> dict:
    """The MPIJob as a plain dict (apiVersion, kind, metadata, spec)."""
    both = {**spec.image_env, **spec.env}
    env = [{"name": k, "value": v} for k, v in both.items()]
    mpirun = (["mpirun", "-np", str(spec.workers * spec.slots), "--allow-run-as-root"]
              + [a for k in both for a in ("-x", k)] + list(spec.command))
    launcher = {
        "name": "launcher",
        "image": spec.image,
        "command": mpirun,
        # Pods change on every run: the operator's pod network is the trust boundary, not host keys.
        "env": [{"name": "OMPI_MCA_plm_rsh_args",
                 "value": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"}] + env,
    }
    res = _resources(spec, 0)
    if res:
        launcher["resources"] = res
    worker = {
        "name": "worker",
        "image": spec.image,
        "command": ["/bin/sh", "-c", "ssh-keygen -A && mkdir -p /run/sshd && exec /usr/sbin/sshd -De"],
    }
    if env:
        worker["env"] = [dict(e) for e in env]  # distinct objects: no YAML anchors in the output
    res = _resources(spec, spec.gpus_per_worker)
    if res:
        worker["resources"] = res
    metadata: dict = {"name": spec.name, "labels": {"app.kubernetes.io/managed-by": "imagekit"}}
    if spec.namespace:
        metadata["namespace"] = spec.namespace
    return {
        "apiVersion": API_VERSION,
        "kind": "MPIJob",
        "metadata": metadata,
        "spec": {
            "slotsPerWorker": spec.slots,
            "runPolicy": {"cleanPodPolicy": spec.clean_pod_policy},
            "sshAuthMountPath": spec.ssh_auth_mount_path,
            "mpiImplementation": "OpenMPI",
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "OnFailure", "template": _pod(spec, launcher)},
                "Worker": {"replicas": spec.workers, "restartPolicy": "Never", "template": _pod(spec, worker)},
            },
        },
    }


def render(spec: MPIJobSpec) -> str:
    import yaml

    return yaml.safe_dump(build(spec), sort_keys=False, default_flow_style=False)


def write(spec: MPIJobSpec, path: Path) -> Path:
    return write_atomic(Path(path), render(spec), 0o644)
