"""``imagekit launch …``: Slurm/Pyxis, host mpirun, inside-out, MPIJob, and cleanup."""

from __future__ import annotations

import json
import sys
from pathlib import Path
import click

from imagekit import engine
from imagekit.cli.gate_options import GATE_KEYS, gate_options
from imagekit.errors import UsageError
from imagekit.launch import common
from imagekit.launch import inside_out as inside_out_mod
from imagekit.launch import mpijob as mpijob_mod
from imagekit.launch import mpirun as mpirun_mod
from imagekit.launch import profiles as profiles_mod
from imagekit.launch import slurm as slurm_mod
from imagekit.launch.common import JOB_LABEL
from imagekit.launch.gpu_env import GpuLaunch
from imagekit.launch.session import LaunchRequest, Session
from imagekit.validate import Gates

CMD_SETTINGS = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def _log(msg: str) -> None:
    click.echo(msg, err=True)


def _command_arg(f):
    return click.argument("command", nargs=-1, type=click.UNPROCESSED)(f)


def _common(f):
    f = click.option("--env", "env", multiple=True, metavar="NAME=VALUE",
                     help="Set in every rank (repeatable; bare NAME copies it from here).")(f)
    f = click.option("--mounts", "mounts", multiple=True, metavar="SRC:DST[:ro]",
                     help="Bind mounts, repeatable or comma-separated.")(f)
    f = click.option("--no-preflight", is_flag=True, help="Launch even if preflight finds a problem.")(f)
    f = click.option("--profile", "profile", multiple=True, metavar="NAME",
                     help="A launch profile's environment (and placement): "
                          + ", ".join(profiles_mod.PROFILES) + " (repeatable; --env wins).")(f)
    return f


def _validate_options(f):
    f = gate_options(f)
    return click.option("--validate", is_flag=True,
                        help="Judge the job's output with `imagekit validate` and these gates; without a "
                             "command, run the image's benchmark (nccl-tests, or mpi4py's ring test).")(f)


def _session(image: str, command: tuple, validate: bool, no_preflight: bool, gates: dict) -> Session:
    """The launch's session, from the options every launcher shares. The gates are loaded first:
    a bad gate fails before the image is read or any job starts."""
    values = {k: gates.pop(k) for k in GATE_KEYS}
    request = LaunchRequest(image=image, command=command, gates=Gates.load(**values) if validate else None,
                            preflight=not no_preflight)
    return Session(request, log=_log, echo=lambda text: click.echo(text, nl=False))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def launch() -> None:
    """Run an image on many nodes: Slurm, host mpirun, inside-out sshd, Kubernetes.

    \b
    Examples:
    Outside-in (the host's process manager starts one container per rank):
      imagekit launch slurm --image ./mpi.sqsh --nodes 2 --gpus-per-node 8 -- ./app
      imagekit launch mpirun --runtime docker --image REF --hosts a:4,b:4 -- ./app
    Inside-out (mpirun inside the first of N sshd containers):
      imagekit launch inside-out --image REF --nodes 3 -- python3 -m mpi4py.bench helloworld
      imagekit launch mpijob --image REF --workers 2 --gpus-per-worker 8 -o job.yaml -- ./app
    """


@launch.command(context_settings=CMD_SETTINGS)
@click.option("--image", required=True, help="Registry image (Pyxis/Enroot URI), ./x.sqsh or ./x.sif path.")
@click.option("--nodes", "-N", type=int, required=True)
@click.option("--gpus-per-node", type=int, default=0, show_default=True,
              help="GPUs per node; one task per GPU unless --ntasks-per-node. 0: a CPU-only job, whose "
                   "containers get NVIDIA_VISIBLE_DEVICES=void if the image asks for GPUs.")
