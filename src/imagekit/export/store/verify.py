"""An entry's bytes against the sha256 its publisher recorded, on every hit.

Hashing a 500 MB squashfs costs about 0.25 s from the page cache (sha256 with the CPU's
SHA extensions, 2 GB/s; 3-4x that without them), so each user keeps **stamps** of what it
verified: ``${XDG_CACHE_HOME:-~/.cache}/imagekit/verified/<dev>-<inode>.json`` holding the
file's size, mtime (ns) and the digest it had. A hit whose inode, size and mtime match a
stamp with the recorded digest costs one ``stat``; any other is hashed in full, and the
stamp written. Why a stamp is enough: the trust check (:mod:`.trust`) has shown that only
the store's publishers can write the file, and every write moves its mtime, so the bytes are
those hashed unless a publisher (or root) rewrote them and then set the mtime back on
purpose, which is outside what the store can promise (README: "What it cannot promise").
Stamps live in the user's own cache (created 0700, and used only while it is the user's
and writable by nobody else), never in a shared store, so no one else can forge them.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

from imagekit import digests
from imagekit.errors import IntegrityError
from imagekit.export.store.keys import user_cache


def sha256_file(path: Path) -> str:
    """Hex sha256 of ``path``, read with O_NOFOLLOW (an entry file is never a link)."""
    return digests.sha256_file(path, nofollow=True)


class Stamps:
    """This user's record of files already hashed (see the module docstring)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.dir = directory if directory is not None else user_cache() / "verified"
        self._usable: bool | None = None

    def usable(self) -> bool:
        """The directory exists (made 0700 if not), is a real directory, ours, writable by nobody else."""
        if self._usable is None:
            self._usable = False
            with contextlib.suppress(OSError):
                self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                st = os.lstat(self.dir)
                self._usable = (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
                                and not st.st_mode & 0o022)
        return self._usable

    @staticmethod
    def _name(st: os.stat_result) -> str:
        return f"{st.st_dev:x}-{st.st_ino:x}.json"

    def known(self, st: os.stat_result, sha256: str) -> bool:
        if not self.usable():
            return False
        try:
            fd = os.open(self.dir / self._name(st), os.O_RDONLY | os.O_NOFOLLOW)
            try:
                doc = json.loads(os.read(fd, 4096))
            finally:
                os.close(fd)
        except (OSError, ValueError):
            return False
        return isinstance(doc, dict) and doc.get("size") == st.st_size and \
            doc.get("mtime_ns") == st.st_mtime_ns and doc.get("sha256") == sha256

    def record(self, st: os.stat_result, sha256: str) -> None:
        """Best effort: a failure only costs a hash next time."""
        if not self.usable():
            return
        final = self.dir / self._name(st)
        tmp = self.dir / f".{final.name}.{os.getpid()}.{os.urandom(4).hex()}"
        with contextlib.suppress(OSError):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                         "sha256": sha256}).encode())
            finally:
                os.close(fd)
            os.replace(tmp, final)
        with contextlib.suppress(OSError):
            tmp.unlink()


def verify_file(path: Path, sha256: str, size: int, stamps: Stamps | None) -> bool:
    """Check ``path`` has ``sha256`` and ``size``; True when it had to be hashed (not a stamp hit).

    IntegrityError names the file, what was recorded and what it holds.
    """
    st = os.lstat(path)
    if st.st_size != size:
        raise IntegrityError(f"store entry {path} is {st.st_size} bytes, but its publisher recorded {size}",
                             "it was damaged or replaced: remove it (imagekit store gc) and export again")
    if stamps is not None and stamps.known(st, sha256):
        return False
    got = sha256_file(path)
    if got != sha256:
        raise IntegrityError(f"store entry {path} has sha256:{got}, but its publisher recorded sha256:{sha256}",
                             "it was damaged or replaced: remove it (imagekit store gc) and export again")
    after = os.lstat(path)
    if (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns) \
            and stamps is not None:
        stamps.record(after, sha256)
    return True
