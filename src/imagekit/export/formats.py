"""The export formats: name, file suffix and file mode, written here once.

The export stage, the store, the registry artifacts and ``imagekit build --export`` all read this
table, so an unknown format is refused the same way everywhere, and before any work starts. It
imports nothing but the errors: the store's lookup and the Pyxis importer stay light.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagekit.errors import UsageError


@dataclass(frozen=True)
class Format:
    name: str
    suffix: str      # of an exported file, with its dot
    mode: int        # of an exported file, before the umask: a SIF runs as a program, as apptainer makes it
    # A SIF carries its signature objects inside (`apptainer verify` reads them); any other file's
    # signature is a bundle beside it.
    signed_inside: bool = False


FORMATS: dict[str, Format] = {
    "enroot": Format("enroot", ".sqsh", 0o644),
    "sif": Format("sif", ".sif", 0o755, signed_inside=True),
}
SUFFIX: dict[str, str] = {f.name: f.suffix for f in FORMATS.values()}


def get(name: str) -> Format:
    """The format ``name``; a UsageError naming the valid ones otherwise."""
    if name not in FORMATS:
        raise UsageError(f"unknown export format {name!r}", f"use one of: {', '.join(FORMATS)}")
    return FORMATS[name]


def signed_inside(name: str) -> bool:
    """Whether an export of format ``name`` carries its signature inside the file (else: a bundle beside it)."""
    return get(name).signed_inside