@click.option("--ntasks-per-node", type=int, default=None, help="Tasks per node (CPU-only default 1).")
@click.option("--cpus-per-task", type=int, default=None)
@click.option("--partition", "-p", default=None)
@click.option("--time", "-t", "time_", default=None, metavar="[D-]HH:MM:SS")
@click.option("--account", "-A", default=None)
@click.option("--job-name", default="imagekit", show_default=True)
@click.option("--runtime", default="pyxis", show_default=True, metavar="pyxis|apptainer|enroot|docker")
@click.option("--workdir", default=None, help="Working directory inside the container.")
@click.option("--container-name", default=None, help="Pyxis: keep/reuse a named container for the job.")
@click.option("--mount-home/--no-mount-home", default=None, help="Pyxis: (do not) bind the home directory.")
@click.option("--nccl-debug", is_flag=True, help="export NCCL_DEBUG=INFO in the job.")
@click.option("--srun-arg", "srun_args", multiple=True, help="Extra srun argument (repeatable).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the sbatch script here.")
@click.option("--dry-run/--submit", default=True, help="Print the script (default) or submit it with sbatch.")
@_validate_options
@_common
@_command_arg
def slurm(image, nodes, gpus_per_node, ntasks_per_node, cpus_per_task, partition, time_, account, job_name,
          runtime, workdir, container_name, mount_home, nccl_debug, srun_args, output, dry_run, env, mounts,
          no_preflight, profile, command, validate, **gates) -> None:
    """Write (and optionally submit) an sbatch script: srun --mpi=pmix, one container per task.

    \b
    Examples:
      imagekit launch slurm --image nvcr.io#org/img:tag --nodes 2 --gpus-per-node 8 \\
          --partition gpu --time 01:00:00 --mounts /data:/data:ro -- python3 train.py
      imagekit launch slurm --runtime apptainer --image ./mpi.sif -N 4 --ntasks-per-node 32 \\
          -o job.sbatch -- ./app
      imagekit launch slurm --runtime docker --image REF -N 1 --ntasks-per-node 2 --submit -- ./app
      imagekit launch slurm --image ./nccl.sqsh -N 2 --gpus-per-node 8 --submit --validate \
          --system dgx-h100 -- all_reduce_perf -b 8 -e 8G -f 2 -g 1
      imagekit launch slurm --profile nvl72 --image ./nccl.sqsh -N 18 --gpus-per-node 4 \
          -- all_reduce_perf -b 512M -e 8G -f 2 -g 1     # one rack, multi-node NVLink required
    """
    if validate and dry_run:
        raise UsageError("--validate judges the job's output, so it needs --submit", "add --submit")
    session = _session(image, command, validate, no_preflight, gates)
    chosen = profiles_mod.get(profile)
    job_env = profiles_mod.environment(chosen, common.parse_env(env))
    segment = profiles_mod.segment(chosen, nodes, gpus_per_node)
    # Anything naming GPUs among srun's own arguments (--gres=gpu:N, --gpus…, a gpu partition) keeps the
    # GPU runtime: in doubt, GPUs the user may have asked for are not hidden.
    wants_gpus = bool(gpus_per_node) or any("gpu" in a.lower() for a in srun_args)
    if not wants_gpus:
        job_env = session.cpu_only_env(job_env, runtime)
    job = slurm_mod.SlurmJob(image=image, nodes=nodes, command=session.command, runtime=runtime,
                             gpus_per_node=gpus_per_node, ntasks_per_node=ntasks_per_node,
                             cpus_per_task=cpus_per_task, partition=partition, time=time_, account=account,
                             job_name=job_name, mounts=common.parse_mounts(mounts), env=job_env,
                             workdir=workdir, nccl_debug=nccl_debug, mount_home=mount_home,
                             container_name=container_name, srun_args=list(srun_args),
                             image_env=session.image_env, segment=segment)
    if not dry_run:
        common.require_tool("sbatch", "run on a Slurm login node, or write the script with --dry-run -o FILE")
    # The Slurm plugin check only applies where the script will be submitted from; the containers
    # start on the compute nodes, not on this (login) node.
    session.preflight(scheduler=None if dry_run else "slurm", launcher="slurm",
                      gpu=GpuLaunch(runtime=runtime, env={**job.image_env, **job.env}, gpus=wants_gpus, here=False,
                                    launcher="slurm"))
    if dry_run:
        if output:
            slurm_mod.write(job, output)
            _log(f"imagekit: wrote {output}")
        else:
            click.echo(slurm_mod.render(job), nl=False)
        return
    path = slurm_mod.write(job, output or Path(f"{job_name}-{job.job_id}.sbatch"))
    if validate:
        log_path = path.with_suffix(".out")
        _log(f"imagekit: submitting {path} and waiting; job output in {log_path}")

        sys.exit(session.run(slurm_mod.SlurmRun(path, log_path, _log)))
    job_id = slurm_mod.submit(path)
    _log(f"imagekit: submitted {path} as Slurm job {job_id}")
    click.echo(job_id)


