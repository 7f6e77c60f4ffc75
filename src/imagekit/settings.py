"""What the ``imagekit`` group's own options (``--site``, ``--stacks-dir``) set for the whole process.

They live at the foundation, not in :mod:`imagekit.sources` and :mod:`imagekit.stack` that read them,
so that the command line's group can set them without loading YAML and HPCCM (``imagekit --help``
must stay fast), and with no import inside a function.
"""

from __future__ import annotations

import os
from pathlib import Path

# The site pins file given on the command line (--site); it wins over $IMAGEKIT_SITE.
site_file: str | None = None
# Site stack directories given on the command line (--stacks-dir), searched first. One list, changed
# in place: imagekit.stack.extra_dirs is this same list.
stack_dirs: list[Path] = []
# $IMAGEKIT_STACKS_PATH: more site stack directories (os.pathsep-separated), after --stacks-dir.
STACKS_PATH_ENV = "IMAGEKIT_STACKS_PATH"


def use_stack_dirs(dirs: "list[str | Path] | tuple[str | Path, ...]") -> None:
    """--stacks-dir: the site stack directories searched first, for the rest of the process. The list
    is changed in place, as imagekit.stack holds the same list."""
    stack_dirs[:] = [Path(d) for d in dirs]


# The shipped stacks (package data); $IMAGEKIT_STACKS replaces the directory itself.
SHIPPED_STACKS_DIR = Path(__file__).resolve().parent / "stacks"


def stack_search_path() -> list[Path]:
    """Where stacks are found, in order: --stacks-dir, $IMAGEKIT_STACKS_PATH (os.pathsep-separated),
    then the shipped stacks ($IMAGEKIT_STACKS replaces the shipped directory itself)."""
    replaced = os.environ.get("IMAGEKIT_STACKS")
    return [*site_stack_dirs(), Path(replaced) if replaced else SHIPPED_STACKS_DIR]


def site_stack_dirs() -> list[Path]:
    """The site's stack directories, in search order: --stacks-dir, then $IMAGEKIT_STACKS_PATH.
    Stacks are looked up there before the shipped ones, and site components in their components/."""
    env = [Path(p) for p in os.environ.get(STACKS_PATH_ENV, "").split(os.pathsep) if p]
    return [*stack_dirs, *env]
