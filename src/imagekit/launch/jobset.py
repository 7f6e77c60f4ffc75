"""A bare JobSet (``jobset.x-k8s.io/v1alpha2``) for clusters without Kubeflow Trainer or the MPI Operator.

Trainer makes a JobSet itself (so this is for clusters that run JobSet alone): ``node`` worker pods run
sshd, one ``launcher`` pod waits for them to be Ready (``dependsOn``, JobSet 0.10+) and runs ``mpirun``;
the job succeeds when the launcher does. No controller writes a hostfile or ssh keys here, so:

- the hostfile is a ConfigMap written beside the JobSet: JobSet names each pod
  ``<jobset>-<job>-<job index>-<pod index>`` under the subdomain ``<jobset>``, so the workers are
  ``<name>-node-0-<i>.<name>``, known before the job starts;
- the ssh key is a Secret the site makes once per namespace (the manifest never holds a private key):
  ``ssh-keygen -t ed25519 -N '' -f key && kubectl create secret generic NAME-ssh
  --from-file=id_rsa=key --from-file=authorized_keys=key.pub`` (``--ssh-secret`` names another).

The pods install the key and start sshd as :mod:`imagekit.launch.pods` does for the operators, and the
launcher names the hostfile in the image's own MPI's words (:mod:`imagekit.launch.mpi`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

import yaml

from imagekit.util.errors import UsageError
from imagekit.launch import pods
from imagekit.launch.pods import PodSizes
from imagekit.launch.common import check_count
from imagekit.launch.opts import FILE, opt
from imagekit.launch.schedulers import Kubernetes
from imagekit.launch.starters import Job, LauncherNeeds, Output, Starter

API_VERSION = "jobset.x-k8s.io/v1alpha2"
HOSTFILE_DIR = "/etc/mpi"
SSH_PORT = 22
_SECRET = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclass(frozen=True)
class JobSetPods(Starter):
    """A JobSet of ``sizes.nodes`` sshd worker pods (``sizes.procs_per_node`` ranks each) and one launcher
    pod; the ssh key from the Secret ``ssh_secret`` (None: ``<name>-ssh``)."""

    sizes: PodSizes
    ssh_secret: str | None = None
    needs: ClassVar = LauncherNeeds(here=False)
    options: ClassVar = (
        opt("--name", default="imagekit", show_default=True, help="The JobSet's name (a DNS-1123 label)."),
        opt("--namespace"),
        opt("--nodes", type=int, required=True, help="Worker pods."),
        opt("--gpus-per-node", dest="gpus", type=int, default=0, show_default=True),
        opt("--procs-per-node", type=int, help="Ranks per node (default: GPUs per node, or 1)."),
        opt("--cpu", help="CPU limit per pod, e.g. 16."),
        opt("--memory", help="Memory limit per pod, e.g. 64Gi."),
        opt("--ssh-secret", metavar="NAME", help="The Secret holding the job's ssh key (default: NAME-ssh)."),
        opt("--output", "-o", path=FILE, help="Write the manifests here (default: stdout)."),
    )

    def __post_init__(self) -> None:
        if self.ssh_secret is not None and (not _SECRET.match(self.ssh_secret) or len(self.ssh_secret) > 253):
            raise UsageError(f"jobset: --ssh-secret {self.ssh_secret!r} is not a Secret's name",
                             "lower-case letters, digits, '-' and '.'")

    @classmethod
    def from_options(cls, values: dict) -> "JobSetPods":
        return cls(PodSizes.from_options(values), ssh_secret=values.get("ssh_secret"))

    def gpus(self, values: dict) -> int:
        return check_count("--gpus-per-node", values.get("gpus") or 0, 0)

    def files(self, job: Job) -> list[Output]:
        text = "---\n".join(yaml.safe_dump(d, sort_keys=False, default_flow_style=False) for d in manifests(job))
        return [Output(f"{job.scheduler.name}.yaml", text, 0o644)]


def hosts(name: str, nodes: int) -> list[str]:
    """The workers' DNS names, as JobSet names their pods (job ``node``, one job of ``nodes`` pods)."""
    return [f"{name}-node-0-{i}.{name}" for i in range(nodes)]


def manifests(job: Job) -> tuple[dict, dict]:
    """The hostfile's ConfigMap and the JobSet, as plain dicts."""
    w, starter, cluster = job.workload, job.starter, job.scheduler
    assert isinstance(starter, JobSetPods) and isinstance(cluster, Kubernetes)
    sizes = starter.sizes
    slots = sizes.slots(w.gpus)
    both = w.container_env
    hostfile_map = f"{cluster.name}-hostfile"
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": cluster.metadata(hostfile_map),
              "data": {"hostfile": "".join(f"{h} slots={slots}\n" for h in hosts(cluster.name, sizes.nodes))}}
    keys = {"name": "ssh", "secret": {"secretName": starter.ssh_secret or f"{cluster.name}-ssh",
                                       "items": [{"key": pods.PRIVATE_KEY, "path": pods.PRIVATE_KEY},
                                                 {"key": pods.AUTHORIZED_KEYS, "path": pods.AUTHORIZED_KEYS}]}}
    hostfile = {"name": "hostfile", "configMap": {"name": hostfile_map}}
    mount = {"name": "ssh", "mountPath": pods.KEYS, "readOnly": True}

    node = {"name": "node", "image": w.image, "command": pods.worker_command(SSH_PORT),
            "readinessProbe": {"tcpSocket": {"port": SSH_PORT}}, "volumeMounts": [dict(mount)]}
    if both:
        node["env"] = pods.env_list(both)
    res = pods.limits(w.gpus, sizes.cpu, sizes.memory)
    if res:
        node["resources"] = res
    argv = pods.mpirun_argv(sizes.nodes * slots, list(both), list(w.command))
    launcher = {"name": "launcher", "image": w.image, "command": pods.launcher_command(argv),
                "env": pods.env_list({**pods.launcher_env(w.mpi, f"{HOSTFILE_DIR}/hostfile"), **both}),
                "volumeMounts": [dict(mount), {"name": "hostfile", "mountPath": HOSTFILE_DIR, "readOnly": True}]}
    res = pods.limits(0, sizes.cpu, sizes.memory)
    if res:
        launcher["resources"] = res

    def pod(container: dict, volumes: list[dict]) -> dict:
        spec = pods.with_shm({"containers": [container], "restartPolicy": "Never"}, container, sizes.shm_size)
        spec["volumes"] = spec.get("volumes", []) + volumes
        return {"spec": spec}

    node_pod = pod(node, [dict(keys)])
    launcher_pod = pod(launcher, [dict(keys), hostfile])
    jobset = {
        "apiVersion": API_VERSION, "kind": "JobSet", "metadata": cluster.metadata(),
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
            "replicatedJobs": [
                {"name": "node", "replicas": 1,
                 "template": {"spec": {"parallelism": sizes.nodes, "completions": sizes.nodes,
                                       "backoffLimit": 0, "template": node_pod}}},
                {"name": "launcher", "replicas": 1, "dependsOn": [{"name": "node", "status": "Ready"}],
                 "template": {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                                       "template": launcher_pod}}},
            ],
        },
    }
    return config, jobset
