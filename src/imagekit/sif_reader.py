"""Reading a SIF (Singularity Image Format) file: its header, descriptors, objects, and the primary
partition's squashfs superblock, checked.

The run side reads an image's labels from here (:mod:`imagekit.image_facts.reader`), and the writer
(:mod:`imagekit.export.sif`) takes the format's layout from here, so that reading a SIF's labels at
launch loads neither the writer nor the export stage. The layout is described in
:mod:`imagekit.export.sif`'s docstring (apptainer/sif, pkg/sif, v2).

The reader checks what Apptainer's image loader checks and more: the header, every descriptor, and
the primary partition's squashfs superblock (magic, version, block size, compressor, and that the
filesystem fits in the partition), so a damaged file is refused with what is wrong instead of failing
at mount.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.util import known_errors
from imagekit.util.known_errors import DamagedImage

# A SIF is made with mode 0755 before the umask, as apptainer/sif creates it: `./x.sif` runs it.
FILE_MODE = 0o755
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
# apptainer/sif v2 (Apptainer 1.4): DataSBOM follows DataCryptoMessage, then the OCI types.
DATA_SBOM, DATA_OCI_ROOT_INDEX, DATA_OCI_BLOB = 0x4009, 0x400A, 0x400B
KNOWN_TYPES = range(DATA_DEFFILE, DATA_OCI_BLOB + 1)
FS_SQUASHFS = 1
PART_SYSTEM, PART_PRIMSYS, PART_DATA, PART_OVERLAY = 1, 2, 3, 4
OCI_CONFIG_NAME = "oci-config.json"
INSPECT_METADATA_NAME = "inspect-metadata.json"

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


class SifFormatError(DamagedImage):
    """The file is not a valid SIF image (exit 6, as every damaged image file)."""


def _damaged(path: Path, problem: str) -> SifFormatError:
    return known_errors.DAMAGED_SIF.error(path=path, problem=problem, as_kind=SifFormatError)  # type: ignore[return-value]


def read_sif(path: str | Path) -> SifInfo:
    """Parse and validate a SIF file; :class:`SifFormatError` says what is wrong."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        raw = fh.read(HEADER.size)
        if len(raw) < HEADER.size:
            raise _damaged(path, f"too short for a SIF header ({size} bytes)")
        (launch, magic, version, arch, ident, created, modified, dfree, dtotal, doff, dsize,
         data_off, data_size) = HEADER.unpack(raw)
        if _z(magic) != MAGIC.decode():
            raise _damaged(path, f"bad magic {magic[:9]!r} (not a SIF file)")
        if _z(version) != VERSION.decode():
            raise _damaged(path, f"unsupported SIF version {_z(version)!r}")
        if not 0 < dtotal <= 1 << 16 or not 0 <= dfree <= dtotal:
            raise _damaged(path, f"bad descriptor counts (free {dfree}, total {dtotal})")
        if dsize != dtotal * DESCRIPTOR.size or doff < HEADER.size or doff + dsize > size:
            raise _damaged(path, f"descriptor table ({doff}+{dsize}) outside the file "
                                 f"({size} bytes)")
        if data_off + data_size > size:
            raise _damaged(path, f"truncated: its header says {data_off + data_size} bytes, the file has {size}")
        if data_off < doff + dsize or data_off + data_size != size:
            raise _damaged(path, f"data section {data_off}+{data_size} does not match the file size {size}")
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
            raise _damaged(path, f"descriptor {d.id} has unknown data type {d.datatype:#x}")
        if d.id in ids or d.id == 0:
            raise _damaged(path, f"duplicate or zero descriptor id {d.id}")
        ids.add(d.id)
        if d.offset < data_off or d.size < 0 or d.offset + d.size > size:
            raise _damaged(path, f"descriptor {d.id} data {d.offset}+{d.size} lies outside "
                                 f"the data section ({data_off}..{size})")
        info.descriptors.append(d)
    if len(info.descriptors) != dtotal - dfree:
        raise _damaged(path, f"{len(info.descriptors)} used descriptors but header says "
                             f"{dtotal - dfree}")
    primaries = [d for d in info.descriptors if d.partition and d.partition[1] == PART_PRIMSYS]
    if len(primaries) > 1:
        raise _damaged(path, "more than one primary partition")
    if primaries and primaries[0].partition[2] != info.arch:
        raise _damaged(path, f"header arch {info.arch} differs from the primary "
                             f"partition's {primaries[0].partition[2]}")
    if primaries and primaries[0].partition[0] == FS_SQUASHFS:
        check_squashfs(path, primaries[0])
    return info


