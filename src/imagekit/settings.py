"""What the ``imagekit`` group's own options (``--site``, ``--stacks-dir``) set for the whole process.

They live at the foundation, not in :mod:`imagekit.sources` and :mod:`imagekit.stack` that read them,
so that the command line's group can set them without loading YAML and HPCCM (``imagekit --help``
must stay fast), and with no import inside a function.
"""

from __future__ import annotations

from pathlib import Path

# The site pins file given on the command line (--site); it wins over $IMAGEKIT_SITE.
site_file: str | None = None
# Site stack directories given on the command line (--stacks-dir), searched first. One list, changed
# in place: imagekit.stack.extra_dirs is this same list.
stack_dirs: list[Path] = []
