"""Waking the processes that wait for a conversion the moment it ends, without polling.

The conversion lock (:mod:`.locks`) says *who* converts; it cannot say *when* they finish
without every waiter looking again and again (on a shared file system: one metadata lookup per
waiter per interval, 500 a second for 1,000 waiting nodes at 2 s). So the converter also holds an
exclusive ``flock(2)`` on ``locks/<key>.wake`` from its first step to its last, and each waiter
blocks on a shared ``flock`` of the same file: the kernel (or the file system's lock manager:
NFS's NLM, Lustre's LDLM with ``-o flock``) wakes them all when the converter publishes and lets
go, or dies. A waiter takes its shared lock and lets it go at once, so it never delays a later
converter.

The lock is only a doorbell. Nothing is decided by it: after waking, a waiter looks the entry up
as before, and the conversion lock's owner and heartbeat still decide whether a lock is stale.
Where ``flock`` is not available (ENOLCK, EOPNOTSUPP, a file system mounted without it), the
waiter sleeps its interval instead, as before this module.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from pathlib import Path
from typing import Iterator

SPIN = 0.005          # let in sooner than this: nobody held the doorbell (not rung yet, or left behind)


def path_for(lock: Path) -> Path:
    return lock.with_name(lock.name[:-len(".lock")] + ".wake" if lock.name.endswith(".lock") else lock.name + ".wake")


@contextlib.contextmanager
def ringing(lock: Path, mode: int) -> Iterator[None]:
    """Held by the converter (who holds ``lock``) while it converts: waiters block until it ends.

    Never blocks the converter: a doorbell another process still holds (a converter whose lock was
    broken as stale, yet lives) leaves this conversion without one, and its waiters poll. The file
    is removed before it is let go, so it does not outlive a conversion that ended; a waiter
    already blocked on it is woken all the same."""
    wake = path_for(lock)
    fd = _take(wake, mode)
    try:
        yield
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                if os.path.samestat(os.fstat(fd), os.lstat(wake)):
                    wake.unlink()
            os.close(fd)    # lets every blocked waiter go


def _take(wake: Path, mode: int) -> int | None:
    try:
        fd = os.open(wake, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        os.fchmod(fd, mode)
        for _ in range(20):          # a waiter holds its shared lock for an instant only
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                time.sleep(0.01)
    except OSError:
        pass
    os.close(fd)
    return None


class Waiter:
    """One wait for a converter. ``wait(check, poll)`` returns as soon as the converter lets go of
    its doorbell, or after ``check`` s while it converts (the caller then checks whether the lock
    is stale, and waits again: the same blocked flock goes on, in a daemon thread). Where there is
    no doorbell to block on (not yet rung, none on this file system, or one that let us in at once),
    it sleeps ``poll`` s instead, as the store did before this module. ``done`` is set once this
    wait is over; the caller then starts a new Waiter for the next one."""

    def __init__(self, lock: Path) -> None:
        self.wake = path_for(lock)
        self.done = threading.Event()
        self.rang = False            # blocked, then let go: the converter ended
        self._thread: threading.Thread | None = None

    def _block(self) -> None:
        started = time.monotonic()
        try:
            fd = os.open(self.wake, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            self.done.set()
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            fcntl.flock(fd, fcntl.LOCK_UN)
            self.rang = time.monotonic() - started >= SPIN
        except OSError:
            pass                     # NO_LOCKS and the like: no doorbell here
        finally:
            os.close(fd)
            self.done.set()

    def wait(self, check: float, poll: float) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._block, name="imagekit-store-wake", daemon=True)
            self._thread.start()
        if self.done.wait(check) and not self.rang:
            time.sleep(poll)
