"""The site: where a site's pins, stacks and system models are, as one value (:class:`Site`).

The ``imagekit`` group builds it once from its options (``--site``, ``--stacks-dir``) and the
environment, and the requests carry it to the library (``PipelineRequest.site``,
``LaunchRequest.site``, ``GateOptions.site``); a Python caller builds its own, or gets
``Site.from_env()``. No module keeps it in a global, so two requests with different sites can run in
one process. It lives at the foundation, not in :mod:`imagekit.sources` and :mod:`imagekit.stack`
that read it, so that the command line's group can build it without loading YAML and HPCCM
(``imagekit --help`` must stay fast).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

# The site pins file (sha256 pins for the mirror's files that are not upstream's); --site wins over it.
SITE_ENV = "IMAGEKIT_SITE"
# More site stack directories (os.pathsep-separated), searched after --stacks-dir.
STACKS_PATH_ENV = "IMAGEKIT_STACKS_PATH"
# Replaces the shipped stacks directory itself (a checkout's own stacks, tests).
STACKS_ENV = "IMAGEKIT_STACKS"
# More site system-model directories (os.pathsep-separated), searched after --systems-dir.
SYSTEMS_PATH_ENV = "IMAGEKIT_SYSTEMS_PATH"

# A stack directory's own pins file: the site's, when neither --site nor $IMAGEKIT_SITE names one (the
# place a site first puts it, beside its stacks; review 4 E11).
PINS_NAME = "pins.yaml"

# The shipped stacks (package data).
SHIPPED_STACKS_DIR = Path(__file__).resolve().parent.parent / "stacks"


def _path_list(value: str | None) -> tuple[Path, ...]:
    return tuple(Path(p) for p in (value or "").split(os.pathsep) if p)


@dataclass(frozen=True)
class Site:
    """A site's own files: its pins file, its stack directories (searched before the shipped stacks;
    site components in their ``components/``) and its system-model directories (searched before the
    shipped catalogue). Paths as given, not checked here: the readers say what is missing."""

    pins_file: Path | None = None
    stack_dirs: tuple[Path, ...] = ()
    system_dirs: tuple[Path, ...] = ()
    shipped_stacks: Path = SHIPPED_STACKS_DIR

    def __post_init__(self) -> None:
        # Accept str or Path and lists from Python callers; keep the value hashable and frozen.
        object.__setattr__(self, "pins_file", Path(self.pins_file) if self.pins_file else None)
        object.__setattr__(self, "stack_dirs", tuple(Path(d) for d in self.stack_dirs))
        object.__setattr__(self, "system_dirs", tuple(Path(d) for d in self.system_dirs))
        object.__setattr__(self, "shipped_stacks", Path(self.shipped_stacks))

    @classmethod
    def from_env(cls, *, pins_file: "str | Path | None" = None, stack_dirs: "Iterable[str | Path]" = (),
                 system_dirs: "Iterable[str | Path]" = (), environ: "dict[str, str] | None" = None) -> "Site":
        """The site the environment names, with the command line's values first: ``pins_file`` (--site)
        wins over $IMAGEKIT_SITE, and either over the first stack directory's ``pins.yaml``; ``stack_dirs`` (--stacks-dir) come before $IMAGEKIT_STACKS_PATH and
        ``system_dirs`` (--systems-dir) before $IMAGEKIT_SYSTEMS_PATH; $IMAGEKIT_STACKS replaces the
        shipped stacks directory. ``environ``: default ``os.environ``."""
        env = os.environ if environ is None else environ
        stack_dirs = (*stack_dirs, *_path_list(env.get(STACKS_PATH_ENV)))
        beside = next((Path(d) / PINS_NAME for d in stack_dirs if (Path(d) / PINS_NAME).is_file()), None)
        return cls(pins_file=pins_file or env.get(SITE_ENV) or beside,
                   stack_dirs=stack_dirs,
                   system_dirs=(*system_dirs, *_path_list(env.get(SYSTEMS_PATH_ENV))),
                   shipped_stacks=env.get(STACKS_ENV) or SHIPPED_STACKS_DIR)

    def with_system_dirs(self, dirs: "Iterable[str | Path]") -> "Site":
        """This site with ``dirs`` (a command's --systems-dir) searched before its own system directories."""
        dirs = tuple(dirs)
        return replace(self, system_dirs=(*dirs, *self.system_dirs)) if dirs else self

    def stack_search_path(self) -> list[Path]:
        """Where stacks are found, in order: the site's stack directories, then the shipped stacks."""
        return [*self.stack_dirs, self.shipped_stacks]


def site_or_env(site: "Site | None") -> Site:
    """``site``, else the environment's (a Python caller that names none gets what the CLI would)."""
    return site if site is not None else Site.from_env()
