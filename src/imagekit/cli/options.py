"""Options that several commands share, written once (pip's ``cmdoptions``): the mirror, the engine,
the site the group built and the export progress line; the gates are in :mod:`gate_options` (they load
the validator, which `imagekit render` must not). Command modules import from here, never from each other."""

from __future__ import annotations

import sys
import threading
import time

import click

from imagekit.engines import ENGINES
from imagekit.util.eta import Eta
from imagekit.util.settings import Site
from imagekit.util import terminal
from imagekit.util.ticker import Ticker
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
    """Exported bytes on stderr: one updating line on a terminal, a line every 5 s otherwise; each with
    the rate and, where the source knows the image's size, the total and the time left."""
    return ProgressLine(sys.stderr.isatty())


class ProgressLine:
    """The callback an export reports to, ``(bytes_so_far, finished)``. One may serve several exports
    in turn (a push with artifacts): each export's :meth:`begin` starts its clock and its total.

    It says what the export does at least every ``interval`` seconds (1 on a terminal, 5 in a log), bytes
    or not: a thread speaks for a step that has gone quiet (the engine starting the container, the
    squashfs tool writing its tables after the last byte). The time left is :class:`imagekit.util.eta.Eta`'s:
    from the bytes still to process at the recent rate, or none at all."""

    def __init__(self, tty: bool, interval: float | None = None, heartbeat: bool = True) -> None:
        self.tty, self.beats = tty, heartbeat
        self.interval = interval if interval is not None else (1.0 if tty else 5.0)
        self.expected: int | None = None
        self.started = self.last = time.monotonic()
        self.total, self.ended_at = 0, None
        self.eta = Eta(None)
        self.lock = threading.Lock()
        self.ticker: Ticker | None = None

    def begin(self, expected: int | None) -> None:
        with self.lock:
            self.expected, self.total, self.ended_at = expected, 0, None
            self.started = self.last = time.monotonic()
            self.eta = Eta(expected)
        self._heartbeat()

    def ended(self) -> None:
        """The stream is over; the tool is finishing (writing its tables, its last blocks)."""
        with self.lock:
            self.ended_at = time.monotonic()

    def __call__(self, total: int, done: bool) -> None:
        now = time.monotonic()
        with self.lock:
            self.total = total
            self.eta.add(now, total)
            if self.tty or done or now - self.last >= self.interval:
                self._print(now, done)
        if done:
            self.close()

    def close(self) -> None:
        """Stop speaking on its own: the export is over (export_image says so, failed or not)."""
        if self.ticker is not None:
            self.ticker.stop()
            self.ticker = None

    def _heartbeat(self) -> None:
        if self.ticker is None and self.beats:
            self.ticker = Ticker(self._tick, min(self.interval, 1.0), name="imagekit-progress").start()

    def _tick(self, now: float) -> None:
        with self.lock:
            if now - self.last >= self.interval:
                self._print(now, False)

    def _print(self, now: float, done: bool) -> None:
        self.last = now
        line = self.text(self.total, done, now - self.started, now)
        if self.tty:
            # \x1b[K clears what a longer earlier line left at the end; color=True keeps click from
            # stripping it (it strips escapes unless it sees the terminal itself).
            click.echo(f"\r\x1b[K{line}" + ("\n" if done else ""), file=terminal.unescaped(sys.stderr), nl=False,
                       color=True)
        else:
            click.echo(line, err=True)

    def text(self, total: int, done: bool, elapsed: float, now: float | None = None) -> str:
        if done:
            rate = total / elapsed if elapsed > 0 else 0.0
            return f"exported {human(total)} in {elapsed:.0f} s ({human(rate)}/s)"
        now = self.started + elapsed if now is None else now
        if self.ended_at is not None:
            return f"exported {human(total)}; the squashfs tool is finishing ({now - self.ended_at:.0f} s)"
        if total == 0:
            return f"exporting: waiting for the image's first bytes ({elapsed:.0f} s)"
        line = f"exported {human(total)}"
        if self.expected:
            # An estimate (the image's unpacked size, not the stream's): never 100 % before the end.
            line += f" of ~{human(self.expected)} ({min(total / self.expected, 0.99):.0%})"
        rate = self.eta.rate()
        if rate:
            line += f", {human(rate)}/s"
        left = self.eta.left(now)
        if left is not None:
            line += f", about {left:.0f} s left" if left < 120 else f", about {left / 60:.0f} min left"
        return line
