"""Kubeflow Trainer: a (Cluster)TrainingRuntime for the image and a TrainJob that runs the command.

Trainer (v2.3) ships no generic MPI runtime, so this writes one, in the shape of its own MPI
runtimes (manifests/base/runtimes/) and as field-4 §2 reads its source:

- two replicated jobs, ``launcher`` and ``node``, each with one container named ``node`` (the MPI
  plugin mounts the ssh Secret, and on the launcher the hostfile, into containers of that name only);
- the label ``trainer.kubeflow.org/trainjob-ancestor-step: trainer`` on ``launcher`` only: a TrainJob's
  image, command and env go to the ancestor's container, and on ``node`` they would replace sshd
  (kubeflow/trainer#4030);
- sshd from the image on port 22 (Trainer has no port field); the launcher ``dependsOn`` the nodes
  being Ready (a readiness probe on the port);
- ``mlPolicy.mpi``: Open MPI (the CRD's only value), ``numProcPerNode``, ``sshAuthMountPath`` and
  ``runLauncherAsNode: false``, so ``numNodes`` = the workers, as the migration guide defines it;
- the launcher's Open MPI settings in the image's own MPI's words (:mod:`imagekit.launch.mpi`), and the
  ssh set-up of :mod:`imagekit.launch.pods` (Trainer mounts the private key 0640, which ssh refuses as
  root).

GPUs and limits go on the runtime's ``node`` container: the TrainJob's ``resourcesPerNode`` would land
on the ancestor, the launcher. ``--flux`` writes Trainer's Flux policy instead (opt-in): Flux is added
by an init container from a "view" built for one base OS, so only images whose base has a view take it.

``--from-mpijob FILE`` reads an MPIJob imagekit wrote and makes the same job a TrainJob; what has no
TrainJob field is named on stderr.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar

import yaml

from imagekit.util.errors import UsageError
from imagekit.launch import pods
from imagekit.launch.common import MPIRUN, check_count
from imagekit.launch.mpijob import API_VERSION as MPIJOB_API
from imagekit.launch.pods import PodSizes
from imagekit.launch.opts import FILE, opt
from imagekit.launch.schedulers import Kubernetes
from imagekit.launch.starters import Job, LauncherNeeds, Output, Starter
from imagekit.launch.traits import ImageTraits

if TYPE_CHECKING:
    from imagekit.launch.request import LaunchRequest

API_VERSION = "trainer.kubeflow.org/v1alpha1"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
HOSTFILE = "/etc/mpi/hostfile"       # Trainer's MPIHostfileDir + MPIHostfileName
SSH_PORT = 22
KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
# Trainer's Flux views (docs/user-guides/flux.md, plugins/flux/flux.go): base OS and suite -> the view
# image, by architecture. An image on another base cannot take Flux from the plugin's init container.
FLUX_VIEWS = {
    ("ubuntu", "focal"): {"x86_64": "tag-focal", "aarch64": "arm-focal"},
    ("ubuntu", "jammy"): {"x86_64": "tag-jammy", "aarch64": "arm-jammy"},
    ("ubuntu", "noble"): {"x86_64": "tag-noble"},
    ("rocky", "8"): {"x86_64": "tag-8", "aarch64": "arm-8"},
    ("rocky", "9"): {"x86_64": "tag-9", "aarch64": "arm-9"},
}
FLUX_VIEW_REPO = "ghcr.io/converged-computing/flux-view-{os}"


@dataclass(frozen=True)
class Trainer(Starter):
    """A TrainJob on ``sizes.nodes`` worker pods, ``sizes.procs_per_node`` ranks each, against a runtime of
    ``runtime_kind``; ``flux``: Trainer's Flux policy instead of MPI."""

    sizes: PodSizes
    runtime_kind: str = KINDS[0]
    flux: bool = False
    needs: ClassVar = LauncherNeeds(here=False)
    options: ClassVar = (
        opt("--name", default="imagekit", show_default=True, help="The TrainJob's name (a DNS-1123 label); "
                                                                    "the runtime is NAME-runtime."),
        opt("--namespace"),
        opt("--nodes", type=int, help="Worker pods (TrainJob numNodes)."),
        opt("--gpus-per-node", dest="gpus", type=int, default=0, show_default=True),
        opt("--procs-per-node", type=int, help="Ranks per node (numProcPerNode; default: GPUs per node, or 1)."),
        opt("--cpu", help="CPU limit per pod, e.g. 16."),
        opt("--memory", help="Memory limit per pod, e.g. 64Gi."),
        opt("--runtime-kind", type=KINDS, default=KINDS[0], show_default=True,
            help="TrainingRuntime: a namespaced runtime, next to the TrainJob."),
        opt("--flux", type=bool, help="Trainer's Flux policy (SSH-less; opt-in): only for images whose base OS has "
                                      "a Flux view (Ubuntu focal/jammy/noble, Rocky 8/9)."),
        opt("--from-mpijob", path=FILE, metavar="FILE",
            help="Make the TrainJob of an MPIJob imagekit wrote (its image, command, env, sizes)."),
        opt("--output", "-o", path=FILE, help="Write the manifests here (default: stdout)."),
    )

    @classmethod
    def amend(cls, request: "LaunchRequest", log: Callable[[str], None]) -> "LaunchRequest":
        """``--from-mpijob FILE``: the MPIJob's image, command, env and sizes, where the command line left
        them unset."""
        path = request.options.get("from_mpijob")
        if not path:
            return request
        old = read_mpijob(Path(path), log)
        # The CLI hands every option, given or not: a default value (None, 0, off, the default name) is
        # taken as not given, so the MPIJob's own value stands.
        given = {k: v for k, v in request.options.items() if v not in (None, 0, False, "imagekit")}
        return dataclasses.replace(request, image=request.image or old.image,
                                   command=request.command or old.command, env={**old.env, **request.env},
                                   options={**request.options, **old.options, **given})

    @classmethod
    def from_options(cls, values: dict) -> "Trainer":
        if values.get("nodes") is None:
            raise UsageError("trainer: --nodes is missing", "give the worker pods: --nodes N")
        keys = ("runtime_kind", "flux")
        return cls(PodSizes.from_options(values), **{k: values[k] for k in keys if values.get(k) is not None})

    def gpus(self, values: dict) -> int:
        return check_count("--gpus-per-node", values.get("gpus") or 0, 0)

    def check(self, job: Job) -> None:
        if self.flux:
            flux_view(job.workload.traits)
            return
        mpi = job.workload.mpi
        if mpi.open_mpi is False:
            raise UsageError(f"trainer: mpiImplementation: the image's MPI is {mpi.name}; Trainer's CRD takes OpenMPI "
                             "only (IntelMPI/MPICH fail at run time, kubeflow/trainer#4025)",
                             "use an Open MPI image, or `imagekit launch jobset`")

    def files(self, job: Job) -> list[Output]:
        runtime, trainjob = (flux_manifests if self.flux else manifests)(job)
        text = "---\n".join(yaml.safe_dump(d, sort_keys=False, default_flow_style=False) for d in (runtime, trainjob))
        return [Output(f"{job.scheduler.name}.yaml", text, 0o644)]


