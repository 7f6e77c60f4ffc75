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