@launch.command(context_settings=CMD_SETTINGS)
@click.option("--runtime", default="docker", show_default=True, metavar="docker|apptainer|enroot")
@click.option("--image", required=True, help="Engine image (docker), .sif (apptainer) or .sqsh (enroot).")
@click.option("--hosts", "-H", required=True, help="HOST[:SLOTS],... or an Open MPI hostfile path.")
@click.option("--np", "np_", type=int, default=None, help="Ranks (default: sum of slots).")
@click.option("--gpus", is_flag=True, help="Give each rank the host's GPUs (--gpus all / --nv / Enroot's GPU "
                                           "hook); without it ranks get NVIDIA_VISIBLE_DEVICES=void if the "
                                           "image asks for GPUs.")
@click.option("--workdir", default=None, help="Working directory inside the container.")
@click.option("--mpirun-arg", "mpirun_args", multiple=True, help="Extra mpirun argument (repeatable).")
@click.option("--output-dir", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write run.sh + rank.sh here and do not run them.")
@click.option("--dry-run", is_flag=True, help="Print run.sh and rank.sh instead of running.")
@_validate_options
@_common
@_command_arg
def mpirun(runtime, image, hosts, np_, gpus, workdir, mpirun_args, output_dir, dry_run, env, mounts,
           no_preflight, profile, command, validate, **gates) -> None:
    """Host mpirun starts one container per rank (sites without Slurm).

    \b
    Examples:
      imagekit launch mpirun --image imagekit/debian-mpi:latest --hosts localhost:2 \\
          -- python3 -m mpi4py.bench helloworld
      imagekit launch mpirun --runtime apptainer --image ./mpi.sif --hosts n1:8,n2:8 -- ./app
      imagekit launch mpirun --image imagekit/debian-mpi:latest --hosts localhost:2 --validate \
          --max-latency-us 500
    """
    session = _session(image, command, validate, no_preflight, gates)
    job_env = profiles_mod.environment(profiles_mod.get(profile), common.parse_env(env))
    if not gpus:
        job_env = session.cpu_only_env(job_env, runtime)
    job = mpirun_mod.MpirunJob(runtime=runtime, image=image, hosts=mpirun_mod.parse_hosts(hosts),
                               command=session.command, np=np_, mounts=common.parse_mounts(mounts), env=job_env,
                               gpus=gpus, workdir=workdir, mpirun_args=list(mpirun_args),
                               image_env=session.image_env)
    if dry_run:
        click.echo("# run.sh\n" + mpirun_mod.render_run(job) + "\n# rank.sh\n" + mpirun_mod.render_wrapper(job), nl=False)
        return
    if output_dir:
        path = mpirun_mod.write(job, output_dir)
        _log(f"imagekit: wrote {path} and {output_dir / 'rank.sh'}")
        return
    common.require_tool("mpirun", "install Open MPI on the hosts (Debian: apt-get install openmpi-bin), "
                                  "or use `imagekit launch inside-out`")
    session.preflight(launcher="mpirun", probe=runtime == "docker",
                      gpu=GpuLaunch(runtime=runtime, env={**job.image_env, **job.env}, gpus=gpus,
                                    here=mpirun_mod.on_this_host(job.hosts), launcher="mpirun"))
    sys.exit(session.run(mpirun_mod.MpirunRun(job, _log)))


@launch.command("inside-out", context_settings=CMD_SETTINGS)
@click.option("--runtime", default="docker", show_default=True, metavar="docker")
@click.option("--image", required=True)
@click.option("--nodes", "-N", type=int, required=True, help="Worker containers (the first also launches).")
@click.option("--slots", type=int, default=1, show_default=True, help="Ranks per worker.")
@click.option("--scheduler", default="local", show_default=True, metavar="local|slurm",
              help="local: containers on this engine; slurm: write an sbatch script.")
@click.option("--iface", default=None, help="MPI TCP interface (default eth0 locally, Open MPI's choice on Slurm).")
@click.option("--mpirun-arg", "mpirun_args", multiple=True, help="Extra mpirun argument (repeatable).")
@click.option("--shm-size", default="1g", show_default=True)
@click.option("--gpus", is_flag=True, help="Give workers all GPUs (docker --gpus all).")
@click.option("--ready-timeout", type=float, default=60.0, show_default=True, help="Seconds to wait for sshd.")
@click.option("--cleanup-timeout", type=float, default=60.0, show_default=True,
              help="Seconds the engine gets to remove the job's containers on exit or Ctrl-C; what it has "
                   "not removed by then is named, and the next imagekit command removes it.")
@click.option("--partition", "-p", default=None, help="Slurm partition (--scheduler slurm).")
@click.option("--time", "-t", "time_", default=None, help="Slurm time limit (--scheduler slurm).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="--scheduler slurm: write the sbatch script here.")
@click.option("--submit", is_flag=True, help="--scheduler slurm: submit the script with sbatch.")
@click.option("--json", "as_json", is_flag=True, help="Print the job id, exit code and timings as JSON.")
@_validate_options
@_common
@_command_arg
def inside_out(runtime, image, nodes, slots, scheduler, iface, mpirun_args, shm_size, gpus, ready_timeout,
               cleanup_timeout, partition, time_, output, submit, as_json, env, mounts, no_preflight, profile,
               command, validate, **gates) -> None:
    """N sshd worker containers on a private network; mpirun runs in the first.

    \b
    Examples:
      imagekit launch inside-out --image imagekit/debian-mpi:latest --nodes 3 \\
          -- python3 -m mpi4py.bench ringtest
      imagekit launch inside-out --scheduler slurm --image REF --nodes 4 -o io.sbatch -- ./app
      imagekit launch inside-out --image REF --nodes 2 --gpus --validate --system site/cluster.yaml
    """
    if validate and scheduler != "local":
        raise UsageError("--validate runs the job here and reads its output", "use --scheduler local")
    session = _session(image, command, validate, no_preflight, gates)
    job = inside_out_mod.InsideOutJob(image=image, nodes=nodes, command=session.command, runtime=runtime,
                           image_env=session.image_env,
                           scheduler=scheduler, slots=slots,
                           env=profiles_mod.environment(profiles_mod.get(profile), common.parse_env(env)),
                           mounts=common.parse_mounts(mounts), iface=iface, mpirun_args=list(mpirun_args),
                           shm_size=shm_size, gpus=gpus, ready_timeout=ready_timeout,
                           cleanup_timeout=cleanup_timeout, partition=partition, time=time_)
    if scheduler == "slurm":
        text = inside_out_mod.render_sbatch(job)
        if not submit and not output:
            click.echo(text, nl=False)
            return
        path = common.write_atomic(output or Path(f"imagekit-io-{job.job_id}.sbatch"), text)
        _log(f"imagekit: wrote {path}")
        if submit:
            click.echo(slurm_mod.submit(path))
        return
    session.preflight(launcher="inside-out",
                      gpu=GpuLaunch(runtime=runtime, env=job.container_env, gpus=gpus, here=True,
                                    launcher="inside-out"))
    runner = inside_out_mod.InsideOutRun(job, _log)
    rc = session.run(runner)
    if as_json:
        click.echo(json.dumps({"job": job.job_id, "exit_code": rc, "timings": runner.timings}))
    sys.exit(rc)


@launch.command(context_settings=CMD_SETTINGS)
@click.option("--name", default="imagekit", show_default=True, help="MPIJob name (DNS-1123 label).")
@click.option("--image", required=True)
@click.option("--workers", type=int, required=True)
@click.option("--gpus-per-worker", type=int, default=0, show_default=True)
@click.option("--slots-per-worker", type=int, default=None, help="Default: GPUs per worker, or 1.")
@click.option("--namespace", default=None)
@click.option("--cpu", default=None, help="CPU limit per pod, e.g. 16.")
@click.option("--memory", default=None, help="Memory limit per pod, e.g. 64Gi.")
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the manifest here (default: stdout).")
@_command_arg
def mpijob(name, image, workers, gpus_per_worker, slots_per_worker, namespace, cpu, memory, env, output,
           command) -> None:
    """Write a Kubeflow MPIJob (kubeflow.org/v2beta1) manifest.

    \b
    Example:
      imagekit launch mpijob --name nccl --image reg/img:tag --workers 2 --gpus-per-worker 8 \\
          -o nccl.yaml -- all_reduce_perf -b 8 -e 1G -f 2 -g 1
      kubectl apply -f nccl.yaml
    """
    spec = mpijob_mod.MPIJobSpec(name=name, image=image, workers=workers, command=list(command),
                          gpus_per_worker=gpus_per_worker, slots_per_worker=slots_per_worker,
                          namespace=namespace, cpu=cpu, memory=memory, env=common.parse_env(env))
    if output:
        mpijob_mod.write(spec, output)
        _log(f"imagekit: wrote {output}")
    else:
        click.echo(mpijob_mod.render(spec), nl=False)


@launch.command()
@click.option("--job", "job_id", default=None, help="The job id printed at launch (default: every imagekit job).")
def cleanup(job_id) -> None:
    """Remove containers and networks a killed launcher left behind (label io.imagekit.job).

    \b
    Example:
      imagekit launch cleanup --job ik1a2b3c4d
    """
    total = engine.remove_labelled(JOB_LABEL, job_id or None)
    _log(f"imagekit: removed {total} object(s)")
