"""Where the site's components are, by name, found without running any of them (security-4 H10).

A site component is code: its module runs as whoever runs imagekit, root in a CI job included. So
it runs only when a stack being loaded names it (or when every component is asked for), never for
``imagekit stacks`` or ``imagekit show`` of a stack that names none. For that each one is found by
its name alone, before a line of it runs:

- ``components/NAME.py`` in a stack directory on the search path (``--stacks-dir``,
  ``$IMAGEKIT_STACKS_PATH``), ``-`` in the name written ``_`` (``lustre_client.py`` for ``lustre-client``);
- an entry point called NAME in the ``imagekit.components`` group of an installed distribution.

This module reads directory listings and distribution metadata only; :mod:`imagekit.components`
checks who can write a module and imports it. It sits below ``_base`` so that a component's pin
lookup (``_base``) can name the site's components without importing them.
"""

from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from imagekit.util.settings import Site, site_or_env

ENTRY_POINTS = "imagekit.components"     # the entry point group site packages name their modules under
SITE_DIR = "components"                  # beside a site's stacks: DIR/components/NAME.py


@dataclass(frozen=True)
class Found:
    """One site component's module, not yet imported: a file, or an entry point."""

    name: str
    path: Path | None = None
    entry_point: importlib.metadata.EntryPoint | None = None

    def __str__(self) -> str:
        return str(self.path) if self.path is not None else f"entry point {self.entry_point.value}"  # type: ignore[union-attr]


def dirs(site: Site | None = None) -> list[Path]:
    """components/ in each of the site's stack directories that has one (default: the environment's site)."""
    return [d / SITE_DIR for d in site_or_env(site).stack_dirs if (d / SITE_DIR).is_dir()]


def name_of(path: Path) -> str:
    """The component a module file is for: its stem, ``_`` read as ``-``."""
    return path.stem.replace("_", "-")


def found(site: Site | None = None) -> dict[str, list[Found]]:
    """Each site component name, with every module that offers it (more than one is the site's
    error, said when a stack names it): the directories in search-path order, then entry points."""
    out: dict[str, list[Found]] = {}
    for directory in dirs(site):
        for path in sorted(directory.glob("*.py")):
            if not path.name.startswith("_"):       # as the shipped package's _base.py: not a component
                out.setdefault(name_of(path), []).append(Found(name_of(path), path=path))
    for ep in _entry_points():
        out.setdefault(ep.name, []).append(Found(ep.name, entry_point=ep))
    return out


@functools.lru_cache(maxsize=1)
def _entry_points() -> tuple[importlib.metadata.EntryPoint, ...]:
    """The group's entry points, by name (read once: installed distributions do not change under a process)."""
    return tuple(sorted(importlib.metadata.entry_points(group=ENTRY_POINTS), key=lambda e: e.name))
