"""Options that several commands share, written once (pip's ``cmdoptions``): the mirror, the engine and
the export progress line; the gates are in :mod:`gate_options` (they load the validator, which
`imagekit render` must not). Command modules import from here, never from each other."""

from __future__ import annotations

import sys
import time

import click

from imagekit.engine import ENGINES

MIRROR = click.option("--mirror", metavar="DIR|URL",
                      help="site mirror of upstream release files (overrides $IMAGEKIT_MIRROR and the stack's)")


ENGINE = click.option(
    "--engine", "engine_name", type=click.Choice(ENGINES), default="docker", show_default=True,
    envvar="IMAGEKIT_ENGINE",
    help="docker: the Docker engine's BuildKit; podman: Podman as the calling user (rootless), its own "
         "image store (default: $IMAGEKIT_ENGINE, else docker)")


def progress_printer():
    """Exported bytes on stderr: one updating line on a terminal, a line every 10 s otherwise."""
    tty = sys.stderr.isatty()
    state = {"last": time.monotonic()}

    def report(total: int, done: bool) -> None:
        mib = total / (1 << 20)
        if tty:
            click.echo(f"\rexported {mib:,.1f} MiB" + ("\n" if done else ""), err=True, nl=False)
        elif done or time.monotonic() - state["last"] >= 10:
            state["last"] = time.monotonic()
            click.echo(f"exported {mib:,.1f} MiB" + (" (done)" if done else ""), err=True)

    return report
