"""Launch jobs for tests, from one flat set of keywords, as the targets compose them.

A test that renders a script names what it cares about (``image=``, ``nodes=``, ``runtime="enroot"``,
``mounts=``...) and gets the :class:`~imagekit.launch.starters.Job` that `imagekit launch` would make of
the same request: the workload's keywords go to :class:`~imagekit.launch.workload.Workload` (the runtime
by name, resolved as a launch does), the scheduler's to its class, the rest to the rank starter.
"""

from __future__ import annotations

from imagekit.launch import runtimes
from imagekit.launch.inside_out.sshd_inside import SshdInside
from imagekit.launch.mpijob import MpiOperator
from imagekit.launch.mpirun import HostMpirun
from imagekit.launch.pods import PodSizes
from imagekit.launch.schedulers import Kubernetes, Local, Slurm
from imagekit.launch.slurm import Srun
from imagekit.launch.starters import Job
from imagekit.launch.workload import ALL_GPUS, Workload

WORKLOAD = ("image", "command", "env", "image_env", "image_env_label", "mounts", "workdir", "job_id")


def _workload(kw: dict, starter: type, default_runtime: str | None, gpus: int) -> Workload:
    own = {k: kw.pop(k) for k in WORKLOAD if k in kw}
    name = kw.pop("runtime", default_runtime)
    runtime = runtimes.of(name, starter) if name is not None else None
    return Workload(runtime=runtime, gpus=gpus, **own)


def slurm_job(**kw) -> Job:
    """``slurm.SlurmJob``'s keywords of old: gpus_per_node, ntasks_per_node, partition, srun_args, stage..."""
    asked = kw.pop("gpus_per_node", 0)
    sched = {k: kw.pop(k) for k in ("nodes", "cpus_per_task", "partition", "time", "account", "job_name", "segment")
             if k in kw}
    if "ntasks_per_node" in kw:
        sched["tasks_per_node"] = kw.pop("ntasks_per_node")
    srun = Srun(srun_args=tuple(kw.pop("srun_args", ())), **{k: kw.pop(k) for k in (
        "nccl_debug", "mount_home", "container_name", "stage", "stage_dir", "importer") if k in kw})
    kw["env"] = srun.job_env(dict(kw.get("env", {})))
    workload = _workload(kw, Srun, "pyxis", srun.gpus({"gpus": asked}))
    assert not kw, f"unknown keywords {sorted(kw)}"
    return Job(workload, Slurm(**sched), srun)


def mpirun_job(**kw) -> Job:
    """``mpirun.MpirunJob``'s keywords of old: runtime, hosts, np, gpus, mpirun_args..."""
    gpus = ALL_GPUS if kw.pop("gpus", False) else 0
    starter = HostMpirun(hosts=tuple(kw.pop("hosts")), np=kw.pop("np", None),
                         mpirun_args=tuple(kw.pop("mpirun_args", ())))
    workload = _workload(kw, HostMpirun, "docker", gpus)
    assert not kw, f"unknown keywords {sorted(kw)}"
    return Job(workload, Local(), starter)


def inside_out_job(**kw) -> Job:
    """``inside_out.InsideOutJob``'s keywords of old: nodes, scheduler ("local"/"slurm"), slots, partition..."""
    gpus = ALL_GPUS if kw.pop("gpus", False) else 0
    where = kw.pop("scheduler", Local.name)
    sched = {k: kw.pop(k) for k in ("partition", "time", "job_name") if k in kw}
    starter = SshdInside(nodes=kw.pop("nodes"), mpirun_args=tuple(kw.pop("mpirun_args", ())), **{k: kw.pop(k) for k in (
        "slots", "iface", "shm_size", "ready_timeout", "cleanup_timeout") if k in kw})
    workload = _workload(kw, SshdInside, "docker", gpus)
    assert not kw, f"unknown keywords {sorted(kw)}"
    scheduler = (Slurm(nodes=starter.nodes, **{**SshdInside.scheduler_defaults, **sched}) if where == Slurm.name
                 else Local())
    return Job(workload, scheduler, starter)


def mpijob(**kw) -> Job:
    """``mpijob.MPIJobSpec``'s keywords of old: name, workers, gpus_per_worker, slots_per_worker, namespace..."""
    gpus = kw.pop("gpus_per_worker", 0)
    cluster = Kubernetes(name=kw.pop("name", "imagekit"), namespace=kw.pop("namespace", None))
    sizes = PodSizes(nodes=kw.pop("workers"), procs_per_node=kw.pop("slots_per_worker", None),
                     **{k: kw.pop(k) for k in ("cpu", "memory", "shm_size") if k in kw},
                     nodes_flag="--workers", procs_flag="--slots-per-worker")
    starter = MpiOperator(sizes, **{k: kw.pop(k) for k in ("ssh_auth_mount_path", "clean_pod_policy") if k in kw})
    workload = _workload(kw, MpiOperator, None, starter.gpus({"gpus": gpus}))
    assert not kw, f"unknown keywords {sorted(kw)}"
    return Job(workload, cluster, starter)
