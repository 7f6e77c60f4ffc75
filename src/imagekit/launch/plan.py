"""One launch, composed and carried out: the request, through a target's row, to a job that is printed,
written, submitted or run.

:func:`launch` is the one place a launch is composed (ReFrame's ``Job.create(scheduler, launcher)``):

1. the target's scheduler (``--scheduler``), and what it refuses of the request (``--validate`` needs a
   job whose output imagekit reads);
2. the container runtime, resolved from its name once (the only name → object resolution of a launch);
3. the :class:`~imagekit.launch.session.Session`: the image's facts, the command;
4. the :class:`~imagekit.launch.workload.Workload`: the profiles' and the user's environment, the GPU
   policy, checked once;
5. the scheduler and the rank starter, from the target's options;
6. preflight, as the starter declares it (:class:`~imagekit.launch.starters.LauncherNeeds`);
7. the job delivered: run here, printed, written, or submitted to Slurm.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from imagekit.util.errors import UsageError
from imagekit.launch import profiles as profiles_mod
from imagekit.launch import runtimes
from imagekit.launch.common import parse_env, parse_mounts, require_tool
from imagekit.launch.gpu_env import GpuLaunch
from imagekit.launch.launcher import report
from imagekit.launch.traits import ImageTraits
from imagekit.launch.preflight import PreflightPlan
from imagekit.launch.schedulers import Local, Slurm, SlurmRun, submit
from imagekit.launch.session import LaunchRequest, Session
from imagekit.launch.starters import Job
from imagekit.launch.targets import Target
from imagekit.launch.workload import Workload, job_environment
from imagekit.util.settings import Site
from imagekit.validate import Gates


def launch(target: Target, request: LaunchRequest, *, log: Callable[[str], None],
           echo: Callable[[str], None]) -> int:
    """Compose the job ``request`` asks ``target`` for and carry it out; the exit code the caller should
    see (0 for a job that was only printed, written or submitted). ``log`` hears progress, ``echo`` what
    goes to stdout (scripts, manifests, job ids, the verdict)."""
    job, session = _compose(target, request, log=log, echo=echo)
    return _carry_out(job, session, log=log, echo=echo)


def job(target: Target, request: LaunchRequest, *, log: Callable[[str], None] = lambda _m: None) -> Job:
    """The job ``request`` asks ``target`` for, composed but not carried out (benchmarks and tests that
    run it themselves)."""
    return _compose(target, request, log=log, echo=log)[0]


def _compose(target: Target, request: LaunchRequest, *, log: Callable[[str], None],
             echo: Callable[[str], None]) -> tuple[Job, Session]:
    request = target.starter.amend(request, log)
    if not request.image:
        raise UsageError(f"{target.name}: --image is missing", "name the image: --image REF")
    values = dict(request.options)
    scheduler_cls = target.scheduler(values.pop("scheduler", None))
    if scheduler_cls is Slurm:
        values = {**target.starter.scheduler_defaults, **values}
    _check_validate(target, scheduler_cls, request, values)
    runtime = (runtimes.of(request.runtime or target.default_runtime, target.starter, target.name)
               if target.default_runtime else None)
    starter = target.starter.from_options(values)
    gpus = starter.gpus(values)
    chosen = profiles_mod.get(request.profiles)
    if scheduler_cls is Slurm:
        values["segment"] = profiles_mod.segment(chosen, values["nodes"], gpus if gpus > 0 else 0)
    scheduler = scheduler_cls.from_options(values)
    # The image's facts are read once, for preflight, the benchmark and the GPU policy alike.
    session = Session(dataclasses.replace(request, preflight=request.preflight and scheduler.reads_facts),
                      log=log, echo=echo)
    env = job_environment(profiles_mod.environment(chosen, dict(request.env)), gpus=gpus != 0,
                          hides_gpus=starter.hides_gpus, runtime=runtime,
                          image_env=session.facts.env if session.facts is not None else None, log=log)
    workload = Workload(image=request.image, command=session.command, runtime=runtime, env=starter.job_env(env),
                        image_env=session.benchmark_env, mounts=request.mounts, workdir=request.workdir, gpus=gpus,
                        traits=ImageTraits.of(session.facts))
    return Job(workload, scheduler, starter), session


def request_from(values: dict, *, gates: Gates | None, site: Site) -> LaunchRequest:
    """The request a command's option values (by ``dest``) make: the workload's, then the target's own."""
    values = dict(values)
    return LaunchRequest(image=values.pop("image", None) or "", command=tuple(values.pop("command", ())), gates=gates,
                         preflight=not values.pop("no_preflight", False), site=site,
                         runtime=values.pop("runtime", None), env=parse_env(values.pop("env", ())),
                         profiles=tuple(values.pop("profiles", ())),
                         mounts=tuple(parse_mounts(values.pop("mounts", ()))),
                         workdir=values.pop("workdir", None), options=values)


def _check_validate(target: Target, scheduler_cls: type, request: LaunchRequest, values: dict) -> None:
    """--validate reads the job's output: a job imagekit runs here, or a Slurm job it submits and waits for."""
    if not request.validate or scheduler_cls is not Slurm:
        return
    if Local in target.schedulers:
        raise UsageError("--validate runs the job here and reads its output", "use --scheduler local")
    if values.get("dry_run", True):
        raise UsageError("--validate judges the job's output, so it needs --submit", "add --submit")


def _preflight(job: Job, session: Session) -> None:
    w, starter, scheduler = job.workload, job.starter, job.scheduler
    here = isinstance(scheduler, Local) and starter.runs_here()
    probe = starter.needs.host_mpirun and w.runtime is not None and w.runtime.engine
    session.preflight(PreflightPlan(slurm=isinstance(scheduler, Slurm) and not scheduler.dry_run,
                                    needs=starter.needs, probe=probe,
                                    gpu=GpuLaunch(runtime=w.runtime, env=w.container_env, gpus=w.wants_gpus,
                                                  here=here, fix=starter.needs.gpu_fix)))


def _carry_out(job: Job, session: Session, *, log: Callable[[str], None], echo: Callable[[str], None]) -> int:
    scheduler = job.scheduler
    if scheduler.runs:
        launcher = job.starter.launcher(job, log)
        _preflight(job, session)
        rc = session.run(launcher)
        said = report(launcher, rc)
        if said:
            echo(said)
        return rc
    outputs = job.starter.files(job)
    if isinstance(scheduler, Slurm) and not scheduler.dry_run:
        require_tool("sbatch", "run on a Slurm login node, or write the script with --dry-run -o FILE")
    if scheduler.preflights:
        # The Slurm plugin check only applies where the script will be submitted from; the containers
        # start on the compute nodes, not on this (login) node.
        _preflight(job, session)
    path = scheduler.deliver(outputs, echo, log)
    if not isinstance(path, Path):
        return 0
    if session.request.validate:
        log_path = path.with_suffix(".out")
        log(f"imagekit: submitting {path} and waiting; job output in {log_path}")
        return session.run(SlurmRun(path, log_path, log))
    job_id = submit(path)
    log(f"imagekit: submitted {path} as Slurm job {job_id}")
    echo(job_id + "\n")
    return 0
