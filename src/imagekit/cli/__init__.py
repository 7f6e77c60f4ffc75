"""The ``imagekit`` command: a click group whose subcommands load lazily.

Start-up must stay fast (``imagekit --help`` < 0.3 s), so this module imports
only click; each command module imports its heavy libraries inside the
command function.
"""

from __future__ import annotations

import importlib
import sys

import click

from imagekit import __version__

# name -> "module:attribute"; each command module owns its commands.
COMMANDS: dict[str, str] = {
    "stacks": "imagekit.cli.stack_cmds:stacks",
    "show": "imagekit.cli.stack_cmds:show",
    "render": "imagekit.cli.stack_cmds:render",
    "matrix": "imagekit.cli.stack_cmds:matrix",
    "base": "imagekit.cli.build_cmds:base",
    "build": "imagekit.cli.build_cmds:build",
    "check": "imagekit.cli.build_cmds:check",
    "report": "imagekit.cli.build_cmds:report",
    "export": "imagekit.cli.export_cmds:export",
    "push": "imagekit.cli.export_cmds:push",
    "pull": "imagekit.cli.pull_cmds:pull",
    "store": "imagekit.cli.store_cmds:store",
    "launch": "imagekit.cli.launch_cmds:launch",
    "preflight": "imagekit.cli.launch_cmds:preflight",
    "validate": "imagekit.cli.validate_cmds:validate",
}


class LazyGroup(click.Group):
    """Loads a subcommand's module only when that subcommand is used or listed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        from importlib.util import find_spec

        return sorted(n for n, t in COMMANDS.items() if find_spec(t.split(":")[0]) is not None)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)

    def invoke(self, ctx: click.Context):
        from imagekit.errors import ImagekitError

        try:
            return super().invoke(ctx)
        except ImagekitError as exc:
            click.echo(f"imagekit: error: {exc}", err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="imagekit")
@click.option("--stacks-dir", "stacks_dirs", multiple=True, metavar="DIR",
              help="a site directory of stacks, searched before $IMAGEKIT_STACKS_PATH and the shipped "
                   "stacks (repeatable)")
@click.option("--site", "site", metavar="FILE",
              help="a site pins file: sha256 pins for the files of the site's mirror that are not upstream's "
                   "(overrides $IMAGEKIT_SITE)")
def main(stacks_dirs: tuple[str, ...], site: str | None) -> None:
    """Build HPC/AI container images from declarative stacks.

    \b
    The pipeline, each stage usable alone:
      imagekit render stacks/debian-mpi.yaml          # HPCCM -> Dockerfile
      imagekit build stacks/debian-mpi.yaml           # Docker engine + BuildKit
      imagekit check imagekit/debian-mpi:latest       # testinfra checks
      imagekit export imagekit/debian-mpi:latest --to enroot -o mpi.sqsh
      imagekit launch slurm --image ./mpi.sqsh --nodes 2 -- ./app
      imagekit validate nccl-tests.log --min-busbw 100
      imagekit --stacks-dir /site/stacks render site-nccl   # a site's own stacks first
      imagekit --site /site/pins.yaml build debian-cuda --mirror /site/mirror
    """
    if site or "imagekit.sources" in sys.modules:  # one process may run several commands (tests do)
        from imagekit import sources

        sources.site_file = site
    if stacks_dirs:
        from pathlib import Path

        from imagekit import stack

        stack.extra_dirs[:] = [Path(d) for d in stacks_dirs]


def run() -> None:  # pragma: no cover - console entry for `python -m imagekit`
    main(prog_name="imagekit")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run())
