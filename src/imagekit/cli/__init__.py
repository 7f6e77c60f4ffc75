"""The ``imagekit`` command: a click group whose subcommands load lazily.

Start-up must stay fast (``imagekit --help`` < 0.3 s), so this module imports
only click, and :class:`LazyGroup` is the package's one deferred loading
(click's documented "Lazily Loading Subcommands" pattern): it imports a
command's module only when that command runs or shows its own help, and lists
the commands from :data:`SUMMARIES` without importing any of them. Command
modules and everything below them import at module level.
"""

from __future__ import annotations

import sys

import click

from imagekit.util import lazy, settings, signals, terminal, version_info
from imagekit.util.errors import EXIT_CODES, ImagekitError

# name -> "module:attribute"; each command module owns its commands.
COMMANDS: dict[str, str] = {
    "stacks": "imagekit.cli.catalog_cmds:stacks",
    "show": "imagekit.cli.stack_cmds:show",
    "render": "imagekit.cli.stack_cmds:render",
    "matrix": "imagekit.cli.catalog_cmds:matrix",
    "outdated": "imagekit.cli.catalog_cmds:outdated",
    "base": "imagekit.cli.build_cmds:base",
    "build": "imagekit.cli.build_cmds:build",
    "check": "imagekit.cli.build_cmds:check",
    "report": "imagekit.cli.build_cmds:report",
    "export": "imagekit.cli.export_cmds:export",
    "push": "imagekit.cli.push_cmds:push",
    "pull": "imagekit.cli.pull_cmds:pull",
    "store": "imagekit.cli.store_cmds:store",
    "keygen": "imagekit.cli.sign_cmds:keygen",
    "sign": "imagekit.cli.sign_cmds:sign",
    "verify": "imagekit.cli.sign_cmds:verify",
    "sbom": "imagekit.cli.sign_cmds:sbom_cmd",
    "inspect": "imagekit.cli.sign_cmds:inspect",
    "launch": "imagekit.cli.launch_cmds:launch",
    "preflight": "imagekit.cli.preflight_cmds:preflight",
    "doctor": "imagekit.cli.doctor_cmds:doctor_cmd",
    "validate": "imagekit.cli.validate_cmds:validate",
}


# name -> the first paragraph of the command's help: what `imagekit --help` lists without importing
# the command's module (pip's CommandInfo summaries); tests/cli/test_lazy_group.py holds them to the
# commands' own help.
SUMMARIES: dict[str, str] = {
    "stacks": "List the stacks (site directories first, then the shipped ones), their matrix variants, "
              "and where each came from; with --outdated, what each pins and what is newer.",
    "show": "Show the resolved stack: base, every component with version and source.",
    "render": "Render a stack to a Dockerfile or a Singularity definition (HPCCM).",
    "matrix": "List every stack x variant x arch to build, for CI to consume.",
    "outdated": "Show how far each pin lags what is served: PyPI (pip's configured index) for wheels and NCCL, the "
                "site mirror or imagekit's pins for upstream releases, the newest upstream release for distro "
                "packages, and whether each base image is pinned by digest. A report (exit 0) unless --strict.",
    "base": "Bootstrap an offline base image (mmdebstrap or debootstrap) and import it into the engine.",
    "build": "Render a stack and build its image with BuildKit (or rootless Podman).",
    "check": "Run the image's checks (pytest-testinfra) in a container of it.",
    "report": "Show what is in an image: stack, components, versions, layer sizes.",
    "export": "Export an image as an Enroot squashfs or a SIF file, streaming.",
    "push": "Push an image to a registry; print its digest and the Pyxis/Enroot reference.",
    "pull": "Fetch the export pushed beside the image REF names, and verify its digest.",
    "store": "The export store: every converted .sqsh/.sif, keyed by image ID, format, preset and options.",
    "keygen": "Make a site signing key: NAME.key (private, mode 0600) and NAME.pub.",
    "sign": "Sign an image's SBOM and provenance: an engine image, a .sqsh or .sif, or a pushed image.",
    "verify": "Check the signatures of a .sif, a .sqsh, an engine image or a pushed image.",
    "sbom": "Print an image's SBOM: the stack's components and its dpkg and pip packages.",
    "inspect": "Show who signed an image, what the signatures are about, and its SBOM in brief.",
    "launch": "Run an image on many nodes: Slurm, host mpirun, inside-out sshd, Kubernetes.",
    "preflight": "Compare this host with what the image records; warn, or refuse with the fix.",
    "doctor": "Show this host's set-up for imagekit images: Pyxis's importer line, the wrapper and what it "
              "exports, the signature policy and its keys, the shared store, the runtimes and their versions.",
    "validate": "Parse nccl-tests (text, -J JSON, -I per-iteration), OSU / mpi4py benchmark output and "
                "NCCL_DEBUG=INFO logs; judge them.",
}


