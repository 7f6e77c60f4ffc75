"""The export stage: an image → Enroot squashfs, SIF, or a registry.

``export_image`` is the one entry point the CLI and ``imagekit build --export``
use. The image comes from the local Docker engine, a registry, an OCI layout or a
``docker save`` tarball (:mod:`imagekit.export.image_source`). Each format lives in its own module; :mod:`imagekit.export.output` makes
every output atomic and checks free space before starting; :mod:`imagekit.export.store`
keeps each converted file once, keyed by image ID, format, preset and options.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from imagekit.errors import UsageError
from imagekit.export import formats, squash
from imagekit.export.output import ExportResult

if TYPE_CHECKING:
    from imagekit.export.image_source import Source
    from imagekit.export.store import Store

FORMATS = tuple(formats.FORMATS)
SUFFIX = formats.SUFFIX


def default_output(image: str, to: str) -> Path:
    """Enroot's naming: ``repo/name:tag`` → ``repo+name+tag.sqsh`` in the current directory
    (``docker://registry/repo/name:tag`` too: the registry is left out, as Enroot does)."""
    from imagekit.export.image_source import open_source

    return Path.cwd() / f"{open_source(image).stem}{SUFFIX[to]}"


# The preset an export gets when none is named (the store keys entries by it); the enroot
# default follows from bench/compression.py (README "Compression presets").
DEFAULT_PRESET = {"enroot": squash.DEFAULT_PRESET, "sif": "gzip"}


def export_image(image: str, to: str, output: str | Path | None = None, *,
                 preset: str | None = None,
                 squash_opts: tuple[str, ...] | list[str] = (),
                 tool: str = "auto",
                 via: str = "native",
                 force: bool = False,
                 check_space: bool = True,
                 progress: Callable[[int, bool], None] | None = None,
                 store: "Store | str | Path | None" = None,
                 use_store: bool = True,
                 notice: Callable[[str], None] | None = None,
                 platform: str | None = None) -> ExportResult:
    """Export ``image`` as ``to`` ("enroot" or "sif") to ``output``.

    ``preset``: a name in squash.PRESETS for enroot (default ``fast``), gzip|zstd for
    sif (default gzip). ``squash_opts`` are appended to the squashfs
    tool's options. ``via="apptainer"`` (SIF only) uses apptainer/singularity
    from PATH. ``progress(bytes_so_far, finished)`` is called while streaming.

    By default the file is made in the export store (``store``: a Store, a directory,
    or None for ``$IMAGEKIT_STORE``/the user's cache) and ``output`` is a hard link to
    the entry (a copy on another file system); an unchanged image is then a lookup
    with no conversion (``result.store_hit``). ``use_store=False`` writes ``output``
    directly. ``notice(message)`` hears about waiting for another process's conversion.
    ``image`` is a local engine image or any form :func:`image_source.open_source` reads
    (``docker://…``, ``REGISTRY#REPO:TAG``, ``oci:DIR``, ``oci-archive:FILE``, ``docker-archive:FILE``);
    ``platform`` (``OS/ARCH``) picks one image of a multi-platform index. Returns path, size, sha256 and duration; nothing is left at ``output``
    unless the export completed.
    """
    formats.get(to)
    if to == "enroot" and via != "native":
        raise UsageError("--via applies to --to sif only")
    from imagekit.export.image_source import open_source

    source = open_source(image, platform=platform)
    target = Path(output) if output is not None else Path.cwd() / f"{source.stem}{SUFFIX[to]}"
    started = time.monotonic()
    if not use_store:
        result = _convert(source, to, target, preset=preset, squash_opts=squash_opts, tool=tool,
                          via=via, force=force, check_space=check_space, progress=progress)
        result.seconds = round(time.monotonic() - started, 3)
        _record(source.image_id(), image, result)
        return result
    return _export_via_store(source, to, target, started, preset=preset or DEFAULT_PRESET[to],
                             squash_opts=tuple(squash_opts), tool=tool, via=via, force=force,
                             check_space=check_space, progress=progress, store=store, notice=notice)


def _convert(image: "Source", to: str, target: Path, *, preset, squash_opts, tool, via, force,
             check_space, progress) -> ExportResult:
    if to == "enroot":
        from imagekit.export import enroot

        return enroot.export(image, target, preset=preset or DEFAULT_PRESET[to],
                             squash_opts=tuple(squash_opts), tool=tool, force=force,
                             check_space=check_space, progress=progress)
    from imagekit.export import sif

    return sif.export(image, target, compression=preset or DEFAULT_PRESET[to],
                      squash_opts=tuple(squash_opts), tool=tool, via=via,
                      force=force, check_space=check_space, progress=progress)


def store_options(squash_opts: tuple[str, ...], tool: str, via: str) -> tuple[str, ...]:
    """The export options that change the file's bytes, as the store's key carries them."""
    import os

    options = [f"squash-opt={o}" for o in squash_opts]
    if tool != "auto":
        options.append(f"tool={tool}")
    if via != "native":
        options.append(f"via={via}")
    if os.environ.get("SOURCE_DATE_EPOCH"):     # parsed (and checked) only when set: the hit path stays light
        from imagekit.export import squash

        epoch = squash.source_date_epoch()
        options.append(f"epoch={epoch}")
    return tuple(options)


def _export_via_store(source: "Source", to: str, target: Path, started: float, *, preset: str,
                      squash_opts: tuple[str, ...], tool: str, via: str, force: bool,
                      check_space: bool, progress, store, notice) -> ExportResult:
    """The store path: a lookup first (fast: no docker package, no hashing), a conversion if none."""
    from imagekit.export import output as out
    from imagekit.export.store import Store, link_or_copy

    target = target.expanduser().absolute()
    out.prepare_target(target, force=True)          # the directory checks; existence is handled below
    image, image_id = source.text, source.image_id()
    st = store if isinstance(store, Store) else Store.open(store)
    key = st.key(image_id, to, preset, store_options(squash_opts, tool, via))
    make = _maker(source, to, preset, squash_opts, tool, via, check_space, progress)
    entry = st.lookup(key)
    hit = entry is not None
    if not hit:
        if target.exists() and not force:          # refuse before converting, not after
            raise UsageError(f"{target} already exists", "remove it or pass --force to replace it")
        entry, created = st.get_or_create(key, make, progress=notice)
        hit = not created
    try:
        how = link_or_copy(entry, target, force=force)
    except FileNotFoundError:          # a gc evicted it between the lookup and the link
        entry, created = st.get_or_create(key, make, progress=notice)
        hit = hit and not created
        how = link_or_copy(entry, target, force=force)
    result = ExportResult(path=str(target), format=to, image=image, bytes=entry.bytes,
                          sha256=entry.sha256, seconds=round(time.monotonic() - started, 3),
                          tool=entry.tool, compression=preset, store_hit=hit,
                          store_entry=str(entry.path), output_is=how)
    _record(image_id, image, result)
    return result


def _maker(source: "Source", to, preset, squash_opts, tool, via, check_space, progress):
    """The store's ``make``: convert ``image`` into the path it gives."""
    def make(path: Path) -> ExportResult:
        return _convert(source, to, path, preset=preset, squash_opts=squash_opts, tool=tool,
                        via=via, force=True, check_space=check_space, progress=progress)

    return make


def _record(image_id: str, image: str, result: ExportResult) -> None:
    """Remember the export for `imagekit report` (keyed by image ID, so retags keep it)."""
    from imagekit import records

    records.add(image_id, "export", image=image, format=result.format,
                path=str(Path(result.path).resolve()), bytes=result.bytes, sha256=result.sha256,
                store_hit=result.store_hit)


__all__ = ["ExportResult", "export_image", "default_output", "FORMATS", "DEFAULT_PRESET"]
