"""SIF (Singularity Image Format) written natively; read back for checks by :mod:`imagekit.sif_reader`.

Layout facts from apptainer/sif (pkg/sif, v2), all little-endian, no padding:

- header, 128 bytes: launch script [32] ("#!/usr/bin/env run-singularity\\n"),
  magic [10] "SIF_MAGIC", version [3] "01", primary arch [3] (e.g. "02"),
  ID (UUID) [16], then int64s: created, modified, descriptors free, descriptors
  total, descriptors offset, descriptors size, data offset, data size;
- descriptor table at 4096, 48 entries of 585 bytes: int32 data type, bool
  used, uint32 id, group id (0xf0000000 | group), linked id, int64 offset,
  size, size with padding, created, modified, uid, gid, name [128], extra [384];
- data starts after the table (4096 + 48*585); each object is aligned to the
  page size (4096); data size is the sum of the padded sizes;
- data types: 0x4001 definition file, 0x4002 env vars, 0x4003 JSON labels,
  0x4004 partition, 0x4005 signature, 0x4006 generic JSON, 0x4007 generic;
  a partition's extra is int32 fs type (1 squashfs), int32 partition type
  (2 primary system), arch [3].

Apptainer 1.4's docker→SIF build (internal/pkg/build/assemblers/sif.go) writes, in
this order: the definition file, its JSON objects as generic JSON sorted by name
(``inspect-metadata.json``: what ``apptainer inspect`` shows, see
:func:`imagekit.export.singularity_d.inspect_metadata`; ``oci-config.json``: the
image config), and the squashfs root filesystem as the primary system partition;
its mksquashfs default is gzip. The file is created with mode 0755 (less the
umask), so that ``./x.sif`` starts through the launch script's
``run-singularity`` (``apptainer run``). Here the squashfs tool writes straight
into the SIF file at the partition's offset (``-offset``), so the root
filesystem is never stored twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable

from imagekit.util import atomic, quoting
from imagekit.util.errors import ImagekitError, UsageError
from imagekit.export import singularity_d, squash, tarstream
from imagekit.export.image_source import Source, open_source
from imagekit.export.layers import steady_times
from imagekit.export.output import (ConvertRequest, Digest, ExportResult, Progress, check_free_space,
                                    expected_bytes, prepare_target, sha256_file)
from imagekit.util.signals import interrupt_on_sigterm
# The compressions (gzip-6, gzip, zstd, fast) are data in imagekit.export.presets and the file's mode is the
# format's own (imagekit.sif_reader), so that the format table names them without loading this writer.
from imagekit.export import presets
from imagekit.export.presets import SIF_COMPRESSIONS, SIF_COMPRESSIONS_HINT  # noqa: F401

# The format's layout and the reader live in imagekit.sif_reader, so that launch reads a SIF's labels
# without loading this writer; the reader's names are imagekit.export.sif's too (its callers check
# what they wrote with read_sif).
from imagekit.sif_reader import (ARCH_CODES, DATA_DEFFILE, DATA_GENERIC_JSON, DATA_PARTITION, DESCRIPTOR,  # noqa: F401
                                 DESCRIPTOR_CAPACITY, DESCRIPTORS_OFFSET, FILE_MODE, FS_SQUASHFS, HEADER,
                                 INSPECT_METADATA_NAME, LAUNCH, MAGIC, OCI_CONFIG_NAME, PART_PRIMSYS, PARTITION_EXTRA,
                                 VERSION, Descriptor,
                                 SifFormatError, aligned, check_squashfs, read_sif)

@dataclass
class _Object:
    datatype: int
    data: bytes | None     # None: the partition, written by the squashfs tool
    name: str = ""
    extra: bytes = b""


def _layout(objects: list[_Object], partition_size: int = 0) -> list[Descriptor]:
    """Offsets and padded sizes as apptainer/sif computes them; one call per size change."""
    end = DESCRIPTORS_OFFSET + DESCRIPTOR_CAPACITY * DESCRIPTOR.size
    out = []
    for i, obj in enumerate(objects):
        offset = aligned(end)
        n = len(obj.data) if obj.data is not None else partition_size
        out.append(Descriptor(datatype=obj.datatype, id=i + 1, offset=offset, size=n,
                              size_with_padding=offset - end + n, name=obj.name, extra=obj.extra))
        end = offset + n
    return out


def write_prefix(fh: BinaryIO, objects: list[_Object], descriptors: list[Descriptor], *,
                 arch: str, ident: uuid.UUID, when: int) -> None:
    """Header, descriptor table and the small objects (everything before the partition)."""
    data_offset = DESCRIPTORS_OFFSET + DESCRIPTOR_CAPACITY * DESCRIPTOR.size
    for d in descriptors:
        d.created = d.modified = when
    header = HEADER.pack(LAUNCH, MAGIC, VERSION, arch.encode(), ident.bytes, when, when,
                         DESCRIPTOR_CAPACITY - len(descriptors), DESCRIPTOR_CAPACITY,
                         DESCRIPTORS_OFFSET, DESCRIPTOR_CAPACITY * DESCRIPTOR.size,
                         data_offset, sum(d.size_with_padding for d in descriptors))
    fh.seek(0)
    fh.write(header)
    fh.seek(DESCRIPTORS_OFFSET)
    table = b"".join(d.pack() for d in descriptors)
    fh.write(table + bytes(DESCRIPTOR_CAPACITY * DESCRIPTOR.size - len(table)))
    for obj, d in zip(objects, descriptors):
        if obj.data is not None:
            fh.seek(d.offset)
            fh.write(obj.data)


def definition_file(image: str) -> bytes:
    """What Apptainer records for a build from a URI: bootstrap agent and source."""
    return quoting.encode(singularity_d.definition(image))


def file_mode() -> int:
    """0755 less the process's umask: the mode apptainer/sif's create gives a new SIF file."""
    try:
        with open("/proc/self/status") as fh:
            umask = next(int(line.split()[1], 8) for line in fh if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):  # kernels before 4.7 do not show it
        umask = os.umask(0o022)
        os.umask(umask)
    return FILE_MODE & ~umask


def oci_config_json(config: dict[str, Any]) -> bytes:
    """The image config as Apptainer stores it (compact JSON, empty fields left out)."""
    return json.dumps({k: v for k, v in config.items() if v not in (None, "", [], {}, False)},
                      separators=(",", ":"), sort_keys=True).encode()


def arch_code(goarch: str) -> str:
    code = ARCH_CODES.get(goarch)
    if code is None:
        raise UsageError(f"image architecture {goarch!r} has no SIF code",
                         f"SIF knows: {', '.join(sorted(ARCH_CODES))}")
    return code


def convert(source: str | Source, target: Path, request: ConvertRequest, *,
            progress: Callable[[int, bool], None] | None = None) -> ExportResult:
    """The sif format's converter (formats.FORMATS): ``source`` (a local engine image or a
    :class:`~imagekit.export.image_source.Source`) as a SIF file at ``target`` (atomically), compressed
    as ``request.preset`` names (one of :data:`SIF_COMPRESSIONS`); ``request.via="apptainer"`` runs
    apptainer/singularity from PATH."""
    source = source if isinstance(source, Source) else open_source(source)
    image = source.text
    compression, via = request.preset, request.via

    if compression not in SIF_COMPRESSIONS:
        raise UsageError(f"unknown SIF compression {compression!r}", SIF_COMPRESSIONS_HINT)
    target = prepare_target(target, request.force)
    if via not in ("native", "apptainer"):
        raise UsageError(f"unknown --via {via!r}", "use native or apptainer")
    if via == "apptainer":
        if source.engine_image is None:
            raise UsageError(f"--via apptainer converts images of the local engine, not {image}",
                             "drop --via to write the SIF natively")
    info = source.inspect()
    if request.check_space:
        check_free_space(target.parent, int(info.get("Size") or 0), f"{image} as SIF")
    if via == "apptainer":
        return _via_apptainer(source.engine_image, target, compression)

    config = info.get("Config") or {}
    singularity_d.check_config(config, image)
    epoch, fixed = squash.source_date_epoch(), squash.image_time(info)
    when = fixed if fixed is not None else int(time.time())
    # An ID derived from the image and its time: two exports of one image are the same bytes. Random only
    # where the image has no creation time and no SOURCE_DATE_EPOCH is set.
    ident = (uuid.UUID(bytes=hashlib.sha256(f"{info.get('Id')}:{fixed}".encode()).digest()[:16])
             if fixed is not None else uuid.uuid4())
    goarch = info.get("Architecture") or "amd64"
    arch = arch_code(goarch)
    layout = singularity_d.files(config, image, goarch=goarch, when=when)
    # Apptainer adds its JSON objects sorted by name: inspect-metadata.json, then oci-config.json.
    objects = [_Object(DATA_DEFFILE, definition_file(image)),
               _Object(DATA_GENERIC_JSON, singularity_d.inspect_metadata(layout), name=INSPECT_METADATA_NAME),
               _Object(DATA_GENERIC_JSON, oci_config_json(config), name=OCI_CONFIG_NAME),
               _Object(DATA_PARTITION, None,
                       extra=PARTITION_EXTRA.pack(FS_SQUASHFS, PART_PRIMSYS, arch.encode()))]
    partition_offset = _layout(objects)[-1].offset
    replaced = frozenset(layout)
    # sqfstar first; a preset with a level (fast) needs `mksquashfs -tar`. Both write in place at the offset.
    name, _ = squash.pick_tool(request.tool, compression)
    # Apptainer builds as root keep file ownership (mksquashfs without -all-root).
    spec = squash.SquashSpec(preset=compression, extra_args=tuple(request.squash_opts), tool=name,
                             all_root=False, xattrs=True, epoch=epoch, mkfs_time=fixed,
                             offset=partition_offset if name in ("sqfstar", "mksquashfs") else 0)
    meter = Progress(progress, expected=expected_bytes(source, info))
    with interrupt_on_sigterm(), atomic.target(target, file_mode(), sync=True) as tmp:
        squash_path = tmp if spec.offset else tmp.with_name(tmp.name + ".squashfs")
        try:
            rewrite = tarstream.Rewrite(lambda m: singularity_d.keep(m, replaced), steady_times(fixed),
                                        extra=singularity_d.extra_entries(layout, when))
            used = squash.stream_to_squashfs(source, squash_path, spec, rewrite, on_bytes=meter.add, on_end=meter.ended)
            if not spec.offset:
                _copy_at(squash_path, tmp, partition_offset)
        finally:
            if squash_path != tmp and squash_path.exists():
                squash_path.unlink()
        meter.done()
        partition_size = tmp.stat().st_size - partition_offset
        descriptors = _layout(objects, partition_size)
        with open(tmp, "r+b") as fh:
            write_prefix(fh, objects, descriptors, arch=arch, ident=ident, when=when)
        digest = Digest(tmp)     # read beside the fsync, the rename and the check below
    read_sif(target)  # never hand out a file our own reader rejects
    return ExportResult(path=str(target), format="sif", image=image, bytes=target.stat().st_size,
                        sha256=digest.result(), seconds=0.0, tool=used, compression=compression)


def _copy_at(src: Path, dst: Path, offset: int) -> None:
    with open(src, "rb") as fin, open(dst, "r+b") as fout:
        fout.seek(offset)
        shutil.copyfileobj(fin, fout, 4 << 20)


def _via_apptainer(image: str, target: Path, compression: str) -> ExportResult:
    binary = shutil.which("apptainer") or shutil.which("singularity")
    if binary is None:
        raise ImagekitError("--via apptainer needs apptainer or singularity on PATH",
                            "install Apptainer, or drop --via to write the SIF natively")
    with interrupt_on_sigterm(), atomic.target(target, file_mode(), sync=True) as tmp:
        os.unlink(tmp)  # apptainer refuses to overwrite without --force
        # Apptainer compresses with gzip-9 by default; `--mksquashfs-args` passes any other preset's options.
        options = presets.preset(compression).mksquashfs_args()
        args = [] if compression == "gzip" else ["--mksquashfs-args", " ".join(options)]
        proc = subprocess.run([binary, "build", *args, str(tmp), f"docker-daemon://{image}"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
            raise ImagekitError(f"{Path(binary).name} build failed: {tail}")
    return ExportResult(path=str(target), format="sif", image=image, bytes=target.stat().st_size,
                        sha256=sha256_file(target), seconds=0.0, tool=Path(binary).name,
                        compression=compression)
