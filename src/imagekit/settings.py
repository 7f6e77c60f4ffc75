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


def site_stack_dirs() -> list[Path]:
    """The site's stack directories, in search order: --stacks-dir, then $IMAGEKIT_STACKS_PATH.
    Stacks are looked up there before the shipped ones, and site components in their components/."""
    env = [Path(p) for p in os.environ.get(STACKS_PATH_ENV, "").split(os.pathsep) if p]
    return [*stack_dirs, *env]