@dataclass
class SquashfsSuper:
    block_size: int
    compressor: str
    bytes_used: int
    inodes: int


def check_squashfs(path: Path, part: Descriptor) -> SquashfsSuper:
    """The SIF partition's squashfs superblock, checked (:func:`squashfs_problem`); SifFormatError if not."""
    where = f"primary partition (descriptor {part.id}, offset {part.offset}): "
    found = squashfs_problem(path, part.offset, part.size, "the partition holds")
    if isinstance(found, str):
        raise _damaged(path, where + found)
    return found


def check_squashfs_file(path: Path) -> SquashfsSuper:
    """An Enroot ``.sqsh`` (a squashfs from its first byte), checked as :func:`check_squashfs` checks a SIF's
    partition; DamagedImage naming the file and the fix if it is cut short or not a squashfs."""
    found = squashfs_problem(path, 0, path.stat().st_size, "the file has")
    if isinstance(found, str):
        raise known_errors.DAMAGED_SQUASHFS.error(path=path, problem=found)
    return found


def squashfs_problem(path: Path, offset: int, size: int, holder: str) -> SquashfsSuper | str:
    """The superblock of the squashfs at ``offset`` (``size`` bytes are there), or what is wrong with it:
    magic, version 4.0, a block size that is a power of two from 4 KiB to 1 MiB matching its log, a known
    compressor, and every table inside the filesystem, which must fit in the ``size`` bytes (a copy cut
    short ends before the tables; ``holder`` says where the bytes are, for the message)."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        raw = fh.read(SQUASHFS_SUPER.size)
    if size < SQUASHFS_SUPER.size or len(raw) < SQUASHFS_SUPER.size:
        return f"{size} bytes, too short for a squashfs superblock"
    (magic, inodes, _mkfs, block_size, _frags, comp, block_log, _flags, _ids, major, minor,
     _root, used, id_table, xattr_table, inode_table, dir_table, frag_table,
     lookup_table) = SQUASHFS_SUPER.unpack(raw)
    if magic != SQUASHFS_MAGIC:
        return f"not a squashfs (magic {magic!r}, want {SQUASHFS_MAGIC!r})"
    if (major, minor) != (4, 0):
        return f"squashfs version {major}.{minor}; Enroot, squashfuse and Apptainer mount 4.0"
    if not (4096 <= block_size <= 1 << 20 and block_size == 1 << block_log):
        return (f"squashfs block size {block_size} with log {block_log}; want a power of two from 4096 to "
                f"1048576 and its log2")
    if comp not in SQUASHFS_COMPRESSORS:
        return f"unknown squashfs compressor {comp}"
    if not SQUASHFS_SUPER.size <= used <= size:
        return f"truncated: the squashfs says it uses {used} bytes but {holder} {size}"
    tables = {"id": id_table, "inode": inode_table, "directory": dir_table}
    tables.update((name, start) for name, start in (("xattr id", xattr_table), ("fragment", frag_table),
                                                   ("lookup", lookup_table)) if start != NO_TABLE)
    for name, start in tables.items():
        if not SQUASHFS_SUPER.size <= start < used:
            return f"corrupt: squashfs {name} table at {start}, outside the filesystem's {used} bytes"
    return SquashfsSuper(block_size, SQUASHFS_COMPRESSORS[comp], used, inodes)
