"""What every Kubernetes MPI target puts in its pods: the ssh set-up, the launcher's MPI settings, limits.

The MPI Operator and Kubeflow Trainer mount the job's ssh key Secret into the pods, and both set
Open MPI's ORTE names for the hostfile and ssh (appended or upserted after the manifest's own, so
theirs win). Three things make that fail with imagekit's images, each seen in the tests that run the
pods a manifest describes (tests/launch/test_distinct_hosts.py):

- a Secret volume is a directory of mode 0777 (kubelet's emptyDir ``perm``), so sshd's StrictModes
  refuses an ``authorized_keys`` inside it, and Trainer mounts the private key 0640, which ssh refuses
  as root ("UNPROTECTED PRIVATE KEY FILE");
- the operators' ``OMPI_MCA_plm_rsh_args`` (``-o ConnectionAttempts=10``) replaces a manifest's own, so
  host-key checking stays on for pods whose keys are new on every run;
- Open MPI 5 reads none of those names (:mod:`imagekit.launch.mpi`).

So the Secret is mounted at :data:`KEYS`, and each pod's command first installs the keys into
``/root/.ssh`` with the modes ssh wants, writes the client's ``config`` (host keys of a job's pods are
not known in advance: its network is the trust boundary) and, on workers, hands the image's
environment to the sessions mpirun opens (PATH to ``orted``/``prted``), as inside-out does.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from imagekit.util.errors import UsageError
from imagekit.launch.common import MPIRUN, check_count
from imagekit.launch.mpi import SSH_ARGS, MpiFlavour

# Where the job's ssh Secret is mounted (not ~/.ssh, whose modes a Secret volume cannot give).
KEYS = "/etc/imagekit/ssh"
# The operators' names for the Secret's files (mpi-operator and Trainer alike).
PRIVATE_KEY, AUTHORIZED_KEYS = "id_rsa", "authorized_keys"
SSH_CONFIG = "Host *\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n    ConnectionAttempts 10\n"

_INSTALL = (
    "set -eu; umask 077; mkdir -p /root/.ssh; "
    f"cp {KEYS}/{PRIVATE_KEY} /root/.ssh/{PRIVATE_KEY}; "
    f"cp {KEYS}/{AUTHORIZED_KEYS} /root/.ssh/{AUTHORIZED_KEYS}; "
    f"printf %s {shlex.quote(SSH_CONFIG)} > /root/.ssh/config; "
)


# A Kubernetes resource quantity (cpu: 500m, memory: 8Gi, 1.5e3): what the API server accepts.
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")


def check_quantity(what: str, value: str | None) -> str | None:
    """A Kubernetes resource quantity, as the API server takes it (one token: no YAML structure)."""
    if value is not None and not _QUANTITY.match(value):
        raise UsageError(f"{what} {value!r} is not a Kubernetes quantity", "e.g. 8, 500m, 16Gi, 1.5G")
    return value


@dataclass(frozen=True)
class PodSizes:
    """How many worker pods (``nodes``, named by the target's own flag), how many ranks each
    (``procs_per_node``; None: one per GPU, else 1), and each pod's limits and /dev/shm."""

    nodes: int
    procs_per_node: int | None = None
    cpu: str | None = None
    memory: str | None = None
    shm_size: str | None = "1Gi"
    nodes_flag: str = "--nodes"
    procs_flag: str = "--procs-per-node"

    def __post_init__(self) -> None:
        check_count(self.nodes_flag, self.nodes)
        if self.procs_per_node is not None:
            check_count(self.procs_flag, self.procs_per_node)
        for what, value in (("--cpu", self.cpu), ("--memory", self.memory), ("shm size", self.shm_size)):
            check_quantity(what, value)

    @classmethod
    def from_options(cls, values: dict, nodes: str = "nodes", procs: str = "procs_per_node", **flags) -> "PodSizes":
        given = {k: values[v] for k, v in (("procs_per_node", procs), ("cpu", "cpu"), ("memory", "memory"))
                 if values.get(v) is not None}
        return cls(nodes=values[nodes], **given, **flags)

    def slots(self, gpus: int) -> int:
        return self.procs_per_node or (gpus if gpus > 0 else 1)


def worker_command(port: int = 22) -> list[str]:
    """A worker pod's command: the job's keys in place, then sshd in the foreground, with the image's
    environment for the sessions mpirun opens (its PATH finds ``orted``/``prted``)."""
    return ["/bin/sh", "-c", _INSTALL +
            "env | grep -v -E '^(HOSTNAME|HOME|PWD|SHLVL|_)=' > /root/.ssh/environment || true; "
            "ssh-keygen -A >/dev/null; mkdir -p /run/sshd; "
            f"exec /usr/sbin/sshd -De -p {port} -o PermitUserEnvironment=yes"]


def launcher_command(argv: list[str]) -> list[str]:
    """The launcher pod's command: the job's keys in place, then ``argv`` (``mpirun …``)."""
    return ["/bin/sh", "-c", _INSTALL + 'exec "$@"', "imagekit-launcher", *argv]


def mpirun_argv(np: int, names: list[str], command: list[str]) -> list[str]:
    """``mpirun -np NP`` with the job's variables exported to every rank (``-x``), then the command."""
    return [MPIRUN, "-np", str(np), "--allow-run-as-root"] + [a for k in names for a in ("-x", k)] + list(command)


def launcher_env(mpi: MpiFlavour, hostfile: str) -> dict[str, str]:
    """The launcher's MPI settings for the image's own MPI: the operator's hostfile, ssh options."""
    return mpi.env(hostfile=hostfile, ssh_args=SSH_ARGS)


def env_list(env: dict[str, str]) -> list[dict[str, str]]:
    """A container's ``env``: one fresh entry per variable (no YAML anchors in the output)."""
    return [{"name": k, "value": v} for k, v in env.items()]


def limits(gpus: int = 0, cpu: str | None = None, memory: str | None = None) -> dict:
    """A container's ``resources`` (empty: none asked)."""
    out: dict[str, object] = {}
    if gpus > 0:
        out["nvidia.com/gpu"] = gpus
    if cpu:
        out["cpu"] = cpu
    if memory:
        out["memory"] = memory
    return {"limits": out} if out else {}


def with_shm(pod: dict, container: dict, size: str | None) -> dict:
    """``pod`` (a pod spec) with a memory-backed /dev/shm of ``size`` for ``container``: pods get 64 MiB,
    NCCL and shared-memory transports need more."""
    if size:
        pod["volumes"] = pod.get("volumes", []) + [{"name": "dshm", "emptyDir": {"medium": "Memory",
                                                                              "sizeLimit": size}}]
        container["volumeMounts"] = container.get("volumeMounts", []) + [{"name": "dshm", "mountPath": "/dev/shm"}]
    return pod
