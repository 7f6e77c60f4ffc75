"""One export as asked: :class:`ExportRequest` (checked when made) and :func:`export_image`, the one
entry point the CLI and ``imagekit build --export`` use, through the export store or straight to
the output. The package (``imagekit.export``) names these without loading this module, so that a
store hit's and the Pyxis importer's imports stay small."""

from __future__ import annotations

import os
import time
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Union

from imagekit.util import digests, ledger
from imagekit.util.errors import UsageError
from imagekit.export import formats, presets
from imagekit.export.image_source import Source, open_source
from imagekit.export.output import ExportResult, prepare_target
from imagekit.export.store import Store, link_or_copy, sealed

# Where an export's file is kept: a Store, a store directory, None for the default store
# ($IMAGEKIT_STORE, else the user's cache), or False to convert straight to the output.
StoreChoice = Union[Store, str, Path, None, Literal[False]]


def default_output(image: str, to: str) -> Path:
    """Enroot's naming: ``repo/name:tag`` → ``repo+name+tag.sqsh`` in the current directory
    (``docker://registry/repo/name:tag`` too: the registry is left out, as Enroot does)."""
    return Path.cwd() / f"{open_source(image).stem}{formats.get(to).suffix}"


@dataclass(frozen=True)
class ExportRequest:
    """One export as ``imagekit export``'s options (or ``build --export``) ask for it, checked when made.

    ``preset``: one of the format's presets (formats.FORMATS: presets.PRESETS for enroot, default
    ``fast``; gzip|zstd|fast for sif, default gzip); None becomes the format's default here, so the
    store's key and the converters see one name.
    ``squash_opts`` are appended to the squashfs tool's options. ``via="apptainer"`` (SIF only) runs
    apptainer/singularity from PATH. ``platform`` (``OS/ARCH``) picks one image of a multi-platform
    index. An unknown format, preset, tool or via fails here, before any image is read or built.
    """

    format: str
    preset: str | None = None
    squash_opts: tuple[str, ...] = ()
    tool: str = "auto"
    via: str = "native"
    force: bool = False             # replace an existing output
    check_space: bool = True
    platform: str | None = None

    def __post_init__(self) -> None:
        row = formats.get(self.format)
        if self.via not in formats.vias():
            raise UsageError(f"unknown --via {self.via!r}", f"use one of: {', '.join(formats.vias())}")
        if self.via not in row.vias:
            takes = " or ".join(name for name, r in formats.FORMATS.items() if self.via in r.vias)
            raise UsageError(f"--via {self.via} applies to --to {takes} only")
        if self.tool not in ("auto", *presets.TOOLS):
            raise UsageError(f"unknown squashfs tool {self.tool!r}", f"use one of: auto, {', '.join(presets.TOOLS)}")
        preset = self.preset or row.default_preset
        row.check_preset(preset)
        object.__setattr__(self, "preset", preset)
        object.__setattr__(self, "squash_opts", tuple(self.squash_opts))

    def store_options(self) -> tuple[str, ...]:
        """The export options that change the file's bytes, as the store's key carries them."""
        return store_options(self.squash_opts, self.tool, self.via)


