"""Creating entries: one converter per key across processes (a lock with a heartbeat), then an atomic publish."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any, Callable

from imagekit.util import leases
from imagekit.util.errors import ImagekitError, IntegrityError, NoSpaceError, UsageError
from imagekit.export.store import locks, nofollow, wake
from imagekit.export.store.base import Made, NotPublisher, fsync_dir, no_space
from imagekit.export.store.entries import META, Entry, meta_for, read_entry
from imagekit.export import formats
from imagekit.export.store.keys import StoreKey
from imagekit.export.store.delivery import need_space
from imagekit.export.store.verify import seal_of, sha256_file


class Creating:
    """The Store's get-or-create and publish (mixed into :class:`Store`)."""

    def _need_publisher(self) -> None:
        if not self.trust.can_publish():
            if self.trust.me == 0:
                raise NotPublisher(f"root does not publish into the export store {self.root}: "
                                   f"{self.trust.redirectable()}, and export tools write their files by path",
                                   "publish as the store's owner or a member of its group, or make every "
                                   "directory down to its tmp/ root's and not writable by others")
            raise NotPublisher(f"uid {os.geteuid()} may read the export store {self.root} but not publish "
                               f"into it (its publishers are {self.trust.publishers()})",
                               "use your own store (unset IMAGEKIT_STORE or --store), or publish as a "
                               "member of the store's group")

    def get_or_create(self, key: StoreKey, make: Callable[[Path], Any], *,
                      progress: Callable[[str], None] | None = None,
                      sha256: str | None = None,
                      extra: dict[str, Any] | None = None) -> tuple[Entry, bool]:
        """The entry for ``key``, made by ``make(path)`` if there is none; True when made here.

        ``make`` writes the file at ``path`` (in the store's temporary directory) and may
        return an object with ``sha256`` (hex) and ``tool`` (an ExportResult) to spare a
        re-read. When ``sha256`` is given, the file must have it (IntegrityError otherwise).
        ``extra`` goes into entry.json (where the bytes came from).
        Across processes and nodes one ``make`` runs; the others wait for its entry.
        ``progress(message)`` hears about waiting. A full file system raises NoSpaceError;
        nothing partial is ever published. NotPublisher when this process may only read here.
        """
        entry = self.lookup(key)
        if entry is not None:
            return entry, False
        self._need_publisher()
        self.sweep()
        lock = self.root / "locks" / f"{key.slug}.lock"
        told = None
        delay = self.poll
        waiter: wake.Waiter | None = None
        while True:
            entry = self.lookup(key)
            if entry is not None:
                return entry, False
            if self._take_lock(lock):
                try:
                    entry = self.lookup(key)   # published between our lookup and our lock
                    if entry is not None:
                        return entry, False
                    with wake.ringing(lock, self.modes.file):
                        return self._create(key, make, lock, sha256, extra)
                finally:
                    locks.drop(lock)
            holder = locks.owner(lock)
            if holder is not None and locks.stale(lock, holder, self.clock, self.lock_stale):
                locks.break_(lock, self.root / "trash")
                continue
            if progress is not None and holder and holder != told:
                told = holder
                self.waits += 1
                progress(f"waiting for {holder} to finish converting {key.image_id[:19]} ({key.format})")
            if waiter is None or waiter.done.is_set():
                waiter = wake.Waiter(lock)
            # Woken the moment the converter lets go; between, a look at the lock's staleness every
            # `check` s (its owner's heartbeat), not a lookup every 2 s per waiting node.
            waiter.wait(self.check, delay)
            delay = min(delay * 1.5, self.poll_max)   # no doorbell: many waiting nodes, fewer stats on NFS

    def _take_lock(self, lock: Path) -> bool:
        try:
            return locks.take(lock, self.modes.file)
        except PermissionError:
            raise NotPublisher(f"cannot lock {lock}: permission denied",
                               f"the publishers of {self.root} are {self.trust.publishers()}") from None

    def add_file(self, key: StoreKey, path: Path, sha256: str | None = None) -> Entry:
        """Publish a file obtained elsewhere (a pulled artifact) as ``key``'s entry, copying it.

        With ``sha256`` the copy must match it (IntegrityError, nothing kept, otherwise).
        An existing entry is kept and returned as it is.
        """
        source = Path(path)
        try:
            size = source.stat().st_size
        except OSError as exc:
            raise UsageError(f"cannot read {source}: {exc.strerror}") from None
        need_space(self.root / "tmp", size, f"{source.name} in the store")

        def copy(dest: Path) -> Made:
            h = hashlib.sha256()
            with open(source, "rb") as src, open(dest, "wb") as out:
                while chunk := src.read(4 << 20):
                    h.update(chunk)
                    out.write(chunk)
            return Made(h.hexdigest(), "add_file")

        entry, _ = self.get_or_create(key, copy, sha256=sha256)
        return entry

    def _create(self, key: StoreKey, make: Callable[[Path], Any], lock: Path,
                expect: str | None, extra: dict[str, Any] | None = None) -> tuple[Entry, bool]:
        name = f"{key.slug}@{leases.me()}@{os.urandom(6).hex()}"
        tmp = self.root / "tmp" / name
        # 0700 until it is published: nobody else enters (or plants a name in) it while a tool
        # writes there by path; tmp/ is sticky in a shared store, so nobody renames it either.
        with nofollow.opened(self.root, "tmp") as tmp_fd:
            os.mkdir(name, 0o700, dir_fd=tmp_fd)
        data = tmp / f"image{formats.get(key.format).suffix}"
        try:
            with locks.heartbeat(lock, tmp):
                made = make(data)
                st = os.lstat(data) if os.path.lexists(data) else None
                if st is None or not stat.S_ISREG(st.st_mode):
                    raise ImagekitError(f"the export for {key.image_id} wrote no file")
                digest = getattr(made, "sha256", None) or sha256_file(data)
                if expect is not None and digest != expect.split(":")[-1].lower():
                    raise IntegrityError(f"{key.format} file for {key.image_id} has sha256:{digest}, "
                                         f"expected {expect}", "nothing was stored; fetch it again")
                fd = os.open(data, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    self.modes.fix_file(fd)      # read-only: outputs are hard links to it
                    os.fsync(fd)
                    st = os.fstat(fd)
                finally:
                    os.close(fd)
                meta = meta_for(key, digest, st.st_size, getattr(made, "tool", "") or "", extra or {},
                                seal_of(st))
                fd = os.open(tmp / META, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                try:
                    os.write(fd, json.dumps(meta, sort_keys=True).encode())
                    self.modes.fix_file(fd)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                fsync_dir(tmp)
                self.stamps.record(st, digest)    # this process wrote these bytes: no hash on its next hit
                return self._publish(key, name)
        except BaseException as exc:
            with contextlib.suppress(OSError), nofollow.opened(self.root, "tmp") as tmp_fd:
                nofollow.remove_tree(tmp_fd, name)
            if no_space(exc):
                raise NoSpaceError(f"the export store {self.root} ran out of space while writing "
                                   f"{key.image_id[:19]} ({key.format}); nothing was stored",
                                   "free space (imagekit store gc --max-size SIZE), or point --store "
                                   "elsewhere") from None
            raise

    def _publish(self, key: StoreKey, name: str) -> tuple[Entry, bool]:
        """Rename ``tmp/name`` to the entry's directory. Every directory on the way is opened (or
        made) without following a link (:mod:`.nofollow`), and the rename is relative to them."""
        final = self.entry_dir(key)
        parts = final.relative_to(self.root / "entries").parts
        with nofollow.opened(self.root, "tmp") as tmp_fd:
            fd = nofollow.open_dir(name, tmp_fd, self.root / "tmp" / name)
            try:
                if os.fstat(fd).st_uid != os.geteuid():
                    raise ImagekitError(f"{self.root / 'tmp' / name} was replaced while it was written",
                                        "someone else is changing the store: export again")
                os.utime(fd)   # its mtime becomes the entry's first "last used"
                nofollow.set_mode(fd, self.modes.entry_dir, self.modes.group)   # whole now: open it to the group
            finally:
                os.close(fd)
            for _ in range(5):
                try:
                    with nofollow.opened(self.root, "entries") as entries_fd:
                        parent = self.modes.makedirs_at(entries_fd, parts[:-1], self.root / "entries")
                    try:
                        os.rename(name, parts[-1], src_dir_fd=tmp_fd, dst_dir_fd=parent)
                        with contextlib.suppress(OSError):
                            os.fsync(parent)
                    finally:
                        os.close(parent)
                except FileNotFoundError:
                    continue   # a gc removed an empty parent meanwhile: make it again
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                    existing = self.lookup(key)
                    if existing is not None:   # another converter won (a broken lock): keep theirs
                        nofollow.try_remove_tree(tmp_fd, name)
                        return existing, False
                    # Not a verified entry (made by hand, damaged, or by someone not a publisher):
                    # replace it. The rename fails (EACCES) when that is not ours to move.
                    try:
                        self._to_trash(final)
                    except PermissionError:
                        raise ImagekitError(f"{final} is in the way and not a verified entry, and this process "
                                            "may not move it", f"ask a publisher of {self.root} to remove it "
                                            "(imagekit store gc)") from None
                    continue
                entry = read_entry(final, key.format)
                if entry is None:
                    raise ImagekitError(f"{final} vanished right after it was published", "export again")
                return entry, True
        raise ImagekitError(f"could not publish {final}", "is something else editing the store?")
