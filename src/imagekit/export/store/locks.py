"""Conversion locks: who is converting a key, and the file system's clock to judge their age.

A lock is ``locks/<key slug>.lock`` holding its owner's token (:mod:`imagekit.util.leases`). It is
made whole or not at all: the token goes into a file of the owner's own unique name first,
and ``link(2)`` gives it the lock's name, which fails with EEXIST when another process holds
it (atomic on local file systems, NFS and Lustre). So a lock is never empty, a full file
system fails before anything is locked (NoSpaceError, exit 8), and a kill at any moment
leaves either no lock or a complete one that names a dead owner, broken at once on its own
host. An empty lock (made by an older imagekit) counts as stale after :data:`EMPTY_STALE` s.

The lock only saves duplicate work; publication is atomic without it (see :mod:`.core`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from pathlib import Path
from typing import Iterator

from imagekit.util import leases
from imagekit.export.store import nofollow
from imagekit.util.errors import NoSpaceError

HEARTBEAT = 10.0            # seconds between a converter's touches of its lock and temp dir
LOCK_STALE = 120.0          # another namespace's or host's lock untouched this long is broken
EMPTY_STALE = 10.0          # an empty lock (an older imagekit killed mid-write) this old is broken


class Clock:
    """``now`` by the file system's clock: the mtime of a file this process creates itself.

    NFS and Lustre set times by the server's clock, and a node's own clock may be skewed,
    so a lock's age is measured against a file created just now in ``directory`` (with
    O_EXCL|O_NOFOLLOW, so no one can make it land elsewhere through a planted link; then
    removed). Cached for a few seconds; the node's clock when the directory is not writable.
    """

    def __init__(self, directory: Path, cache: float = 5.0) -> None:
        self.dir = directory
        self.cache = cache
        self._offset: float | None = None
        self._measured = -1e9

    def now(self) -> float:
        mono = time.monotonic()
        if self._offset is None or mono - self._measured > self.cache:
            self._offset = self._measure()
            self._measured = mono
        return time.time() + self._offset

    def _measure(self) -> float:
        # named like a temporary (KEY@OWNER@RANDOM): a kill before the unlink leaves what sweep removes
        probe = f".clock@{leases.me()}@{os.urandom(4).hex()}"
        try:
            with nofollow.opened(self.dir) as dir_fd:
                fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
                try:
                    return os.fstat(fd).st_mtime - time.time()
                finally:
                    os.close(fd)
                    with contextlib.suppress(OSError):
                        os.unlink(probe, dir_fd=dir_fd)
        except (OSError, nofollow.NotADirectory):
            return 0.0

    def age(self, mtime: float) -> float:
        return self.now() - mtime


def is_token(name: str) -> bool:
    return name.count("+") >= 2


def _part(lock: Path) -> Path:
    return lock.with_name(f".{lock.name}.{leases.me()}.{os.urandom(4).hex()}.part")


def take(lock: Path, mode: int) -> bool:
    """Try to hold ``lock``: True when taken, False when another process holds it."""
    part = _part(lock)
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, f"{leases.me()}\n".encode())
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        try:
            os.link(part, lock, follow_symlinks=False)   # what we wrote, never a link put in its place
            return True
        except FileExistsError:
            # NFS may answer EEXIST to a retransmitted link that did succeed: the link count says.
            return os.lstat(part).st_nlink == 2
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise NoSpaceError(f"no space left in {lock.parent} to take the lock {lock.name}",
                               "free space (imagekit store gc --max-size SIZE), or point --store elsewhere") from None
        raise
    finally:
        with contextlib.suppress(OSError):
            part.unlink()


def owner(lock: Path) -> str | None:
    """The token in ``lock``; "" when it is empty or unreadable; None when there is no lock."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:
        return ""
    try:
        return os.read(fd, 4096).decode(errors="replace").strip()
    except OSError:
        return ""
    finally:
        os.close(fd)


def drop(lock: Path) -> None:
    if owner(lock) == leases.me():   # never someone's lock that broke ours
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()


def stale(lock: Path, holder: str, clock: Clock, lock_stale: float) -> bool:
    """Is ``holder``'s lock safe to break? A dead owner of this namespace: at once; any other
    (another host, PID namespace or boot) only after ``lock_stale`` s without a heartbeat."""
    if is_token(holder) and leases.local(holder):
        return not leases.alive(holder)
    try:
        mtime = os.lstat(lock).st_mtime
    except FileNotFoundError:
        return False
    limit = lock_stale if is_token(holder) else min(lock_stale, EMPTY_STALE)
    return clock.age(mtime) > limit


def break_(lock: Path, trash: Path) -> None:
    """Remove a stale lock: renamed aside first, so that two breakers cannot both remove it
    (the second would remove the lock the first breaker's next owner took)."""
    aside = trash / f"{lock.name}@{leases.me()}@{os.urandom(4).hex()}"
    with contextlib.suppress(FileNotFoundError):
        os.rename(lock, aside)
        aside.unlink(missing_ok=True)


@contextlib.contextmanager
def heartbeat(lock: Path, tmp: Path) -> Iterator[None]:
    """Touch our lock and temp dir every HEARTBEAT s while converting: other hosts see we live."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT):
            if owner(lock) == leases.me():   # broken and taken by another: never keep theirs alive
                with contextlib.suppress(OSError):
                    os.utime(lock, follow_symlinks=False)
            with contextlib.suppress(OSError):
                os.utime(tmp, follow_symlinks=False)

    thread = threading.Thread(target=beat, name="imagekit-store-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
