"""SIF (Singularity Image Format) written natively, and read back for checks.

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

The reader checks what Apptainer's image loader checks and more: the header,
every descriptor, and the primary partition's squashfs superblock (magic,
version, block size, compressor, and that the filesystem fits in the partition),
so a damaged file is refused with what is wrong instead of failing at mount.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable

from imagekit import atomic, quoting
from imagekit.errors import ImagekitError, UsageError
from imagekit.export import formats, singularity_d, squash
from imagekit.export.output import ExportResult, Progress, check_free_space, prepare_target, sha256_file
from imagekit.signals import interrupt_on_sigterm

LAUNCH = b"#!/usr/bin/env run-singularity\n"
MAGIC = b"SIF_MAGIC"
VERSION = b"01"
HEADER = struct.Struct("<32s10s3s3s16sqqqqqqqq")
DESCRIPTOR = struct.Struct("<i?IIIqqqqqqq128s384s")
PARTITION_EXTRA = struct.Struct("<ii3s")
DESCRIPTORS_OFFSET = 4096
DESCRIPTOR_CAPACITY = 48
ALIGN = 4096
GROUP_MASK = 0xF0000000
DEFAULT_GROUP = GROUP_MASK | 1

DATA_DEFFILE, DATA_ENVVAR, DATA_LABELS, DATA_PARTITION = 0x4001, 0x4002, 0x4003, 0x4004
DATA_SIGNATURE, DATA_GENERIC_JSON, DATA_GENERIC, DATA_CRYPTO_MESSAGE = 0x4005, 0x4006, 0x4007, 0x4008
DATA_OCI_ROOT_INDEX, DATA_OCI_BLOB = 0x4009, 0x400A
KNOWN_TYPES = range(DATA_DEFFILE, DATA_OCI_BLOB + 1)
FS_SQUASHFS = 1
PART_SYSTEM, PART_PRIMSYS, PART_DATA, PART_OVERLAY = 1, 2, 3, 4
OCI_CONFIG_NAME = "oci-config.json"
INSPECT_METADATA_NAME = "inspect-metadata.json"
FILE_MODE = formats.FORMATS["sif"].mode  # before the umask, as apptainer/sif creates the file

# Squashfs 4.0 superblock (Linux fs/squashfs/squashfs_fs.h), little-endian, 96 bytes: magic,
# inode count, mkfs time, block size, fragment count, u16 compressor, block_log, flags, id count,
# major, minor, then u64 root inode, bytes used, and the id, xattr id, inode, directory,
# fragment and export lookup table starts (all ones: no such table).
SQUASHFS_SUPER = struct.Struct("<4sIIIIHHHHHHQQQQQQQQ")
SQUASHFS_MAGIC = b"hsqs"
SQUASHFS_COMPRESSORS = {1: "gzip", 2: "lzma", 3: "lzo", 4: "xz", 5: "lz4", 6: "zstd"}
NO_TABLE = (1 << 64) - 1

# Go architecture names (docker inspect "Architecture") -> SIF arch codes.
ARCH_CODES = {"386": "01", "amd64": "02", "arm": "03", "arm64": "04", "ppc64": "05",
              "ppc64le": "06", "mips": "07", "mipsle": "08", "mips64": "09",
              "mips64le": "10", "s390x": "11", "riscv64": "12"}
ARCH_NAMES = {v: k for k, v in ARCH_CODES.items()}

assert HEADER.size == 128 and DESCRIPTOR.size == 585 and SQUASHFS_SUPER.size == 96


def aligned(offset: int, alignment: int = ALIGN) -> int:
    return -(-offset // alignment) * alignment


def _z(data: bytes) -> str:
    return data.split(b"\0", 1)[0].decode("utf-8", "replace")


@dataclass
class Descriptor:
    datatype: int
    id: int
    offset: int
    size: int
    size_with_padding: int
    group_id: int = DEFAULT_GROUP
    linked_id: int = 0
    created: int = 0
    modified: int = 0
    uid: int = 0
    gid: int = 0
    name: str = ""
    extra: bytes = b""
    used: bool = True

    def pack(self) -> bytes:
        return DESCRIPTOR.pack(self.datatype, self.used, self.id, self.group_id, self.linked_id,
                               self.offset, self.size, self.size_with_padding, self.created,
                               self.modified, self.uid, self.gid, self.name.encode(), self.extra)

    @property
    def partition(self) -> tuple[int, int, str] | None:
        """(fs type, partition type, arch code) for partitions."""
        if self.datatype != DATA_PARTITION:
            return None
        fstype, parttype, arch = PARTITION_EXTRA.unpack(self.extra[:PARTITION_EXTRA.size])
        return fstype, parttype, _z(arch)


@dataclass
class SifInfo:
    path: Path
    launch: str
    version: str
    arch: str
    id: uuid.UUID
    created: int
    modified: int
    descriptors_free: int
    descriptors_total: int
    descriptors_offset: int
    descriptors_size: int
    data_offset: int
    data_size: int
    descriptors: list[Descriptor] = field(default_factory=list)

    def primary_partition(self) -> Descriptor:
        return next(d for d in self.descriptors
                    if d.partition and d.partition[1] == PART_PRIMSYS)

    def by_type(self, datatype: int) -> list[Descriptor]:
        return [d for d in self.descriptors if d.datatype == datatype]

    def read(self, descriptor: Descriptor) -> bytes:
        with open(self.path, "rb") as fh:
            fh.seek(descriptor.offset)
            return fh.read(descriptor.size)


class SifFormatError(ImagekitError):
    """The file is not a valid SIF image."""


def read_sif(path: str | Path) -> SifInfo:
    """Parse and validate a SIF file; :class:`SifFormatError` says what is wrong."""
    path = Path(path)
    size = path.stat().st_size
    hint = "re-export the image; the file is damaged or not a SIF image"
    with open(path, "rb") as fh:
        raw = fh.read(HEADER.size)
        if len(raw) < HEADER.size:
            raise SifFormatError(f"{path}: too short for a SIF header ({size} bytes)", hint)
        (launch, magic, version, arch, ident, created, modified, dfree, dtotal, doff, dsize,
         data_off, data_size) = HEADER.unpack(raw)
        if _z(magic) != MAGIC.decode():
            raise SifFormatError(f"{path}: bad magic {magic[:9]!r} (not a SIF file)", hint)
        if _z(version) != VERSION.decode():
            raise SifFormatError(f"{path}: unsupported SIF version {_z(version)!r}", hint)
        if not 0 < dtotal <= 1 << 16 or not 0 <= dfree <= dtotal:
            raise SifFormatError(f"{path}: bad descriptor counts (free {dfree}, total {dtotal})", hint)
        if dsize != dtotal * DESCRIPTOR.size or doff < HEADER.size or doff + dsize > size:
            raise SifFormatError(f"{path}: descriptor table ({doff}+{dsize}) outside the file "
                                 f"({size} bytes)", hint)
        if data_off < doff + dsize or data_off + data_size != size:
            raise SifFormatError(f"{path}: data section {data_off}+{data_size} does not match "
                                 f"the file size {size} (truncated?)", hint)
        fh.seek(doff)
        table = fh.read(dsize)
    info = SifInfo(path, _z(launch), _z(version), _z(arch), uuid.UUID(bytes=ident), created,
                   modified, dfree, dtotal, doff, dsize, data_off, data_size)
    ids = set()
    for i in range(dtotal):
        fields = DESCRIPTOR.unpack_from(table, i * DESCRIPTOR.size)
        if not fields[1]:
            continue
        d = Descriptor(datatype=fields[0], used=True, id=fields[2], group_id=fields[3],
                       linked_id=fields[4], offset=fields[5], size=fields[6],
                       size_with_padding=fields[7], created=fields[8], modified=fields[9],
                       uid=fields[10], gid=fields[11], name=_z(fields[12]), extra=fields[13])
        if d.datatype not in KNOWN_TYPES:
            raise SifFormatError(f"{path}: descriptor {d.id} has unknown data type {d.datatype:#x}", hint)
        if d.id in ids or d.id == 0:
            raise SifFormatError(f"{path}: duplicate or zero descriptor id {d.id}", hint)
        ids.add(d.id)
        if d.offset < data_off or d.size < 0 or d.offset + d.size > size:
            raise SifFormatError(f"{path}: descriptor {d.id} data {d.offset}+{d.size} lies outside "
                                 f"the data section ({data_off}..{size})", hint)
        info.descriptors.append(d)
    if len(info.descriptors) != dtotal - dfree:
        raise SifFormatError(f"{path}: {len(info.descriptors)} used descriptors but header says "
                             f"{dtotal - dfree}", hint)
    primaries = [d for d in info.descriptors if d.partition and d.partition[1] == PART_PRIMSYS]
    if len(primaries) > 1:
        raise SifFormatError(f"{path}: more than one primary partition", hint)
    if primaries and primaries[0].partition[2] != info.arch:
        raise SifFormatError(f"{path}: header arch {info.arch} differs from the primary "
                             f"partition's {primaries[0].partition[2]}", hint)
    if primaries and primaries[0].partition[0] == FS_SQUASHFS:
        check_squashfs(path, primaries[0], hint)
    return info


@dataclass
class SquashfsSuper:
    block_size: int
    compressor: str
    bytes_used: int
    inodes: int


def check_squashfs(path: Path, part: Descriptor, hint: str) -> SquashfsSuper:
    """The partition's squashfs superblock: magic, version 4.0, a block size that is a power of
    two from 4 KiB to 1 MiB matching its log, a known compressor, and every table inside the
    filesystem, which must fit in the partition (a short partition is a cut-off file)."""
    where = f"{path}: primary partition (descriptor {part.id}, offset {part.offset})"
    with open(path, "rb") as fh:
        fh.seek(part.offset)
        raw = fh.read(SQUASHFS_SUPER.size)
    if part.size < SQUASHFS_SUPER.size or len(raw) < SQUASHFS_SUPER.size:
        raise SifFormatError(f"{where}: {part.size} bytes, too short for a squashfs superblock", hint)
    (magic, inodes, _mkfs, block_size, _frags, comp, block_log, _flags, _ids, major, minor,
     _root, used, id_table, xattr_table, inode_table, dir_table, frag_table,
     lookup_table) = SQUASHFS_SUPER.unpack(raw)
    if magic != SQUASHFS_MAGIC:
        raise SifFormatError(f"{where}: bad squashfs magic {magic!r} (want {SQUASHFS_MAGIC!r})", hint)
    if (major, minor) != (4, 0):
        raise SifFormatError(f"{where}: squashfs version {major}.{minor}, Apptainer mounts 4.0", hint)
    if not (4096 <= block_size <= 1 << 20 and block_size == 1 << block_log):
        raise SifFormatError(f"{where}: squashfs block size {block_size} with log {block_log}; want a "
                             f"power of two from 4096 to 1048576 and its log2", hint)
    if comp not in SQUASHFS_COMPRESSORS:
        raise SifFormatError(f"{where}: unknown squashfs compressor {comp}", hint)
    if not SQUASHFS_SUPER.size <= used <= part.size:
        raise SifFormatError(f"{where}: the squashfs says it uses {used} bytes but the partition holds "
                             f"{part.size} (truncated?)", hint)
    tables = {"id": id_table, "inode": inode_table, "directory": dir_table}
    tables.update((name, start) for name, start in (("xattr id", xattr_table), ("fragment", frag_table),
                                                   ("lookup", lookup_table)) if start != NO_TABLE)
    for name, start in tables.items():
        if not SQUASHFS_SUPER.size <= start < used:
            raise SifFormatError(f"{where}: squashfs {name} table at {start}, outside the filesystem's "
                                 f"{used} bytes", hint)
    return SquashfsSuper(block_size, SQUASHFS_COMPRESSORS[comp], used, inodes)


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


def export(image: "str | Source", output: Path, *, compression: str = "gzip", squash_opts: tuple[str, ...] = (),
           tool: str = "auto", via: str = "native", force: bool = False, check_space: bool = True,
           progress: Callable[[int, bool], None] | None = None) -> ExportResult:
    """Write ``image`` (a local engine image or a :class:`~imagekit.export.image_source.Source`) as a
    SIF file at ``output`` (atomically)."""
    # Deferred: image_facts.reader reads SIF labels through this module, and preflight and launch
    # must not load the registry client for that (the SIF format half is not a module of its own yet).
    from imagekit.export.image_source import Source, open_source

    source = image if isinstance(image, Source) else open_source(image)
    image = source.text

    if compression not in ("gzip", "zstd"):
        raise UsageError(f"unknown SIF compression {compression!r}", "use gzip (default) or zstd")
    target = prepare_target(output, force)
    if via not in ("native", "apptainer"):
        raise UsageError(f"unknown --via {via!r}", "use native or apptainer")
    if via == "apptainer":
        if source.engine_image is None:
            raise UsageError(f"--via apptainer converts images of the local engine, not {image}",
                             "drop --via to write the SIF natively")
    info = source.inspect()
    if check_space:
        check_free_space(target.parent, int(info.get("Size") or 0), f"{image} as SIF")
    if via == "apptainer":
        return _via_apptainer(source.engine_image, target, compression)

    config = info.get("Config") or {}
    singularity_d.check_config(config, image)
    epoch = squash.source_date_epoch()
    when = epoch if epoch is not None else int(time.time())
    # Reproducible builds get an ID derived from the image, random ones otherwise.
    ident = (uuid.UUID(bytes=hashlib.sha256(f"{info.get('Id')}:{epoch}".encode()).digest()[:16])
             if epoch is not None else uuid.uuid4())
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
    name, _ = squash.pick_tool(tool)  # sqfstar first: it writes in place at the offset
    # Apptainer builds as root keep file ownership (mksquashfs without -all-root).
    spec = squash.SquashSpec(preset=compression, extra_args=squash_opts, tool=name, all_root=False,
                             xattrs=True, epoch=epoch,
                             offset=partition_offset if name == "sqfstar" else 0)
    meter = Progress(progress)
    with interrupt_on_sigterm(), atomic.target(target, file_mode(), sync=True) as tmp:
        squash_path = tmp if spec.offset else tmp.with_name(tmp.name + ".squashfs")
        try:
            used = squash.stream_to_squashfs(
                source, squash_path, spec, keep=lambda m: singularity_d.keep(m, replaced),
                adjust=None, extra=singularity_d.extra_entries(layout, when), on_bytes=meter.add)
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
    read_sif(target)  # never hand out a file our own reader rejects
    return ExportResult(path=str(target), format="sif", image=image, bytes=target.stat().st_size,
                        sha256=sha256_file(target), seconds=0.0, tool=used, compression=compression)


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
        # Apptainer compresses with gzip by default; `--mksquashfs-args` passes anything else.
        args = ["--mksquashfs-args", "-comp zstd"] if compression == "zstd" else []
        proc = subprocess.run([binary, "build", *args, str(tmp), f"docker-daemon://{image}"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
            raise ImagekitError(f"{Path(binary).name} build failed: {tail}")
    return ExportResult(path=str(target), format="sif", image=image, bytes=target.stat().st_size,
                        sha256=sha256_file(target), seconds=0.0, tool=Path(binary).name,
                        compression=compression)
