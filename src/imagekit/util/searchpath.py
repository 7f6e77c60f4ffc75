"""Finding YAML files by name on a search path: site directories first, then the shipped ones.

Stacks (:mod:`imagekit.stack`) and system models (:mod:`imagekit.validate.system`) are both
found this way, with the same rules: ``NAME.yaml`` or ``NAME.yml``, and a name in an earlier
directory hides the same name further on.
"""

from __future__ import annotations

from pathlib import Path

SUFFIXES = (".yaml", ".yml")


def files(directories: list[Path]) -> dict[str, tuple[Path, Path]]:
    """name -> (file, the directory it came from), sorted by name; within one directory a
    ``.yaml`` hides a ``.yml`` of the same name."""
    seen: dict[str, tuple[Path, Path]] = {}
    for directory in directories:
        for suffix in SUFFIXES:
            for path in sorted(directory.glob(f"*{suffix}")):
                seen.setdefault(path.stem, (path, directory))
    return dict(sorted(seen.items()))