def _runtime_meta(job: Job, kind: str) -> dict:
    cluster = job.scheduler
    meta = cluster.metadata(f"{cluster.name}-runtime")
    if kind == KINDS[0]:
        meta.pop("namespace", None)     # cluster-scoped
    return meta


def _runtime_ref(job: Job, kind: str) -> dict:
    return {"name": f"{job.scheduler.name}-runtime", "kind": kind, "apiGroup": API_VERSION.split("/")[0]}


def manifests(job: Job) -> tuple[dict, dict]:
    """The MPI runtime and the TrainJob, as plain dicts."""
    w, trainer = job.workload, job.starter
    assert isinstance(trainer, Trainer) and isinstance(job.scheduler, Kubernetes)
    slots = trainer.sizes.slots(w.gpus)
    both = w.container_env
    node = {"name": "node", "image": w.image, "command": pods.worker_command(SSH_PORT),
            "readinessProbe": {"tcpSocket": {"port": SSH_PORT}}}
    if both:
        node["env"] = pods.env_list(both)
    res = pods.limits(w.gpus, trainer.sizes.cpu, trainer.sizes.memory)
    if res:
        node["resources"] = res
    launcher = {"name": "node", "image": w.image, "env": pods.env_list(pods.launcher_env(w.mpi, HOSTFILE))}
    res = pods.limits(0, trainer.sizes.cpu, trainer.sizes.memory)
    if res:
        launcher["resources"] = res
    runtime = {
        "apiVersion": API_VERSION,
        "kind": trainer.runtime_kind,
        "metadata": _runtime_meta(job, trainer.runtime_kind),
        "spec": {
            "mlPolicy": {"numNodes": trainer.sizes.nodes,
                         "mpi": {"numProcPerNode": slots, "mpiImplementation": "OpenMPI",
                                 "sshAuthMountPath": pods.KEYS, "runLauncherAsNode": False}},
            "template": {"spec": {
                "network": {"publishNotReadyAddresses": True},
                "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                "replicatedJobs": [
                    {"name": "node", "template": {"spec": {"template": {"spec": pods.with_shm(
                        {"containers": [node]}, node, trainer.sizes.shm_size)}}}},
                    {"name": "launcher", "dependsOn": [{"name": "node", "status": "Ready"}],
                     "template": {"metadata": {"labels": {ANCESTOR: "trainer"}},
                                  "spec": {"template": {"spec": pods.with_shm(
                                      {"containers": [launcher]}, launcher, trainer.sizes.shm_size)}}}},
                ]}},
        },
    }
    spec: dict = {"runtimeRef": _runtime_ref(job, trainer.runtime_kind), "trainer": {
        "numNodes": trainer.sizes.nodes,
        "command": pods.launcher_command(pods.mpirun_argv(trainer.sizes.nodes * slots, list(both), list(w.command)))}}
    if both:
        # The job's variables reach the launcher (the ancestor) here, and every rank through -x.
        spec["trainer"]["env"] = pods.env_list(both)
    trainjob = {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": job.scheduler.metadata(), "spec": spec}
    return runtime, trainjob


def flux_view(traits: ImageTraits) -> str:
    """The Flux view image for the image's base OS, or a UsageError naming the target and the field."""
    base = traits.base or ""
    os_name, _, suite = base.partition(":")
    arch = traits.arch or "x86_64"
    tag = FLUX_VIEWS.get((os_name, suite), {}).get(arch)
    if tag is None:
        views = ", ".join(f"{o} {s}" for o, s in FLUX_VIEWS)
        raise UsageError(f"trainer --flux: FLUX_VIEW_IMAGE: the image's base is {base or 'not recorded'} "
                         f"({arch}), and Flux views exist for {views} only",
                         "drop --flux (the MPI policy runs any Open MPI image), or build on a base with a view")
    return f"{FLUX_VIEW_REPO.format(os=os_name)}:{tag}"


def flux_manifests(job: Job) -> tuple[dict, dict]:
    """Trainer's Flux policy: one ``node`` job (the ancestor), Flux added by the plugin's init container;
    the runtime opts out of the validating webhook as Trainer's own Flux example does."""
    w, trainer = job.workload, job.starter
    view = flux_view(w.traits)
    runtime = {
        "apiVersion": API_VERSION, "kind": trainer.runtime_kind, "metadata": _runtime_meta(job, trainer.runtime_kind),
        "spec": {"mlPolicy": {"numNodes": trainer.sizes.nodes, "flux": {"numProcPerNode": trainer.sizes.slots(w.gpus)}},
                 "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                     "metadata": {"labels": {ANCESTOR: "trainer"}},
                     "spec": {"template": {"spec": {"containers": [{"name": "node", "image": w.image}]}}}}}]}}},
    }
    runtime["metadata"].setdefault("labels", {})["trainer.kubeflow.org/webhook-validation"] = "disabled"
    env = {**w.container_env, "FLUX_VIEW_IMAGE": view}
    trainjob = {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": job.scheduler.metadata(),
                "spec": {"runtimeRef": _runtime_ref(job, trainer.runtime_kind),
                         "trainer": {"numNodes": trainer.sizes.nodes, "command": list(w.command),
                                     "env": pods.env_list(env)}}}
    return runtime, trainjob


