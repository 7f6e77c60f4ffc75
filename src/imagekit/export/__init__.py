"""The export stage: Docker image → Enroot squashfs, SIF, or a registry.

``export_image`` is the one entry point the CLI and ``imagekit build --export``
use. Each format lives in its own module; :mod:`imagekit.export.output` makes
every output atomic and checks free space before starting.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from imagekit.errors import UsageError
from imagekit.export.output import ExportResult

FORMATS = ("enroot", "sif")
SUFFIX = {"enroot": ".sqsh", "sif": ".sif"}


def default_output(image: str, to: str) -> Path:
    """Enroot's naming: ``repo/name:tag`` → ``repo+name+tag.sqsh`` in the current directory."""
    stem = image.replace("/", "+").replace(":", "+")
    return Path.cwd() / f"{stem}{SUFFIX[to]}"


def export_image(image: str, to: str, output: str | Path | None = None, *,
                 preset: str | None = None,
                 squash_opts: tuple[str, ...] | list[str] = (),
                 tool: str = "auto",
                 via: str = "native",
                 force: bool = False,
                 check_space: bool = True,
                 progress: Callable[[int, bool], None] | None = None) -> ExportResult:
    """Export local image ``image`` as ``to`` ("enroot" or "sif") to ``output``.

    ``preset``: enroot → enroot|shared-fs|none (default enroot);
    sif → gzip|zstd (default gzip). ``squash_opts`` are appended to the squashfs
    tool's options. ``via="apptainer"`` (SIF only) uses apptainer/singularity
    from PATH. ``progress(bytes_so_far, finished)`` is called while streaming.
    Returns path, size, sha256 and duration; nothing is left at ``output``
    unless the export completed.
    """
    if to not in FORMATS:
        raise UsageError(f"unknown export format {to!r}", f"use one of: {', '.join(FORMATS)}")
    target = Path(output) if output is not None else default_output(image, to)
    started = time.monotonic()
    if to == "enroot":
        from imagekit.export import enroot

        if via != "native":
            raise UsageError("--via applies to --to sif only")
        result = enroot.export(image, target, preset=preset or "enroot",
                                      squash_opts=tuple(squash_opts), tool=tool, force=force,
                                      check_space=check_space, progress=progress)
    else:
        from imagekit.export import sif

        result = sif.export(image, target, compression=preset or "gzip",
                                   squash_opts=tuple(squash_opts), tool=tool, via=via,
                                   force=force, check_space=check_space, progress=progress)
    result.seconds = round(time.monotonic() - started, 3)
    _record(image, result)
    return result


def _record(image: str, result: ExportResult) -> None:
    """Remember the export for `imagekit report` (keyed by image ID, so retags keep it)."""
    from imagekit import engine, records

    records.add(engine.inspect(image).id, "export", image=image, format=result.format,
                path=str(Path(result.path).resolve()), bytes=result.bytes, sha256=result.sha256)


__all__ = ["ExportResult", "export_image", "default_output", "FORMATS"]
