"""Helpers shared by the export tests (plain functions, importable by name)."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path


def engine_tree(docker_bin: str, image: str) -> dict[str, tarfile.TarInfo]:
    """The engine's own flattened export of ``image``, by normalised path."""
    cid = subprocess.run([docker_bin, "create", image], capture_output=True, text=True,
                         check=True).stdout.strip()
    try:
        proc = subprocess.Popen([docker_bin, "export", cid], stdout=subprocess.PIPE)
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            out = {m.name.strip("/").removeprefix("./"): m for m in tar}
        proc.wait()
    finally:
        subprocess.run([docker_bin, "rm", "-f", cid], capture_output=True)
    return out


def unsquash(sqsh: Path, dest: Path, offset: int = 0) -> Path:
    cmd = ["unsquashfs", "-no-progress", "-d", str(dest)]
    if offset:
        cmd += ["-o", str(offset)]
    subprocess.run(cmd + [str(sqsh)], check=True, capture_output=True)
    return dest


def tree_listing(root: Path) -> dict[str, os.stat_result]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath, name)
            out[str(full.relative_to(root))] = full.lstat()
    return out


def superblock(path: Path) -> str:
    return subprocess.run(["unsquashfs", "-s", str(path)], capture_output=True, text=True,
                          check=True).stdout


def assert_superblock(info: str, p) -> None:
    """``unsquashfs -s`` output ``info`` shows what :class:`imagekit.export.squash.Preset` ``p`` asks."""
    assert f"Block size {p.block}\n" in info
    if p.compressor == "none":
        assert "Data is uncompressed" in info and "Fragments are uncompressed" in info
        assert "Inodes are uncompressed" in info
        return
    assert f"Compression {p.compressor}\n" in info
    if p.level is not None:
        assert f"compression-level {p.level}\n" in info
    else:
        assert "compression-level" not in info          # the tool's default level
    if p.algorithm is not None:
        assert f"algorithm {p.algorithm}\n" in info
    assert ("High Compression" in info) == p.hc
    assert ("Data is uncompressed" if p.raw_data else "Data is compressed") in info
    assert "Fragments are compressed" in info and "Inodes are compressed" in info
    assert ("Always-use-fragments option is specified" in info) == p.tailends
    assert ("Filesystem is exportable via NFS" in info) == p.exportable
