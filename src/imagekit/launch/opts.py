"""The options of an ``imagekit launch`` target, as data: the CLI makes its click options from these rows.

A scheduler, a rank starter and the workload each declare the options they read (:class:`Opt`), so a
new target brings its options with it and the CLI stays a loop over rows. Nothing here imports click:
the library keeps one meaning per option, the CLI one way of parsing them.
"""

from __future__ import annotations

from dataclasses import dataclass

FILE, DIR = "file", "dir"


@dataclass(frozen=True)
class Opt:
    """One option: its flags (``"--nodes", "-N"``, or a ``"--on/--off"`` pair), the name its value is
    read under (``dest``), its type (``int``, ``float``, ``str``, ``bool`` for a flag or a pair, or a
    tuple of choices), ``path`` (:data:`FILE` or :data:`DIR`: a path the command writes), and click's
    usual ``default``, ``required``, ``multiple``, ``metavar``, ``help`` and ``show_default``."""

    decls: tuple[str, ...]
    dest: str
    type: type | tuple[str, ...] = str
    default: object = None
    help: str | None = None
    metavar: str | None = None
    required: bool = False
    multiple: bool = False
    show_default: bool = False
    path: str | None = None


def opt(*decls: str, dest: str | None = None, **kw) -> Opt:
    """An :class:`Opt`; ``dest`` defaults to the first long flag's name (``--job-name``: ``job_name``)."""
    if dest is None:
        long = next(d for d in decls if d.startswith("--"))
        dest = long.split("/")[0].removeprefix("--").replace("-", "_")
    return Opt(decls=decls, dest=dest, **kw)
