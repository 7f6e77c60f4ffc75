"""Holds: readers that need an entry to outlive an eviction, and readers' use of entries.

A hold is the file ``holds/<entry slug>@<uid>@<name>``, owned by the reader ``uid``. It counts
only while its owner is that uid (anyone may write in a shared store's sticky ``holds/``, so a
file named for another user's hold is ignored), and while it is live: NAME an owner token of
this PID namespace whose process lives, or any other NAME (``pyxis.HOST.UID.JOB.STEP``) until
released or ``max_age`` old. The holds of one store are one directory, so a reader needs
write access to ``holds/`` only, never to an entry (which a shared store's readers have not).

When a planted file (or link) already has a reader's hold name, the reader holds under the
name with a ``~<random>`` suffix instead (``~`` is never in a hold name), so nobody can keep
another user's job from holding what it starts.

``used/<entry slug>@<uid>`` is touched on every hit by a reader that may not touch the
entry's directory (a shared store's non-publishers): ``gc``'s LRU takes the newest of the
directory's mtime and these.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from imagekit.util import leases
from imagekit.util.errors import ImagekitError, NoSpaceError, UsageError
from imagekit.export.store import nofollow
from imagekit.export.store.locks import Clock, is_token

HOLD_MAX_AGE = 7 * 86400.0  # a named hold (not an owner token) lapses after this long
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+@-]*")


class HoldRefused(ImagekitError):
    """This process cannot write the store's holds/ (a store not set up for its readers)."""


@dataclass
class Hold:
    slug: str
    uid: int
    name: str
    path: Path
    mtime: float


def check_name(name: str) -> None:
    if not NAME_RE.fullmatch(name or ""):
        raise UsageError(f"bad hold name {name!r}", "letters, digits, '.', '_', '+', '@', '-'")


def _create(dir_fd: int, name: str) -> bool:
    """Create (or refresh) our own hold file ``name`` in the directory open at ``dir_fd``; False
    when something not ours is there."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444, dir_fd=dir_fd)
        os.close(fd)
        return True
    except FileExistsError:
        pass
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
        os.utime(name, dir_fd=dir_fd, follow_symlinks=False)   # held again: a fresh time
        return True
    return False


class Holds:
    """The holds (and use marks) of one store."""

    def __init__(self, directory: Path, used: Path, clock: Clock, max_age: float = HOLD_MAX_AGE) -> None:
        self.dir = directory
        self.used_dir = used
        self.clock = clock
        self.max_age = max_age

    def hold(self, slug: str, name: str) -> Path:
        check_name(name)
        base = f"{slug}@{os.geteuid()}@{name}"
        try:
            with nofollow.opened(self.dir) as fd:
                for candidate in (base, *(f"{base}~{os.urandom(4).hex()}" for _ in range(3))):
                    if _create(fd, candidate):
                        return self.dir / candidate
        except PermissionError:
            raise HoldRefused(f"cannot hold an entry of {self.dir.parent}: {self.dir} is not writable by "
                              f"uid {os.geteuid()}",
                              "a store that others read needs a holds/ directory they may write: "
                              f"imagekit store --store {self.dir.parent} init --shared --group GROUP") from None
        except nofollow.NotADirectory as exc:
            raise HoldRefused(exc.message, exc.hint) from None
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise NoSpaceError(f"no space left in {self.dir} to hold {slug}",
                                   "free space (imagekit store gc --max-size SIZE)") from None
            raise
        raise HoldRefused(f"cannot hold {slug} in {self.dir}: every name tried is taken by someone else")

    def release(self, name: str, slug: str | None = None) -> int:
        """Drop our holds named ``name`` (on ``slug``, or on every entry); returns how many went."""
        check_name(name)
        gone = 0
        with contextlib.suppress(OSError, nofollow.NotADirectory), nofollow.opened(self.dir) as fd:
            for hold in self._scan(fd, uid=os.geteuid()):
                if hold.name == name and (slug is None or hold.slug == slug):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(hold.path.name, dir_fd=fd)
                        gone += 1
        return gone

    def scan(self, uid: int | None = None) -> list[Hold]:
        """Every genuine hold (owned by the uid it names), optionally only ``uid``'s."""
        try:
            with nofollow.opened(self.dir) as fd:
                return self._scan(fd, uid)
        except (OSError, nofollow.NotADirectory):
            return []

    def _scan(self, fd: int, uid: int | None = None) -> list[Hold]:
        out = []
        with os.scandir(fd) as listing:
            items = list(listing)
        for item in items:
            parts = item.name.split("@", 2)
            if len(parts) != 3 or not parts[1].isdigit():
                continue
            with contextlib.suppress(OSError):
                st = item.stat(follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != int(parts[1]):
                    continue
                if uid is not None and st.st_uid != uid:
                    continue
                out.append(Hold(parts[0], st.st_uid, parts[2].split("~", 1)[0], self.dir / item.name,
                                st.st_mtime))
        return out

    def live(self, hold: Hold) -> bool:
        if is_token(hold.name) and leases.local(hold.name):
            return leases.alive(hold.name)
        return self.clock.age(hold.mtime) <= self.max_age

    def live_by_slug(self) -> dict[str, list[str]]:
        held: dict[str, list[str]] = {}
        for hold in self.scan():
            if self.live(hold):
                held.setdefault(hold.slug, []).append(hold.name)
        return held

    def mark_used(self, slug: str) -> None:
        """Best effort: a reader that may not touch the entry says it used it here."""
        with contextlib.suppress(OSError, nofollow.NotADirectory), nofollow.opened(self.used_dir) as fd:
            _create(fd, f"{slug}@{os.geteuid()}")

    def last_used(self) -> dict[str, float]:
        newest: dict[str, float] = {}
        with contextlib.suppress(OSError, nofollow.NotADirectory), nofollow.opened(self.used_dir) as fd, \
                os.scandir(fd) as listing:
            for item in listing:
                slug = item.name.split("@", 1)[0]
                with contextlib.suppress(OSError):
                    st = item.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode):
                        newest[slug] = max(newest.get(slug, 0.0), st.st_mtime)
        return newest

    def sweep(self, slugs: set[str]) -> list[Path]:
        """Remove our own lapsed holds and marks, and marks of entries that are gone (root: anyone's).
        Only regular files named like a hold or a mark, by name in their directory's descriptor."""
        removed = []
        me = os.geteuid()
        with contextlib.suppress(OSError, nofollow.NotADirectory), nofollow.opened(self.dir) as fd:
            for hold in self._scan(fd):
                if (hold.uid == me or me == 0) and not self.live(hold):
                    with contextlib.suppress(OSError):
                        os.unlink(hold.path.name, dir_fd=fd)
                        removed.append(hold.path)
        with contextlib.suppress(OSError, nofollow.NotADirectory), nofollow.opened(self.used_dir) as fd:
            with os.scandir(fd) as listing:
                items = list(listing)
            for item in items:
                slug, _, uid = item.name.partition("@")
                with contextlib.suppress(OSError):
                    st = item.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) and uid == str(st.st_uid) and (st.st_uid == me or me == 0) \
                            and slug not in slugs:
                        os.unlink(item.name, dir_fd=fd)
                        removed.append(self.used_dir / item.name)
        return removed
