"""Sweeping, holds and eviction: what keeps a shared store small without pulling an entry from under a reader."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from imagekit.util import leases
from imagekit.util.errors import ImagekitError
from imagekit.export.store import locks, nofollow
from imagekit.export.store.base import EntryGone, newest_mtime
from imagekit.export.store.entries import Entry
from imagekit.export.store.holds import check_name


class Housekeeping:
    """The Store's sweep, holds, evict and gc (mixed into :class:`Store`)."""

    def _owner_gone(self, token: str, path: Path) -> bool:
        if not locks.is_token(token):
            return False
        if leases.local(token):
            return not leases.alive(token)
        return self.clock.age(newest_mtime(path)) > self.tmp_stale

    def sweep(self) -> list[Path]:
        """Remove temporaries, locks and trash of dead owners; returns what went. Only what this
        process may remove: a reader of a shared store sweeps nothing there. Names are removed
        relative to their directory's descriptor, never through a link (:mod:`.nofollow`)."""
        removed: list[Path] = []
        for sub in ("tmp", "trash"):
            try:
                with nofollow.opened(self.root, sub) as fd:
                    with os.scandir(fd) as listing:
                        names = [item.name for item in listing]
                    for name in names:
                        parts = name.split("@")
                        path = self.root / sub / name
                        if len(parts) >= 3 and self._owner_gone(parts[-2], path) and \
                                nofollow.try_remove_tree(fd, name):
                            removed.append(path)
            except (OSError, ImagekitError):
                continue
        try:
            with nofollow.opened(self.root, "locks") as lock_fd, nofollow.opened(self.root, "trash") as trash_fd:
                removed += self._sweep_locks(lock_fd, trash_fd)
        except (OSError, ImagekitError):
            pass
        return removed

    def _sweep_locks(self, lock_fd: int, trash_fd: int) -> list[Path]:
        """Break dead owners' locks and remove their half-made ones. :mod:`.locks` works by path:
        here the paths go through ``/proc/self/fd``, i.e. the directories checked and opened."""
        removed = []
        at, trash = Path(f"/proc/self/fd/{lock_fd}"), Path(f"/proc/self/fd/{trash_fd}")
        with os.scandir(lock_fd) as listing:
            names = [item.name for item in listing]
        for name in names:
            lock, shown = at / name, self.root / "locks" / name
            if name.endswith(".lock"):
                holder = locks.owner(lock)
                if holder is not None and locks.stale(lock, holder, self.clock, self.lock_stale):
                    with contextlib.suppress(OSError):
                        locks.break_(lock, trash)
                        removed.append(shown)
            elif name.endswith(".wake") and self._wake_left_behind(lock):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=lock_fd)
                    removed.append(shown)
            elif name.endswith(".part") and name.startswith("."):
                token = name[1:].split(".lock.", 1)[-1].rsplit(".", 2)[0]
                if self._owner_gone(token, shown):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=lock_fd)
                        removed.append(shown)
        return removed

    def _wake_left_behind(self, wake: Path) -> bool:
        """A converter's doorbell (:mod:`.wake`) whose conversion lock is gone and that nobody touched
        for ``tmp_stale`` s: its converter was killed (one that ends removes its own)."""
        if os.path.lexists(wake.with_name(wake.name[:-len(".wake")] + ".lock")):
            return False
        try:
            return self.clock.age(os.lstat(wake).st_mtime) > self.tmp_stale
        except OSError:
            return False

    def hold(self, entry: Entry | Path, name: str | None = None) -> Path:
        """Keep ``entry`` from eviction until :meth:`release`; returns the hold file.

        ``name`` defaults to this process's owner token (live while the process is).
        Any other name (e.g. ``slurm-JOB.STEP@HOST``) is live until released or
        ``hold_max_age`` old. EntryGone when the entry was evicted meanwhile; HoldRefused
        when this process may not write the store's holds/.
        """
        data = entry.path if isinstance(entry, Entry) else Path(entry)
        name = name or leases.me()
        check_name(name)
        if not os.path.lexists(data):
            raise EntryGone(f"store entry {data.parent} was evicted", "look it up again")
        path = self.holds.hold(self.slug(data.parent), name)
        # A gc that moved the entry aside before our hold landed has put it back by now, or
        # removed it; either way the file is where we return it, or the caller must look again.
        if not data.is_file():
            with contextlib.suppress(OSError):
                path.unlink()
            raise EntryGone(f"store entry {data.parent} was evicted", "look it up again")
        return path

    def release(self, entry: Entry | Path | None = None, name: str | None = None) -> None:
        """Drop a hold (on every entry when ``entry`` is None); twice, or after eviction, is fine."""
        slug = None
        if entry is not None:
            data = entry.path if isinstance(entry, Entry) else Path(entry)
            slug = self.slug(data.parent)
        self.holds.release(name or leases.me(), slug)

    def held(self, entry: Entry | Path) -> list[str]:
        """The live holds on ``entry`` (an Entry, or an entry's directory), by name."""
        return self.holds.live_by_slug().get(self.slug(entry), [])

    def _to_trash(self, directory: Path) -> Path | None:
        """Rename the entry ``directory`` into ``trash/``, relative to descriptors of both parents
        (never through a link on the way); its new path, or None when it is gone already."""
        parts = directory.relative_to(self.root).parts
        aside = f"{directory.name}@{leases.me()}@{os.urandom(4).hex()}"
        try:
            with nofollow.opened(self.root, *parts[:-1]) as parent, nofollow.opened(self.root, "trash") as trash:
                st = nofollow.lstat_at(parent, parts[-1])
                if not stat.S_ISDIR(st.st_mode):
                    raise ImagekitError(f"{directory} is not a directory")
                os.rename(parts[-1], aside, src_dir_fd=parent, dst_dir_fd=trash)
        except FileNotFoundError:
            return None
        return self.root / "trash" / aside

    def _from_trash(self, aside: Path, directory: Path) -> bool:
        """Put an entry :meth:`_to_trash` moved back (a hold landed meanwhile); False when it cannot."""
        parts = directory.relative_to(self.root).parts
        try:
            with nofollow.opened(self.root, *parts[:-1]) as parent, nofollow.opened(self.root, "trash") as trash:
                os.rename(aside.name, parts[-1], src_dir_fd=trash, dst_dir_fd=parent)
            return True
        except (OSError, ImagekitError):
            return False

    def _drop_trash(self, aside: Path, directory: Path) -> None:
        """Remove what :meth:`_to_trash` moved, then the entry's image and format directories if empty."""
        with contextlib.suppress(OSError, ImagekitError), nofollow.opened(self.root, "trash") as trash:
            nofollow.try_remove_tree(trash, aside.name)
        parts = directory.relative_to(self.root).parts
        for depth in (len(parts) - 1, len(parts) - 2):      # <format>/, then <image hex>/
            with contextlib.suppress(OSError, ImagekitError), nofollow.opened(self.root, *parts[:depth - 1]) as up:
                os.rmdir(parts[depth - 1], dir_fd=up)

    def evict(self, entry: Entry) -> bool:
        """Remove ``entry`` unless it is held; True when it went. An entry this process may not
        move is kept and noted in :attr:`refused`."""
        slug = self.slug(entry)
        if self.holds.live_by_slug().get(slug):
            return False
        try:
            aside = self._to_trash(entry.dir)
        except OSError as exc:
            self.refused.append((entry.dir, exc.strerror or str(exc)))
            return False
        except ImagekitError as exc:
            self.refused.append((entry.dir, exc.message))
            return False
        if aside is None:
            return False
        if self.holds.live_by_slug().get(slug):   # a hold landed between the check and the move
            if self._from_trash(aside, entry.dir):
                return False
            # else an equal entry was published in its place; holders' open files stay valid
        self._drop_trash(aside, entry.dir)
        return True

    def gc(self, max_size: int) -> list[Entry]:
        """Evict least recently used entries until the store holds at most ``max_size`` bytes.

        Held entries and entries being written are never evicted, so the store may stay
        above ``max_size``. Sweeps dead owners' temporaries and locks first.
        """
        self.sweep()
        entries = sorted(self.entries(), key=lambda e: e.last_used)
        self.holds.sweep({self.slug(e) for e in entries})
        total = sum(e.bytes for e in entries)
        evicted = []
        for entry in entries:
            if total <= max_size:
                break
            if self.evict(entry):
                total -= entry.bytes
                evicted.append(entry)
        return evicted
