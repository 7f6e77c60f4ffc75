"""The sha256 of a file, read in large chunks: one loop for exports, store entries and downloads."""

from __future__ import annotations

import hashlib
import os

CHUNK = 4 << 20


def sha256_and_size(path: str | os.PathLike, *, nofollow: bool = False) -> tuple[str, int]:
    """(hex sha256, bytes read) of ``path``; ``nofollow`` refuses a symbolic link (O_NOFOLLOW), for
    files that must never be one (a store entry)."""
    fd = os.open(path, os.O_RDONLY | (os.O_NOFOLLOW if nofollow else 0))
    try:
        return sha256_of_fd(fd)
    finally:
        os.close(fd)


def sha256_of_fd(fd: int) -> tuple[str, int]:
    """(hex sha256, bytes read) of what an open descriptor reads from its offset to its end."""
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    size = 0
    while n := os.readv(fd, [buf]):
        h.update(view[:n])
        size += n
    return h.hexdigest(), size


def sha256_fd(fd: int) -> str:
    """Hex sha256 of what the open descriptor ``fd`` reads from where it stands to its end: the bytes of
    the very file that was checked, whatever its path names by now."""
    return sha256_of_fd(fd)[0]


def sha256_file(path: str | os.PathLike, *, nofollow: bool = False) -> str:
    """Hex sha256 of ``path`` (see :func:`sha256_and_size`)."""
    return sha256_and_size(path, nofollow=nofollow)[0]
