"""``imagekit launch …``: one command per launch target (:mod:`imagekit.launch.targets`), and cleanup.

The commands are made from the target rows: each row's options become click options, and the command
hands what it parsed to :func:`imagekit.launch.plan.launch`, which composes and carries out the launch.
Nothing is decided here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from imagekit.cli.gate_options import gate_options, load_gates
from imagekit.cli.options import current_site
from imagekit.engines import docker as engine
from imagekit.launch import plan, targets
from imagekit.launch.common import JOB_LABEL
from imagekit.launch.opts import DIR, FILE, Opt

CMD_SETTINGS = {"ignore_unknown_options": True, "allow_interspersed_args": False}
_PATHS = {FILE: click.Path(dir_okay=False, path_type=Path), DIR: click.Path(file_okay=False, path_type=Path)}


def _log(msg: str) -> None:
    click.echo(msg, err=True)


def _echo(text: str) -> None:
    click.echo(text, nl=False)


def _option(o: Opt):
    """The click option for one option row."""
    kw = dict(help=o.help, metavar=o.metavar, required=o.required, multiple=o.multiple, show_default=o.show_default)
    if o.type is bool and "/" in o.decls[0]:     # an --on/--off pair; default None: neither given
        return click.option(*o.decls, o.dest, default=o.default, **kw)
    if o.type is bool:
        return click.option(*o.decls, o.dest, is_flag=True, default=bool(o.default), **kw)
    kind = _PATHS.get(o.path) or (click.Choice(o.type) if isinstance(o.type, tuple) else o.type)
    return click.option(*o.decls, o.dest, type=kind, default=o.default, **kw)


def _command(target: targets.Target) -> click.Command:
    def run(**values) -> None:
        site = current_site()
        gates, site = load_gates(values, site) if target.validate else (None, site)
        rc = plan.launch(target, plan.request_from(values, gates=gates, site=site), log=_log, echo=_echo)
        if rc:
            sys.exit(rc)

    run.__doc__ = target.help
    f = click.argument("command", nargs=-1, type=click.UNPROCESSED)(run)
    for o in reversed(target.options()):
        f = _option(o)(f)
    if target.validate:
        f = click.option("--validate", is_flag=True,
                         help="Judge the job's output with `imagekit validate` and these gates; without a "
                              "command, run the image's benchmark (nccl-tests, or mpi4py's ring test).")(
            gate_options(f))
    return click.command(target.name, context_settings=CMD_SETTINGS)(f)


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


for _target in targets.TARGETS:
    launch.add_command(_command(_target))


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
