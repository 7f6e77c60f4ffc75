"""The Store: look up, create, publish, sweep and evict entries (see the package docstring)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from imagekit import owners
from imagekit.errors import ImagekitError, IntegrityError, NoSpaceError, UsageError
from imagekit.export.store import locks, notices
from imagekit.export.store.entries import META, Entry, meta_for, read_entry
from imagekit.export.store.holds import HOLD_MAX_AGE, Holds, check_name
from imagekit.export.store.keys import (FORMAT_VERSION, ID_RE, SUFFIX, StoreKey, content_neutral,
                                        default_root, make_key)
from imagekit.export.store.modes import Modes
from imagekit.export.store.outputs import need_space
from imagekit.export.store.trust import Trust, UntrustedEntry, UntrustedStore
from imagekit.export.store.verify import Stamps, sha256_file, verify_file

TMP_STALE = 3600.0          # another namespace's or host's temp dir untouched this long is removed
SUBDIRS = ("entries", "tmp", "locks", "trash")
PUBLIC = ("holds", "used")   # where readers write
_ENOSPC_TEXT = os.strerror(errno.ENOSPC)


class EntryGone(ImagekitError):
    """The entry was evicted between finding it and holding it: look it up again."""


class NotPublisher(ImagekitError):
    """This process may read the store but not publish into it."""


@dataclass
class _Made:
    sha256: str
    tool: str = ""


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on directories; the rename is still atomic
    finally:
        os.close(fd)


def no_space(exc: BaseException) -> bool:
    """Did this failure come from a full file system (our write, or a tool's message)?"""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(exc, ImagekitError) and (_ENOSPC_TEXT in str(exc) or "ENOSPC" in str(exc))


def _newest_mtime(path: Path) -> float:
    """The latest mtime of a directory and what is directly in it (a writer's last sign of life)."""
    newest = 0.0
    with contextlib.suppress(OSError):
        newest = os.lstat(path).st_mtime
        for child in os.scandir(path):
            with contextlib.suppress(OSError):
                newest = max(newest, child.stat(follow_symlinks=False).st_mtime)
    return newest


def _scandirs(path: Path) -> list[os.DirEntry]:
    """The real subdirectories of ``path`` (never through a symbolic link)."""
    try:
        return [d for d in os.scandir(path) if d.is_dir(follow_symlinks=False)]
    except OSError:
        return []


class Store:
    """A store directory. ``Store.open()`` uses ``$IMAGEKIT_STORE`` or the user's cache."""

    def __init__(self, root: Path, trust: Trust | None = None, modes: Modes | None = None) -> None:
        self.root = root
        self.trust = trust if trust is not None else Trust.of(root)
        self.modes = modes if modes is not None else _modes_of(root, self.trust)
        self.lock_stale = locks.LOCK_STALE
        self.tmp_stale = TMP_STALE
        self.poll = 0.2          # seconds between checks while another process converts,
        self.poll_max = 2.0      # growing to this
        self.clock = locks.Clock(root / "tmp")
        self.holds = Holds(root / "holds", root / "used", self.clock)
        self.stamps = Stamps()
        self.refused: list[tuple[Path, str]] = []   # what gc could not evict, and why

    @property
    def hold_max_age(self) -> float:
        return self.holds.max_age

    @hold_max_age.setter
    def hold_max_age(self, value: float) -> None:
        self.holds.max_age = value

    @classmethod
    def open(cls, root: str | Path | None = None, *, create: bool = True) -> "Store":
        """Open (and with ``create``, make) the store at ``root``; UntrustedStore when someone
        outside its publishers could change it, UsageError when it is missing or not a directory."""
        given = Path(root).expanduser() if root is not None else default_root()
        path = Path(os.path.realpath(given))
        try:
            if not path.exists():
                if not create:
                    raise UsageError(f"export store {path} does not exist",
                                     f"create it: imagekit store --store {path} init [--shared --group GROUP]")
                private = Modes.private()
                private.makedirs(path, Path(path.anchor))   # never group- or world-writable: see .trust
            elif not path.is_dir():
                raise UsageError(f"export store {path} is not a directory",
                                 "point --store or IMAGEKIT_STORE at a directory")
            trust = Trust.of(path)
            modes = _modes_of(path, trust)
            if create and trust.me in (0, trust.owner):
                for sub in SUBDIRS:
                    modes.mkdir(path / sub)
                for sub in PUBLIC:
                    modes.mkdir(path / sub, modes.public_dir)
        except OSError as exc:
            if no_space(exc):
                raise NoSpaceError(f"no space to create the export store {path}") from None
            raise ImagekitError(f"cannot create the export store {path}: {exc.strerror}",
                                "choose another with --store DIR or IMAGEKIT_STORE, or --no-store") from None
        return cls(path, trust, modes)

    # --- keys and lookups ----------------------------------------------------------------------

    def key(self, image_id: str, fmt: str, preset: str, options: tuple[str, ...] = ()) -> StoreKey:
        return make_key(image_id, fmt, preset, options)

    def _format_dir(self, image_id: str, fmt: str) -> Path:
        return self.root / "entries" / "sha256" / image_id.split(":", 1)[-1] / fmt

    def entry_dir(self, key: StoreKey) -> Path:
        return self._format_dir(key.image_id, key.format) / key.name

    def slug(self, entry: Entry | Path) -> str:
        directory = entry.dir if isinstance(entry, Entry) else Path(entry)
        if directory.name.startswith("image."):   # the entry's file, not its directory
            directory = directory.parent
        parts = directory.parts
        return f"{parts[-3]}.{parts[-2]}.{parts[-1]}"

    def verify(self, entry: Entry) -> None:
        """UntrustedEntry or IntegrityError unless ``entry`` is what a publisher recorded:
        written only by publishers (:mod:`.trust`) and holding the recorded bytes (:mod:`.verify`)."""
        self.trust.check_entry(entry.dir, [entry.path, entry.dir / META])
        verify_file(entry.path, entry.sha256, entry.bytes, self.stamps)

    def verified(self, entry: Entry | None) -> Entry | None:
        """``entry`` when it verifies; else None, with a warning saying why it is not served."""
        if entry is None:
            return None
        try:
            self.verify(entry)
        except (UntrustedEntry, IntegrityError) as exc:
            notices.warn(f"not serving {exc.message}")
            return None
        except FileNotFoundError:
            return None      # evicted meanwhile
        return entry

    def lookup(self, key: StoreKey) -> Entry | None:
        """The verified entry for ``key``, marked as used now; None when there is none (or it does
        not verify: a warning says why)."""
        entry = read_entry(self.entry_dir(key), key.format)
        if entry is None or entry.key != key:
            return None
        entry = self.verified(entry)
        if entry is not None:
            self.touch(entry)
        return entry

    def servable(self, image_id: str, fmt: str = "enroot") -> list[Entry]:
        """Entries of ``image_id`` a plain reference may be served from, newest use first: this
        imagekit's format version, and options that leave the files as a plain export makes them
        (never a ``--squash-opt`` variant). Not yet verified: :meth:`verified` each."""
        return [e for e in find(self, image_id, fmt) if content_neutral(e.options)]

    def touch(self, entry: Entry) -> None:
        """Mark ``entry`` used now: its directory's mtime (the LRU clock), or, for a reader that may
        not write it, its mark in ``used/``."""
        try:
            os.utime(entry.dir, follow_symlinks=False)
            entry.last_used = time.time()
        except OSError:
            self.holds.mark_used(self.slug(entry))

    def entries(self) -> list[Entry]:
        """Every readable entry (any version), with ``last_used`` counting readers' use marks."""
        used = self.holds.last_used()
        out = []
        for image in _scandirs(self.root / "entries" / "sha256"):
            if not ID_RE.fullmatch(image.name):
                continue
            for fmt in _scandirs(Path(image.path)):
                if fmt.name not in SUFFIX:
                    continue
                for directory in _scandirs(Path(fmt.path)):
                    entry = read_entry(Path(directory.path), fmt.name)
                    if entry is not None:
                        entry.last_used = max(entry.last_used, used.get(self.slug(entry), 0.0))
                        out.append(entry)
        return out

    # --- creating ------------------------------------------------------------------------------

    def _need_publisher(self) -> None:
        if not self.trust.can_publish():
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
        while True:
            entry = self.lookup(key)
            if entry is not None:
                return entry, False
            if self._take_lock(lock):
                try:
                    entry = self.lookup(key)   # published between our lookup and our lock
                    if entry is not None:
                        return entry, False
                    return self._create(key, make, lock, sha256, extra)
                finally:
                    locks.drop(lock)
            holder = locks.owner(lock)
            if holder is not None and locks.stale(lock, holder, self.clock, self.lock_stale):
                locks.break_(lock, self.root / "trash")
                continue
            if progress is not None and holder and holder != told:
                told = holder
                progress(f"waiting for {holder} to finish converting {key.image_id[:19]} ({key.format})")
            time.sleep(delay)
            delay = min(delay * 1.5, self.poll_max)   # many waiting nodes: fewer stats on NFS

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

        def copy(dest: Path) -> _Made:
            h = hashlib.sha256()
            with open(source, "rb") as src, open(dest, "wb") as out:
                while chunk := src.read(4 << 20):
                    h.update(chunk)
                    out.write(chunk)
            return _Made(h.hexdigest(), "add_file")

        entry, _ = self.get_or_create(key, copy, sha256=sha256)
        return entry

    def _create(self, key: StoreKey, make: Callable[[Path], Any], lock: Path,
                expect: str | None, extra: dict[str, Any] | None = None) -> tuple[Entry, bool]:
        tmp = self.root / "tmp" / f"{key.slug}@{owners.me()}@{os.urandom(6).hex()}"
        self.modes.mkdir(tmp)
        data = tmp / f"image{SUFFIX[key.format]}"
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
                meta = meta_for(key, digest, st.st_size, getattr(made, "tool", "") or "", extra or {})
                fd = os.open(tmp / META, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                try:
                    os.write(fd, json.dumps(meta, sort_keys=True).encode())
                    self.modes.fix_file(fd)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                _fsync_dir(tmp)
                self.stamps.record(st, digest)    # this process wrote these bytes: no hash on its next hit
                return self._publish(key, tmp)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if no_space(exc):
                raise NoSpaceError(f"the export store {self.root} ran out of space while writing "
                                   f"{key.image_id[:19]} ({key.format}); nothing was stored",
                                   "free space (imagekit store gc --max-size SIZE), or point --store "
                                   "elsewhere") from None
            raise

    def _publish(self, key: StoreKey, tmp: Path) -> tuple[Entry, bool]:
        final = self.entry_dir(key)
        os.utime(tmp)   # its mtime becomes the entry's first "last used"
        for _ in range(5):
            try:
                self.modes.makedirs(final.parent, self.root / "entries")
                os.rename(tmp, final)
            except FileNotFoundError:
                continue   # a gc removed an empty parent meanwhile: make it again
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                existing = self.lookup(key)
                if existing is not None:   # another converter won (a broken lock): keep theirs
                    shutil.rmtree(tmp, ignore_errors=True)
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
            _fsync_dir(final.parent)
            entry = read_entry(final, key.format)
            if entry is None:
                raise ImagekitError(f"{final} vanished right after it was published", "export again")
            return entry, True
        raise ImagekitError(f"could not publish {final}", "is something else editing the store?")

    # --- sweeping, holds, eviction ---------------------------------------------------------------

    def _owner_gone(self, token: str, path: Path) -> bool:
        if not locks.is_token(token):
            return False
        if owners.local(token):
            return not owners.alive(token)
        return self.clock.age(_newest_mtime(path)) > self.tmp_stale

    def sweep(self) -> list[Path]:
        """Remove temporaries, locks and trash of dead owners; returns what went. Only what this
        process may remove: a reader of a shared store sweeps nothing there."""
        removed: list[Path] = []
        for sub in ("tmp", "trash"):
            try:
                items = list(os.scandir(self.root / sub))
            except OSError:
                continue
            for item in items:
                parts = item.name.split("@")
                if len(parts) >= 3 and self._owner_gone(parts[-2], Path(item.path)):
                    with contextlib.suppress(OSError):
                        if item.is_dir(follow_symlinks=False):
                            shutil.rmtree(item.path)     # fd-based: never follows a link inside
                        else:
                            os.unlink(item.path)
                        removed.append(Path(item.path))
        lock_dir = self.root / "locks"
        try:
            lock_items = list(os.scandir(lock_dir))
        except OSError:
            lock_items = []
        for item in lock_items:
            lock = Path(item.path)
            if item.name.endswith(".lock"):
                holder = locks.owner(lock)
                if holder is not None and locks.stale(lock, holder, self.clock, self.lock_stale):
                    with contextlib.suppress(OSError):
                        locks.break_(lock, self.root / "trash")
                        removed.append(lock)
            elif item.name.endswith(".part") and item.name.startswith("."):
                token = item.name[1:].split(".lock.", 1)[-1].rsplit(".", 2)[0]
                if self._owner_gone(token, lock):
                    with contextlib.suppress(OSError):
                        lock.unlink()
                        removed.append(lock)
        return removed

    def hold(self, entry: Entry | Path, name: str | None = None) -> Path:
        """Keep ``entry`` from eviction until :meth:`release`; returns the hold file.

        ``name`` defaults to this process's owner token (live while the process is).
        Any other name (e.g. ``slurm-JOB.STEP@HOST``) is live until released or
        ``hold_max_age`` old. EntryGone when the entry was evicted meanwhile; HoldRefused
        when this process may not write the store's holds/.
        """
        data = entry.path if isinstance(entry, Entry) else Path(entry)
        name = name or owners.me()
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
        self.holds.release(name or owners.me(), slug)

    def held(self, entry: Entry | Path) -> list[str]:
        """The live holds on ``entry`` (an Entry, or an entry's directory), by name."""
        return self.holds.live_by_slug().get(self.slug(entry), [])

    def _to_trash(self, directory: Path) -> Path | None:
        aside = self.root / "trash" / f"{directory.name}@{owners.me()}@{os.urandom(4).hex()}"
        try:
            st = os.lstat(directory)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            raise ImagekitError(f"{directory} is not a directory")
        try:
            os.rename(directory, aside)
        except FileNotFoundError:
            return None
        return aside

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
        if aside is None:
            return False
        if self.holds.live_by_slug().get(slug):   # a hold landed between the check and the move
            try:
                os.rename(aside, entry.dir)
                return False
            except OSError:
                pass   # an equal entry was published in its place; holders' open files stay valid
        shutil.rmtree(aside, ignore_errors=True)
        with contextlib.suppress(OSError):   # empty image/format directories
            entry.dir.parent.rmdir()
            entry.dir.parent.parent.rmdir()
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


def _modes_of(root: Path, trust: Trust) -> Modes:
    if trust.group is None:
        return Modes.private()
    readers_all = bool(os.lstat(root).st_mode & 0o001)
    return Modes.shared_by(trust.group, readers_all)


def find(store: Store, image_id: str, fmt: str, *, any_version: bool = False) -> list[Entry]:
    """Every entry of ``image_id`` in ``fmt`` (any preset and options), newest use first.

    Only entries of the current FORMAT_VERSION unless ``any_version``. Does not mark them used,
    and does not verify them (:meth:`Store.verified` does).
    """
    key = store.key(image_id, fmt, "x")
    found = []
    for directory in _scandirs(store._format_dir(key.image_id, fmt)):
        entry = read_entry(Path(directory.path), fmt)
        if entry is not None and (any_version or entry.version == FORMAT_VERSION[fmt]):
            found.append(entry)
    return sorted(found, key=lambda e: e.last_used, reverse=True)


__all__ = ["Store", "EntryGone", "NotPublisher", "UntrustedStore", "find", "HOLD_MAX_AGE", "no_space"]
