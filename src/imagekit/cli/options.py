"""Options that several commands share, written once (pip's ``cmdoptions``): the mirror, the engine,
the site the group built and the export progress line; the gates are in :mod:`gate_options` (they load
the validator, which `imagekit render` must not). Command modules import from here, never from each other."""

from __future__ import annotations

import sys
import time

import click

from imagekit.engines import ENGINES
from imagekit.util.settings import Site
from imagekit.util import terminal
from imagekit.util.sizes import human

MIRROR = click.option("--mirror", metavar="DIR|URL",
                      help="site mirror of upstream release files (overrides $IMAGEKIT_MIRROR and the stack's)")


ENGINE = click.option(
    "--engine", "engine_name", type=click.Choice(ENGINES), default="docker", show_default=True,
    envvar="IMAGEKIT_ENGINE",
    help="docker: the Docker engine's BuildKit; podman: Podman as the calling user (rootless), its own "
         "image store (default: $IMAGEKIT_ENGINE, else docker)")


def current_site() -> Site:
    """The site the ``imagekit`` group built from --site, --stacks-dir and the environment (its
    context's object); the environment's alone for a command run without the group."""
    ctx = click.get_current_context(silent=True)
    built = ctx.find_root().obj if ctx is not None else None
    return built if isinstance(built, Site) else Site.from_env()


def progress_printer() -> "ProgressLine":
    """Exported bytes on stderr: one updating line on a terminal, a line every 10 s otherwise; each
    with the rate and, where the source knows the image's size, the total and the time left."""
    return ProgressLine(sys.stderr.isatty())


class ProgressLine:
    """The callback an export reports to, ``(bytes_so_far, finished)``. One may serve several exports
    in turn (a push with artifacts): each export's :meth:`begin` starts its clock and its total."""

    def __init__(self, tty: bool, interval: float = 10.0) -> None:
        self.tty, self.interval = tty, interval
        self.expected: int | None = None
        self.started = self.last = time.monotonic()

    def begin(self, expected: int | None) -> None:
        self.expected = expected
        self.started = self.last = time.monotonic()

    def __call__(self, total: int, done: bool) -> None:
        now = time.monotonic()
        if not (self.tty or done or now - self.last >= self.interval):
            return
        self.last = now
        line = self.text(total, done, now - self.started)
        if self.tty:
            # \x1b[K clears what a longer earlier line left at the end; color=True keeps click from
            # stripping it (it strips escapes unless it sees the terminal itself).
            click.echo(f"\r\x1b[K{line}" + ("\n" if done else ""), file=terminal.unescaped(sys.stderr), nl=False,
                       color=True)
        else:
            click.echo(line, err=True)

    def text(self, total: int, done: bool, elapsed: float) -> str:
        rate = total / elapsed if elapsed > 0 else 0.0
        if done:
            return f"exported {human(total)} in {elapsed:.0f} s ({human(rate)}/s)"
        line = f"exported {human(total)}"
        if self.expected:
            # An estimate (the image's unpacked size, not the stream's): never 100 % before the end.
            line += f" of ~{human(self.expected)} ({min(total / self.expected, 0.99):.0%})"
        line += f", {human(rate)}/s"
        if self.expected and rate > 0 and total < self.expected:
            left = (self.expected - total) / rate
            line += f", about {left:.0f} s left" if left < 120 else f", about {left / 60:.0f} min left"
        return line
