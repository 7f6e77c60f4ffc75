"""An entry's bytes against the sha256 its publisher recorded, on every hit.

Hashing a 500 MB squashfs costs about 0.25 s from the page cache (sha256 with the CPU's
SHA extensions, 2 GB/s; 3-4x that without them), so each user keeps **stamps** of what it
verified: ``${XDG_CACHE_HOME:-~/.cache}/imagekit/verified/<host>-<dev>-<inode>.json`` holding the
file's size, mtime and ctime (ns) and the digest it had (one per node: a stamp says what this
node read). A hit whose inode, size, mtime and ctime match a stamp with the recorded digest
costs one ``stat``; any other is hashed in full, and the stamp written. Nobody but root can set
a ctime back, so a file replaced or rewritten since never matches, even with its inode number
reused and its mtime set back. Why a stamp is enough: the trust check (:mod:`.trust`) has shown that only
the store's publishers can write the file, and every write moves its mtime, so the bytes are
those hashed unless a publisher (or root) rewrote them and then set the mtime back on
purpose, which is outside what the store can promise (docs/export.md: "What it cannot promise").
Stamps live in the user's own cache (created 0700, and used only while it is the user's
and writable by nobody else), never in a shared store, so no one else can forge them.

The publisher's **seal** makes the first hit as cheap as a stamp, on every node and for every
user. The process that creates an entry hashes the bytes it wrote (it has them, hashed once while
or right after writing), and records in ``entry.json`` beside the sha256 the file's inode, size
and mtime (ns) as it left them: ``"sealed": {"ino", "size", "mtime_ns"}``. A hit whose file still
has them is served without reading it. Why that is as strong as a stamp: entry.json is trusted
exactly as far as the sha256 in it (written only by a publisher, :mod:`.trust`), the publisher
hashed these very bytes, and nobody outside the publishers can have changed them since without
moving the mtime or, by replacing the file, the inode. So the one full read per file is the
publisher's, not one per node and user (on a parallel file system, 1,000 nodes that start a job
would otherwise read the whole file 1,000 times, even where the container reads only the pages it
touches). Any other file (an older entry without a seal, one copied or restored, touched, or on a
file system that does not keep the mtime's nanoseconds) is hashed in full as before, then stamped.
``imagekit store verify`` hashes every entry in full, for a site that wants media damage found.
Under a signature policy the seal is never used: a publisher who cannot sign writes it (:mod:`.sealed`).
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from imagekit.util import digests, private_records
from imagekit.util.errors import IntegrityError
from imagekit.export.store.keys import user_cache


def node_name() -> str:
    """This host's short name as a file name may carry it (stamps, Pyxis holds)."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0]) or "host"


def sha256_file(path: Path) -> str:
    """Hex sha256 of ``path``, read with O_NOFOLLOW (an entry file is never a link)."""
    return digests.sha256_file(path, nofollow=True)


def verified_dir() -> Path:
    """This user's private directory of verification records: the read stamps here, and the signed
    importer's verdicts (:mod:`imagekit.export.pyxis_verdicts`)."""
    return user_cache() / "verified"


class Stamps:
    """This user's record of files already hashed (see the module docstring)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.dir = directory if directory is not None else verified_dir()
        self._usable: bool | None = None

    def usable(self) -> bool:
        """The directory exists (made 0700 if not), is a real directory, ours, writable by nobody else."""
        if self._usable is None:
            self._usable = private_records.make_private_dir(self.dir)
        return self._usable

    @staticmethod
    def _name(st: os.stat_result) -> str:
        return f"{node_name()}-{st.st_dev:x}-{st.st_ino:x}.json"

    def known(self, st: os.stat_result, sha256: str) -> bool:
        if not self.usable():
            return False
        doc = private_records.read(self.dir / self._name(st))
        return isinstance(doc, dict) and doc.get("size") == st.st_size and \
            doc.get("mtime_ns") == st.st_mtime_ns and doc.get("ctime_ns") == st.st_ctime_ns and \
            doc.get("sha256") == sha256

    def record(self, st: os.stat_result, sha256: str) -> None:
        """Best effort: a failure only costs a hash next time."""
        if not self.usable():
            return
        private_records.write(self.dir / self._name(st), {"size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                                          "ctime_ns": st.st_ctime_ns, "sha256": sha256})


def seal_of(st: os.stat_result) -> dict[str, int]:
    """What the publisher records of the file it hashed (see the module docstring)."""
    return {"ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def sealed(st: os.stat_result, seal: dict[str, int] | None) -> bool:
    """Is this the file, unchanged, that the publisher hashed and sealed?"""
    return bool(seal) and seal_of(st) == seal


def verify_file(path: Path, sha256: str, size: int, stamps: Stamps | None, seal: dict[str, int] | None = None,
                *, full: bool = False) -> bool:
    """Check ``path`` has ``sha256`` and ``size``; True when it had to be hashed (not a seal or stamp
    hit; ``full`` hashes always). IntegrityError names the file, what was recorded and what it holds.
    """
    st = os.lstat(path)
    if st.st_size != size:
        raise IntegrityError(f"store entry {path} is {st.st_size} bytes, but its publisher recorded {size}",
                             "it was damaged or replaced: remove it (imagekit store gc) and export again")
    if not full and (sealed(st, seal) or (stamps is not None and stamps.known(st, sha256))):
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
