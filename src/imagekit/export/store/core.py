"""The Store: look up, create, publish, sweep and evict entries (see the package docstring).

The class is put together here from its parts: lookups in this module, creating in :mod:`creating`,
sweeping, holds and eviction in :mod:`housekeeping`; what they share is in :mod:`base`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from imagekit.util.errors import ImagekitError, IntegrityError, NoSpaceError, UsageError
from imagekit.export import formats
from imagekit.export.store import locks, nofollow, notices
from imagekit.export.store.base import PUBLIC, SUBDIRS, TMP_STALE, EntryGone, NotPublisher, no_space, scandirs
from imagekit.export.store.creating import Creating
from imagekit.export.store.entries import META, Entry, read_entry
from imagekit.export.store.holds import HOLD_MAX_AGE, Holds
from imagekit.export.store.housekeeping import Housekeeping
from imagekit.export.store.keys import ID_RE, StoreKey, content_neutral, default_root, make_key
from imagekit.export.store.modes import Modes
from imagekit.export.store.trust import Trust, UntrustedEntry, UntrustedStore
from imagekit.export.store.verify import Stamps, verify_file


class Store(Creating, Housekeeping):
    """A store directory. ``Store.open()`` uses ``$IMAGEKIT_STORE`` or the user's cache."""

    def __init__(self, root: Path, trust: Trust | None = None, modes: Modes | None = None) -> None:
        self.root = root
        self.trust = trust if trust is not None else Trust.of(root)
        self.modes = modes if modes is not None else _modes_of(root, self.trust)
        self.lock_stale = locks.LOCK_STALE
        self.tmp_stale = TMP_STALE
        self.poll = 0.2          # seconds between checks while another process converts,
        self.poll_max = 2.0      # growing to this (where the converter rings no doorbell: .wake)
        self.check = locks.HEARTBEAT / 2   # with a doorbell: how often a waiter checks the lock is alive
        self.waits = 0           # how many conversions by others this Store waited for
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
        path = resolved(root)
        try:
            if not path.exists():
                if not create:
                    raise UsageError(f"export store {path} does not exist",
                                     f"create it: imagekit store --store {path} init [--shared --group GROUP]")
                make_private(path)      # never group- or world-writable: see .trust
            elif not path.is_dir():
                raise UsageError(f"export store {path} is not a directory",
                                 "point --store or IMAGEKIT_STORE at a directory")
            trust = Trust.of(path)
            modes = _modes_of(path, trust)
            if create and trust.me in (0, trust.owner):
                _make_top(path, modes)
        except OSError as exc:
            if no_space(exc):
                raise NoSpaceError(f"no space to create the export store {path}") from None
            raise _unusable(path, exc) from None
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

    def verify(self, entry: Entry, *, full: bool = False) -> None:
        """UntrustedEntry or IntegrityError unless ``entry`` is what a publisher recorded:
        written only by publishers (:mod:`.trust`) and holding the recorded bytes (:mod:`.verify`;
        ``full``: hashed whatever its seal and stamps say)."""
        self.trust.check_entry(entry.dir, [entry.path, entry.dir / META])
        verify_file(entry.path, entry.sha256, entry.bytes, self.stamps, entry.seal, full=full)

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
            with nofollow.opened(self.root, *entry.dir.relative_to(self.root).parts) as fd:
                os.utime(fd)
            entry.last_used = time.time()
        except (OSError, ValueError, ImagekitError):
            self.holds.mark_used(self.slug(entry))

    def entries(self) -> list[Entry]:
        """Every readable entry (any version), with ``last_used`` counting readers' use marks."""
        used = self.holds.last_used()
        out = []
        for image in scandirs(self.root / "entries" / "sha256"):
            if not ID_RE.fullmatch(image.name):
                continue
            for fmt in scandirs(Path(image.path)):
                if fmt.name not in formats.FORMATS:
                    continue
                for directory in scandirs(Path(fmt.path)):
                    entry = read_entry(Path(directory.path), fmt.name)
                    if entry is not None:
                        entry.last_used = max(entry.last_used, used.get(self.slug(entry), 0.0))
                        out.append(entry)
        return out


def resolved(root: str | Path | None) -> Path:
    """The store's path (default: the user's own), its links resolved only where nobody but root and
    this user could have made or changed them (:func:`.nofollow.resolve`); UntrustedStore otherwise."""
    path = root if root is not None else default_root()
    try:
        return nofollow.resolve(path)
    except nofollow.NotADirectory as exc:
        raise UntrustedStore(exc.message, exc.hint) from None
    except OSError as exc:      # e.g. a shared file system whose client died (ENOTCONN): the store's error
        raise _unusable(path, exc) from None


def _unusable(path: str | Path, exc: OSError) -> ImagekitError:
    return ImagekitError(f"cannot use the export store {path}: {exc.strerror}",
                         "choose another with --store DIR or IMAGEKIT_STORE, or --no-store")


def make_private(path: Path) -> None:
    """``path`` and its missing parents, each ``0755`` less the umask, made below the nearest existing
    directory without following a link (:mod:`.nofollow`)."""
    missing = []
    top = path
    while not os.path.lexists(top):
        missing.append(top.name)
        top = top.parent
    with nofollow.opened(top) as fd:
        os.close(Modes.private().makedirs_at(fd, tuple(reversed(missing)), top))


def _make_top(root: Path, modes: Modes) -> None:
    """The store's missing top-level directories, through descriptors (:mod:`.nofollow`); a shared
    store's ``tmp/`` and ``entries/`` made by an older imagekit get their sticky bit (:meth:`Modes.top`)."""
    with nofollow.opened(root) as fd:
        for sub in (*SUBDIRS, *PUBLIC):
            made = modes.make_at(fd, sub, root / sub, modes.top(sub))
            if made is not None:
                os.close(made)
            elif sub in ("tmp", "entries") and modes.shared:
                with nofollow.opened(root, sub) as top:
                    nofollow.add_sticky(top)


def _modes_of(root: Path, trust: Trust) -> Modes:
    if trust.group is None:
        return Modes.private()
    readers_all = bool(os.lstat(root).st_mode & 0o001)
    return Modes.shared_by(trust.group, readers_all)


def find(store: Store, image_id: str, fmt: str, *, any_version: bool = False) -> list[Entry]:
    """Every entry of ``image_id`` in ``fmt`` (any preset and options), newest use first.

    Only entries of the format's current store version unless ``any_version``. Does not mark them used,
    and does not verify them (:meth:`Store.verified` does).
    """
    key = store.key(image_id, fmt, "x")
    found = []
    for directory in scandirs(store._format_dir(key.image_id, fmt)):
        entry = read_entry(Path(directory.path), fmt)
        if entry is not None and (any_version or entry.version == formats.get(fmt).store_version):
            found.append(entry)
    return sorted(found, key=lambda e: e.last_used, reverse=True)


__all__ = ["Store", "EntryGone", "NotPublisher", "UntrustedStore", "find", "HOLD_MAX_AGE", "no_space"]