class LazyGroup(click.Group):
    """Loads a subcommand's module only when that subcommand is used; lists them from SUMMARIES."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's own listing (same width rule), from SUMMARIES instead of importing every command."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        with formatter.section("Commands"):
            # A bare Command shortens a summary exactly as the real command would shorten its help
            # (click's own helper for it is deprecated).
            formatter.write_dl([(n, click.Command(n, help=SUMMARIES[n]).get_short_help_str(limit)) for n in names])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        return lazy.load(target)

    def invoke(self, ctx: click.Context):
        try:
            # Labels, registry answers and container output are someone else's text: no control
            # character of theirs reaches the terminal (imagekit.util.terminal).
            with terminal.escaped_output():
                return super().invoke(ctx)
        except ImagekitError as exc:
            click.echo(terminal.printable(f"imagekit: error: {exc}"), err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt as exc:   # Ctrl-C, or SIGTERM/SIGHUP where a command takes them
            # The command's own cleanup ran on the way here (temporary files, containers).
            click.echo(f"imagekit: interrupted ({signals.describe(exc)}); what it had started was cleaned up",
                       err=True)
            ctx.exit(signals.exit_status(exc))


_EXIT_TABLE = "\b\nExit codes, the same for every command:\n" + "\n".join(
    f"  {code:>3}  {what}" for code, what in EXIT_CODES.items())


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    # Only when asked: the commit look-up runs git, which `imagekit --help`'s start-up must not wait for.
    if not value or ctx.resilient_parsing:
        return
    click.echo(f"imagekit, version {version_info.full_version()}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=_EXIT_TABLE)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version (with the commit it was built from) and exit.")
@click.option("--stacks-dir", "stacks_dirs", multiple=True, metavar="DIR",
              help="a site directory of stacks, searched before $IMAGEKIT_STACKS_PATH and the shipped "
                   "stacks (repeatable)")
@click.option("--site", "site", metavar="FILE",
              help="a site pins file: sha256 pins for the files of the site's mirror that are not upstream's "
                   "(overrides $IMAGEKIT_SITE)")
@click.pass_context
def main(ctx: click.Context, stacks_dirs: tuple[str, ...], site: str | None) -> None:
    """Build HPC/AI container images from declarative stacks.

    \b
    The pipeline, each stage usable alone:
      imagekit render stacks/debian-mpi.yaml          # HPCCM -> Dockerfile
      imagekit build stacks/debian-mpi.yaml           # Docker engine + BuildKit
      imagekit check imagekit/debian-mpi:latest       # testinfra checks
      imagekit export imagekit/debian-mpi:latest --to enroot -o mpi.sqsh
      imagekit launch slurm --image ./mpi.sqsh --nodes 2 -- ./app
      imagekit validate nccl-tests.log --min-busbw 100
      imagekit --stacks-dir /site/stacks render debian-mpi  # the site's debian-mpi, if it has one
      imagekit --site /site/pins.yaml build debian-cuda --mirror /site/mirror
    """
    # Built once, for this invocation only (cli.options.current_site() hands it to the commands): a process
    # that runs several commands (tests do) gives each the site its own options name.
    ctx.obj = settings.Site.from_env(pins_file=site, stack_dirs=stacks_dirs)


def run() -> None:  # pragma: no cover - console entry for `python -m imagekit`
    main(prog_name="imagekit")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run())