def export_image(image: str, request: ExportRequest, output: str | Path | None = None, *,
                 store: StoreChoice = None,
                 progress: Callable[[int, bool], None] | None = None,
                 notice: Callable[[str], None] | None = None,
                 for_signing: bool = False) -> ExportResult:
    """Export ``image`` as ``request`` says to ``output`` (default: Enroot's name for it, here).

    By default the file is made in the export store (``store``: a Store, a directory,
    or None for ``$IMAGEKIT_STORE``/the user's cache) and ``output`` is a hard link to
    the entry (a copy on another file system); an unchanged image is then a lookup
    with no conversion (``result.store_hit``). ``store=False`` writes ``output``
    directly. ``progress(bytes_so_far, finished)`` is called while streaming;
    ``notice(message)`` hears about waiting for another process's conversion.
    ``for_signing``: the file is about to be signed, so its ``sha256`` must be of bytes this process
    made, or a store entry's that only root or this user could have written, hashed in full now
    (:func:`_signable`); any other entry is left as it is and the image converted afresh.
    ``image`` is a local engine image or any form :func:`image_source.open_source` reads
    (``docker://…``, ``REGISTRY#REPO:TAG``, ``oci:DIR``, ``oci-archive:FILE``, ``docker-archive:FILE``).
    Returns path, size, sha256 and duration; nothing is left at ``output`` unless the export completed.
    """
    source = open_source(image, platform=request.platform)
    target = Path(output) if output is not None else Path.cwd() / f"{source.stem}{formats.get(request.format).suffix}"
    started = time.monotonic()
    try:
        if store is False:
            result = _convert(source, request, target, force=request.force, progress=progress)
            result.seconds = round(time.monotonic() - started, 3)
            _record(source.image_id(), image, result)
            return result
        result = _export_via_store(source, request, target, started, progress=progress, store=store, notice=notice)
        if for_signing and result.store_hit:
            why = _signable(result)
            if why is not None:
                if notice:
                    notice(f"not signing the export store's file {result.store_entry}: {why}; converting {image} afresh")
                result = _convert(source, request, target, force=True, progress=progress)
                result.seconds = round(time.monotonic() - started, 3)
                _record(source.image_id(), image, result)
        return result
    finally:
        # A progress line that speaks on its own (the CLI's) goes quiet with the export, failed or not.
        getattr(progress, "close", lambda: None)()


def _signable(result: ExportResult) -> str | None:
    """Why a store hit's file must not be signed (None: it may): a signature covers bytes this process
    made, or bytes that only root or this user could have written (and recorded) and that it hashed in
    full just now. A publisher who cannot sign may have replaced an entry and its record (H2 of
    ../shared/reviews/security-4.md); the output is a hard link to that entry, or a copy of it."""
    problem = sealed.problem(Path(result.store_entry))
    if problem is not None:
        return problem
    try:
        got = digests.sha256_file(result.path, nofollow=True)
    except OSError as exc:
        return f"{result.path}: {exc.strerror}"
    if got != result.sha256:
        return f"{result.path} has sha256:{got}, not the sha256:{result.sha256} its entry records"
    return None


def _convert(image: Source, request: ExportRequest, target: Path, *, force: bool, progress) -> ExportResult:
    if force != request.force:
        request = dataclasses.replace(request, force=force)
    return formats.get(request.format).convert(image, target, request, progress=progress)


def store_options(squash_opts: tuple[str, ...], tool: str, via: str) -> tuple[str, ...]:
    """The export options that change the file's bytes, as the store's key carries them."""
    options = [f"squash-opt={o}" for o in squash_opts]
    if tool != "auto":
        options.append(f"tool={tool}")
    if via != "native":
        options.append(f"via={via}")
    if os.environ.get("SOURCE_DATE_EPOCH"):     # parsed (and checked) only when set
        epoch = presets.source_date_epoch()
        options.append(f"epoch={epoch}")
    return tuple(options)


def _export_via_store(source: Source, request: ExportRequest, target: Path, started: float, *,
                      progress, store, notice) -> ExportResult:
    """The store path: a lookup first (fast: no docker package, no hashing), a conversion if none."""
    target = target.expanduser().absolute()
    prepare_target(target, force=True)          # the directory checks; existence is handled below
    image, image_id, force = source.text, source.image_id(), request.force
    st = store if isinstance(store, Store) else Store.open(store)
    key = st.key(image_id, request.format, request.preset, request.store_options())
    make = _maker(source, request, progress)
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
    result = ExportResult(path=str(target), format=request.format, image=image, bytes=entry.bytes,
                          sha256=entry.sha256, seconds=round(time.monotonic() - started, 3),
                          tool=entry.tool, compression=request.preset, store_hit=hit,
                          store_entry=str(entry.path), output_is=how)
    _record(image_id, image, result)
    return result


def _maker(source: Source, request: ExportRequest, progress):
    """The store's ``make``: convert ``image`` into the path it gives."""
    def make(path: Path) -> ExportResult:
        return _convert(source, request, path, force=True, progress=progress)

    return make


def _record(image_id: str, image: str, result: ExportResult) -> None:
    """Remember the export for `imagekit report` (keyed by image ID, so retags keep it)."""
    ledger.add(image_id, "export", image=image, format=result.format,
                path=str(Path(result.path).resolve()), bytes=result.bytes, sha256=result.sha256,
                store_hit=result.store_hit)