# --- --from-mpijob ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class FromMpijob:
    """What an imagekit MPIJob says of its job: enough for the same request to Trainer."""

    image: str
    command: tuple[str, ...]
    env: dict
    options: dict
    lost: tuple[str, ...]


def read_mpijob(path: Path, log: Callable[[str], None]) -> FromMpijob:
    """An MPIJob imagekit wrote (v2beta1): its image, command, env and sizes; each field a TrainJob
    has no place for is said on ``log``, one line each."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"trainer --from-mpijob: cannot read {path}: {exc}", "give an MPIJob manifest") from None
    if not isinstance(doc, dict) or doc.get("apiVersion") != MPIJOB_API or doc.get("kind") != "MPIJob":
        raise UsageError(f"trainer --from-mpijob: {path} is not a {MPIJOB_API} MPIJob",
                         "give a manifest `imagekit launch mpijob` wrote")
    spec = doc.get("spec") or {}
    replicas = spec.get("mpiReplicaSpecs") or {}
    try:
        launcher = replicas["Launcher"]["template"]["spec"]["containers"][0]
        worker_spec = replicas["Worker"]
        worker = worker_spec["template"]["spec"]["containers"][0]
    except (KeyError, IndexError, TypeError):
        raise UsageError(f"trainer --from-mpijob: {path} has no Launcher and Worker container",
                         "give a manifest `imagekit launch mpijob` wrote") from None
    argv = [str(a) for a in launcher.get("command") or []]
    if "imagekit-launcher" in argv:
        argv = argv[argv.index("imagekit-launcher") + 1:]
    command = _mpirun_command(argv, path)
    mpi_names = ("OMPI_MCA_", "PRTE_MCA_")
    env = {e["name"]: str(e.get("value", "")) for e in worker.get("env") or launcher.get("env") or []
           if not e["name"].startswith(mpi_names)}
    limits = (worker.get("resources") or {}).get("limits") or {}
    meta = doc.get("metadata") or {}
    options = {"nodes": worker_spec.get("replicas", 1), "procs_per_node": spec.get("slotsPerWorker"),
               "gpus": int(limits.get("nvidia.com/gpu", 0)), "cpu": limits.get("cpu"), "memory": limits.get("memory"),
               "name": meta.get("name"), "namespace": meta.get("namespace")}
    lost = []
    policy = (spec.get("runPolicy") or {})
    for key, value in policy.items():
        lost.append(f"spec.runPolicy.{key}={value}: no TrainJob field (a TrainJob's pods go with the TrainJob; "
                    "closest: the runtime's JobSet ttlSecondsAfterFinished, activeDeadlineSeconds)")
    for key in ("launcherCreationPolicy", "runLauncherAsWorker"):
        if key in spec:
            lost.append(f"spec.{key}={spec[key]}: no TrainJob field (the runtime's dependsOn and runLauncherAsNode "
                        "decide it)")
    for line in lost:
        log(f"imagekit: trainer --from-mpijob: {line}")
    return FromMpijob(str(worker.get("image") or launcher.get("image")), tuple(command), env,
                      {k: v for k, v in options.items() if v is not None}, tuple(lost))


def _mpirun_command(argv: list[str], path: Path) -> list[str]:
    """The rank command of ``mpirun -np N [--allow-run-as-root] [-x NAME]... COMMAND`` (Trainer drops
    ``-np``: the TrainJob's own mpirun is written from numNodes and numProcPerNode)."""
    if not argv or Path(argv[0]).name != MPIRUN:
        raise UsageError(f"trainer --from-mpijob: {path}: the launcher runs {argv[:1] or 'nothing'}, not mpirun",
                         "give a manifest `imagekit launch mpijob` wrote")
    rest = argv[1:]
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0)
        if flag in ("-np", "-n", "-x") and rest:
            rest.pop(0)
    if not rest:
        raise UsageError(f"trainer --from-mpijob: {path}: the launcher's mpirun has no command", None)
    return rest
