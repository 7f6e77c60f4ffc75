"""The SIF reader (imagekit.sif_reader) rejects damaged files, each check on its own; the files are
made by the writer (tests/helpers/sif_files.py) and then broken."""

from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import pytest

from imagekit import sif_reader as sif
from helpers.sif_files import tiny_sif as _tiny_sif


def test_reader_accepts_tiny_sif(tmp_path):
    info = sif.read_sif(_tiny_sif(tmp_path))
    assert [d.datatype for d in info.descriptors] == [sif.DATA_DEFFILE, sif.DATA_PARTITION]
    assert info.read(info.primary_partition())[:4] == b"hsqs"


def _corrupt(path: Path, offset: int, data: bytes) -> Path:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)
    return path


SQUASH_DAMAGE = {  # superblock field offset, bytes, what the error says
    "sq-magic": (0, b"hsqt", "not a squashfs (magic"),
    "sq-version": (28, struct.pack("<H", 3), "squashfs version 3.0"),
    "sq-block-size": (12, struct.pack("<I", 4097), "block size 4097 with log 17"),
    "sq-block-log": (22, struct.pack("<H", 12), "block size 131072 with log 12"),
    "sq-compressor": (20, struct.pack("<H", 9), "unknown squashfs compressor 9"),
    "sq-bytes-used": (40, struct.pack("<Q", 1 << 40), "partition holds"),
    "sq-inode-table": (64, struct.pack("<Q", 1 << 30), "inode table at"),
    "sq-id-table": (48, struct.pack("<Q", 10), "id table at 10"),
}


@pytest.mark.parametrize("damage", sorted(SQUASH_DAMAGE))
def test_reader_checks_the_primary_partitions_squashfs_superblock(tmp_path, damage):
    """Each check on its own: one superblock field broken in an otherwise valid file."""
    path = _tiny_sif(tmp_path)
    part = sif.read_sif(path).primary_partition()
    field, data, message = SQUASH_DAMAGE[damage]
    _corrupt(path, part.offset + field, data)
    with pytest.raises(sif.SifFormatError, match=f"primary partition .*{re.escape(message)}"):
        sif.read_sif(path)


def test_reader_refuses_a_partition_shorter_than_its_squashfs(tmp_path):
    """A SIF cut inside the filesystem whose header and descriptor were made to agree with the
    shorter file (as a copy tool that stops early and a naive fix-up would leave it)."""
    path = _tiny_sif(tmp_path)
    info = sif.read_sif(path)
    part = info.primary_partition()
    used = struct.unpack_from("<Q", path.read_bytes(), part.offset + 40)[0]
    cut = used // 2
    with open(path, "r+b") as fh:
        fh.truncate(part.offset + cut)
    _corrupt(path, 4096 + (part.id - 1) * 585 + 4 + 1 + 12 + 8, struct.pack("<q", cut))   # size
    _corrupt(path, 32 + 10 + 3 + 3 + 16 + 8 * 7, struct.pack("<q", part.offset + cut - info.data_offset))
    with pytest.raises(sif.SifFormatError, match=rf"uses {used} bytes but the partition holds {cut}"):
        sif.read_sif(path)


def test_reader_reads_the_superblock_of_a_good_partition(tmp_path):
    path = _tiny_sif(tmp_path)
    info = sif.read_sif(path)
    sb = sif.check_squashfs(path, info.primary_partition())
    listing = subprocess.run(["unsquashfs", "-s", "-o", str(info.primary_partition().offset), str(path)],
                             capture_output=True, text=True, check=True).stdout
    assert f"Block size {sb.block_size}" in listing and f"Number of inodes {sb.inodes}" in listing
    assert f"Compression {sb.compressor}" in listing


@pytest.mark.parametrize("damage", ["magic", "version", "descr-offset", "object-offset",
                                    "truncated", "used-count", "arch", "empty"])
def test_reader_rejects_damaged_sif(tmp_path, damage):
    path = _tiny_sif(tmp_path)
    if damage == "magic":
        _corrupt(path, 32, b"NOT_MAGIC")
    elif damage == "version":
        _corrupt(path, 42, b"99")
    elif damage == "descr-offset":
        _corrupt(path, 32 + 10 + 3 + 3 + 16 + 8 * 4, struct.pack("<q", 1 << 40))
    elif damage == "object-offset":      # first descriptor's offset field points past EOF
        _corrupt(path, 4096 + 4 + 1 + 12, struct.pack("<q", 1 << 40))
    elif damage == "truncated":
        with open(path, "r+b") as fh:
            fh.truncate(path.stat().st_size - 4096)
    elif damage == "used-count":          # header claims a different number of free slots
        _corrupt(path, 32 + 10 + 3 + 3 + 16 + 8 * 2, struct.pack("<q", 40))
    elif damage == "arch":
        _corrupt(path, 45, b"04")
    elif damage == "empty":
        path.write_bytes(b"")
    with pytest.raises(sif.SifFormatError):
        sif.read_sif(path)
