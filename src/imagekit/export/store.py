"""The content-addressed export store: convert an image once, reuse the file everywhere.

An entry is one exported file, keyed by what determines its contents:

- the image ID (``sha256:…``, the digest of the image's config, which is also the
  ``config.digest`` of its registry manifest, so a node without Docker finds entries
  from the manifest alone);
- the format (``enroot`` → ``.sqsh``, ``sif``), the compression preset, and the options
  that change the bytes (explicit squashfs options, tool, ``SOURCE_DATE_EPOCH``, ...);
- imagekit's export format version (``FORMAT_VERSION``), bumped whenever imagekit
  writes a format differently, so older entries are never served for newer code.

Layout under the root (``$IMAGEKIT_STORE``, default ``${XDG_CACHE_HOME:-~/.cache}/imagekit/store``)::

    entries/sha256/<hex>/<format>/<preset>-v<version>-<options hash>/
        image.sqsh | image.sif      the file (read-only; outputs are hard links to it)
        entry.json                  the key, sha256, bytes, created, tool
        holds/NAME                  readers that must not lose it (see "Holds")
    tmp/<key>@<owner>@<random>/     entries being written
    locks/<key>.lock                who is converting a key (its owner token)
    trash/                          entries being deleted

so "every entry of this image in this format" is one directory listing. The
directory's mtime is the entry's last use (LRU for ``gc``).

Publication. An entry is built in ``tmp/`` on the store's own file system, its
data and ``entry.json`` fsynced, and the whole directory renamed to its final
name. ``rename(2)`` of a directory is atomic on a local file system, on NFS (one
server operation) and on Lustre (one MDS operation), and it fails with
ENOTEMPTY/EEXIST when the final directory already exists, so the first publisher
wins and the others discard their copy. A reader therefore sees either no entry
or a complete one, whatever dies when.

Locking, and why correctness does not depend on it. Before converting, a process
creates ``locks/<key>.lock`` with ``O_CREAT|O_EXCL`` (atomic on NFSv3+ and Lustre)
holding its owner token (:mod:`imagekit.owners`: host, pid, process start time).
Others wait for the entry to appear. The converter touches the lock every
``HEARTBEAT`` seconds. A lock is broken when its owner is certainly dead (same
host, :func:`owners.alive`), or, for another host's lock, when it has not been
touched for ``lock_stale`` seconds (ages are measured against the file system's
clock where it has one, read by touching a file: NFS sets the server's time). If the lock is ever
wrong (a paused owner, a clock jump, two breakers racing), the only cost is a
second conversion: the atomic publication above still lets exactly one complete
file become the entry. The lock deduplicates work; it does not guard data.

Sweeping. ``tmp/`` directories, locks and ``trash/`` items name their owner; those
of dead owners on this host go at once, another host's after ``tmp_stale``
seconds without a heartbeat. Every conversion and ``gc`` sweeps.

Holds. A reader that needs an entry to outlive an eviction (a Pyxis job that
starts straight from the squashfs until ``release``) creates ``holds/NAME`` with
:meth:`Store.hold` and removes it with :meth:`Store.release`. A hold is live while
its owner process lives (NAME is an owner token of this host), or, for any other
name, until it is ``hold_max_age`` old (touch it to extend). ``gc`` never evicts
an entry with a live hold, nor anything still in ``tmp/``. Files already opened,
and hard-linked outputs, survive eviction anyway (the inode stays).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from imagekit import owners
from imagekit.errors import ImagekitError, IntegrityError, NoSpaceError, UsageError

# Bump a format's number whenever imagekit writes that format differently: entries
# made by older code are then neither served nor overwritten, and age out by LRU.
FORMAT_VERSION: dict[str, int] = {"enroot": 3, "sif": 2}
SUFFIX = {"enroot": ".sqsh", "sif": ".sif"}
HEARTBEAT = 10.0            # seconds between a converter's touches of its lock and temp dir
LOCK_STALE = 120.0          # another host's lock untouched this long is broken
TMP_STALE = 3600.0          # another host's temp dir untouched this long is removed
HOLD_MAX_AGE = 7 * 86400.0  # a named hold (not an owner token) lapses after this long
META = "entry.json"
_ID_RE = re.compile(r"(?:sha256:)?([0-9a-f]{64})")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_HOLD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+@-]*")
_ENOSPC_TEXT = os.strerror(errno.ENOSPC)


class EntryGone(ImagekitError):
    """The entry was evicted between finding it and holding it: look it up again."""


def default_root() -> Path:
    env = os.environ.get("IMAGEKIT_STORE")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "imagekit" / "store"


@dataclass(frozen=True)
class StoreKey:
    """What determines an entry's bytes. ``slug`` names it on disk."""

    image_id: str                 # sha256:<64 hex>
    format: str
    preset: str
    options: tuple[str, ...]
    version: int

    @property
    def hex(self) -> str:
        return self.image_id.split(":", 1)[1]

    @property
    def name(self) -> str:
        """The entry directory's name: preset, version and a hash of the options."""
        opts = hashlib.sha256(json.dumps(list(self.options)).encode()).hexdigest()[:12]
        return f"{self.preset}-v{self.version}-{opts}"

    @property
    def slug(self) -> str:
        """One flat file name for the whole key (locks, temporaries)."""
        return f"{self.hex}.{self.format}.{self.name}"


@dataclass
class Entry:
    """One published file in the store."""

    path: Path                    # the file itself
    image_id: str
    format: str
    preset: str
    options: tuple[str, ...]
    version: int                  # imagekit's export format version
    sha256: str                   # hex
    bytes: int
    created: float
    last_used: float
    tool: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return self.path.parent

    @property
    def key(self) -> StoreKey:
        return StoreKey(self.image_id, self.format, self.preset, self.options, self.version)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["path"] = str(self.path)
        d["options"] = list(self.options)
        return d


def _meta(key: StoreKey, sha256: str, size: int, tool: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {"image_id": key.image_id, "format": key.format, "preset": key.preset,
            "options": list(key.options), "version": key.version, "sha256": sha256,
            "bytes": size, "created": time.time(), "tool": tool, "extra": extra}


def _read_entry(directory: Path, fmt: str) -> Entry | None:
    """The entry in ``directory``, or None when there is none (or it is unreadable)."""
    try:
        meta = json.loads((directory / META).read_bytes())
        data = directory / f"image{SUFFIX[fmt]}"
        st_dir = os.stat(directory)
        if not data.is_file():
            return None
    except (OSError, ValueError):
        return None
    return Entry(path=data, image_id=meta["image_id"], format=meta["format"], preset=meta["preset"],
                 options=tuple(meta.get("options") or ()), version=int(meta["version"]),
                 sha256=meta["sha256"], bytes=int(meta["bytes"]), created=float(meta["created"]),
                 last_used=st_dir.st_mtime, tool=meta.get("tool") or "", extra=meta.get("extra") or {})


def _is_token(name: str) -> bool:
    return name.count("+") >= 2


def _this_host(token: str) -> bool:
    return token.rsplit("+", 2)[0] == socket.gethostname()


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


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _no_space(exc: BaseException) -> bool:
    """Did this failure come from a full file system (our write, or a tool's message)?"""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(exc, ImagekitError) and (_ENOSPC_TEXT in str(exc) or "ENOSPC" in str(exc))


def _need_space(directory: Path, size: int, what: str) -> None:
    """Refuse before writing a file of known ``size`` that would not fit (no estimate, no margin
    beyond a little metadata)."""
    from imagekit.export.output import free_bytes, human

    have = free_bytes(directory)
    if have < size + (1 << 20):
        raise NoSpaceError(f"not enough free space in {directory} for {what}: need {human(size)}, "
                           f"{human(have)} free", "free some space, or write elsewhere")


def _newest_mtime(path: Path) -> float:
    """The latest mtime of a directory and what is directly in it (a writer's last sign of life)."""
    newest = 0.0
    with contextlib.suppress(OSError):
        newest = path.stat().st_mtime
        for child in path.iterdir():
            with contextlib.suppress(OSError):
                newest = max(newest, child.stat().st_mtime)
    return newest


class Store:
    """A store directory. ``Store.open()`` uses ``$IMAGEKIT_STORE`` or the user's cache."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock_stale = LOCK_STALE
        self.tmp_stale = TMP_STALE
        self.hold_max_age = HOLD_MAX_AGE
        self.poll = 0.2          # seconds between checks while another process converts,
        self.poll_max = 2.0      # growing to this

    @classmethod
    def open(cls, root: str | Path | None = None) -> "Store":
        path = Path(root).expanduser() if root is not None else default_root()
        path = path.absolute()
        if path.exists() and not path.is_dir():
            raise UsageError(f"export store {path} is not a directory",
                             "point --store or IMAGEKIT_STORE at a directory")
        try:
            for sub in ("entries", "tmp", "locks", "trash"):
                (path / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if _no_space(exc):
                raise NoSpaceError(f"no space to create the export store {path}") from None
            raise ImagekitError(f"cannot create the export store {path}: {exc.strerror}",
                                "choose another with --store DIR or IMAGEKIT_STORE, or --no-store") from None
        return cls(path)

    # --- keys and lookups ----------------------------------------------------------------------

    def key(self, image_id: str, fmt: str, preset: str, options: tuple[str, ...] = ()) -> StoreKey:
        match = _ID_RE.fullmatch(image_id or "")
        if match is None:
            raise UsageError(f"{image_id!r} is not an image ID", "give the image's sha256:<64 hex> ID "
                             "(docker image inspect -f '{{.Id}}', or the manifest's config.digest)")
        if fmt not in SUFFIX:
            raise UsageError(f"unknown export format {fmt!r}", f"use one of: {', '.join(SUFFIX)}")
        if not _NAME_RE.fullmatch(preset or ""):
            raise UsageError(f"bad preset name {preset!r}", "letters, digits, '.', '_', '+', '-'")
        return StoreKey(f"sha256:{match.group(1)}", fmt, preset, tuple(str(o) for o in options),
                        FORMAT_VERSION[fmt])

    def _format_dir(self, image_id: str, fmt: str) -> Path:
        return self.root / "entries" / "sha256" / image_id.split(":", 1)[-1] / fmt

    def entry_dir(self, key: StoreKey) -> Path:
        return self._format_dir(key.image_id, key.format) / key.name

    def lookup(self, key: StoreKey) -> Entry | None:
        """The entry for ``key``, marked as used now; None when there is none."""
        directory = self.entry_dir(key)
        entry = _read_entry(directory, key.format)
        if entry is not None and entry.key == key:
            self.touch(entry)
            return entry
        return None

    def touch(self, entry: Entry) -> None:
        """Mark ``entry`` used now (its directory's mtime: the LRU clock)."""
        with contextlib.suppress(OSError):   # another user's entry in a shared store: LRU is best effort
            os.utime(entry.dir)
            entry.last_used = time.time()

    def entries(self) -> list[Entry]:
        out = []
        for fmt_dir in (self.root / "entries" / "sha256").glob("*/*"):
            if fmt_dir.name not in SUFFIX:
                continue
            for directory in fmt_dir.iterdir():
                entry = _read_entry(directory, fmt_dir.name)
                if entry is not None:
                    out.append(entry)
        return out

    # --- creating ------------------------------------------------------------------------------

    def get_or_create(self, key: StoreKey, make: Callable[[Path], Any], *,
                      progress: Callable[[str], None] | None = None,
                      sha256: str | None = None) -> tuple[Entry, bool]:
        """The entry for ``key``, made by ``make(path)`` if there is none; True when made here.

        ``make`` writes the file at ``path`` (in the store's temporary directory) and may
        return an object with ``sha256`` (hex) and ``tool`` (an ExportResult) to spare a
        re-read. When ``sha256`` is given, the file must have it (IntegrityError otherwise).
        Across processes and nodes one ``make`` runs; the others wait for its entry.
        ``progress(message)`` hears about waiting. A full file system raises NoSpaceError;
        nothing partial is ever published.
        """
        entry = self.lookup(key)
        if entry is not None:
            return entry, False
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
                    return self._create(key, make, lock, sha256)
                finally:
                    self._drop_lock(lock)
            holder = self._lock_owner(lock)
            if holder is not None and self._lock_is_stale(lock, holder):
                self._break(lock)
                continue
            if progress is not None and holder and holder != told:
                told = holder
                progress(f"waiting for {holder} to finish converting {key.image_id[:19]} ({key.format})")
            time.sleep(delay)
            delay = min(delay * 1.5, self.poll_max)   # many waiting nodes: fewer stats on NFS

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
        _need_space(self.root / "tmp", size, f"{source.name} in the store")

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
                expect: str | None) -> tuple[Entry, bool]:
        # mkdir, not mkdtemp (0700): the umask decides, so a group-shared store stays readable
        tmp = self.root / "tmp" / f"{key.slug}@{owners.me()}@{os.urandom(6).hex()}"
        tmp.mkdir(0o777)
        data = tmp / f"image{SUFFIX[key.format]}"
        try:
            with self._heartbeat(lock, tmp):
                made = make(data)
                if not data.is_file():
                    raise ImagekitError(f"the export for {key.image_id} wrote no file")
                digest = getattr(made, "sha256", None) or _sha256(data)
                if expect is not None and digest != expect.split(":")[-1].lower():
                    raise IntegrityError(f"{key.format} file for {key.image_id} has sha256:{digest}, "
                                         f"expected {expect}", "nothing was stored; fetch it again")
                mode = os.stat(data).st_mode & 0o555   # read-only: outputs are hard links to it
                os.chmod(data, mode | 0o444)
                _fsync_file(data)
                meta = _meta(key, digest, data.stat().st_size, getattr(made, "tool", "") or "", {})
                with open(tmp / META, "w") as fh:
                    json.dump(meta, fh, sort_keys=True)
                    fh.flush()
                    os.fsync(fh.fileno())
                _fsync_dir(tmp)
                return self._publish(key, tmp)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if _no_space(exc):
                raise NoSpaceError(f"the export store {self.root} ran out of space while writing "
                                   f"{key.image_id[:19]} ({key.format}); nothing was stored",
                                   "free space (imagekit store gc --max-size SIZE), or point --store "
                                   "elsewhere") from None
            raise

    def _publish(self, key: StoreKey, tmp: Path) -> tuple[Entry, bool]:
        final = self.entry_dir(key)
        os.utime(tmp)   # its mtime becomes the entry's first "last used"
        for _ in range(5):
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(tmp, final)
            except FileNotFoundError:
                continue   # a gc removed the empty parent meanwhile: make it again
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                existing = self.lookup(key)
                if existing is not None:   # another converter won (a broken lock): keep theirs
                    shutil.rmtree(tmp, ignore_errors=True)
                    return existing, False
                self._to_trash(final)      # not an entry (made by hand?): replace it
                continue
            _fsync_dir(final.parent)
            entry = _read_entry(final, key.format)
            assert entry is not None
            return entry, True
        raise ImagekitError(f"could not publish {final}", "is something else editing the store?")

    # --- locks ---------------------------------------------------------------------------------

    def _take_lock(self, lock: Path) -> bool:
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, f"{owners.me()}\n".encode())
        finally:
            os.close(fd)
        return True

    def _drop_lock(self, lock: Path) -> None:
        if self._lock_owner(lock) == owners.me():   # never someone's lock that broke ours
            lock.unlink(missing_ok=True)

    @staticmethod
    def _lock_owner(lock: Path) -> str | None:
        """The token in ``lock``; "" while its creator has not written it yet; None when no lock."""
        try:
            return lock.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError:
            return ""

    def _lock_is_stale(self, lock: Path, holder: str) -> bool:
        if _is_token(holder) and _this_host(holder):
            return not owners.alive(holder)
        try:
            return self._age(lock.stat().st_mtime) > self.lock_stale
        except FileNotFoundError:
            return False

    def _break(self, lock: Path) -> None:
        """Remove a stale lock: renamed aside first, so that two breakers cannot both remove it."""
        aside = self.root / "trash" / f"{lock.name}@{owners.me()}@{os.urandom(4).hex()}"
        with contextlib.suppress(FileNotFoundError):
            os.rename(lock, aside)
            aside.unlink(missing_ok=True)

    @contextlib.contextmanager
    def _heartbeat(self, lock: Path, tmp: Path) -> Iterator[None]:
        """Touch our lock and temp dir every HEARTBEAT s while converting: other hosts see we live."""
        paths = (lock, tmp)
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(HEARTBEAT):
                for p in paths:
                    if p.suffix == ".lock" and self._lock_owner(p) != owners.me():
                        continue   # broken and taken by another: never keep their lock alive
                    with contextlib.suppress(OSError):
                        os.utime(p)

        thread = threading.Thread(target=beat, name="imagekit-store-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _age(self, mtime: float) -> float:
        """Seconds since ``mtime`` by the file system's clock (a node's own clock may be skewed)."""
        clock = self.root / "locks" / ".clock"
        try:
            clock.touch()
            now = clock.stat().st_mtime
        except OSError:
            now = time.time()
        return now - mtime

    # --- sweeping, holds, eviction ---------------------------------------------------------------

    def _owner_gone(self, token: str, path: Path) -> bool:
        if not _is_token(token):
            return False
        if _this_host(token):
            return not owners.alive(token)
        return self._age(_newest_mtime(path)) > self.tmp_stale

    def sweep(self) -> list[Path]:
        """Remove temporaries, locks and trash of dead owners; returns what went."""
        removed = []
        for sub in ("tmp", "trash"):
            for item in (self.root / sub).iterdir():
                parts = item.name.split("@")
                if len(parts) >= 3 and self._owner_gone(parts[-2], item):
                    if item.is_dir() and not item.is_symlink():
                        shutil.rmtree(item, ignore_errors=True)
                    else:
                        item.unlink(missing_ok=True)
                    removed.append(item)
        for lock in (self.root / "locks").glob("*.lock"):
            holder = self._lock_owner(lock)
            if holder and _is_token(holder) and self._lock_is_stale(lock, holder):
                self._break(lock)
                removed.append(lock)
        return removed

    def hold(self, entry: Entry | Path, name: str | None = None) -> Path:
        """Keep ``entry`` from eviction until :meth:`release`; returns the hold file.

        ``name`` defaults to this process's owner token (live while the process is).
        Any other name (e.g. ``slurm-JOB.STEP@HOST``) is live until released or
        ``hold_max_age`` old. EntryGone when the entry was evicted meanwhile.
        """
        data = entry.path if isinstance(entry, Entry) else Path(entry)
        name = name or owners.me()
        if not _HOLD_RE.fullmatch(name):
            raise UsageError(f"bad hold name {name!r}", "letters, digits, '.', '_', '+', '@', '-'")
        holds = data.parent / "holds"
        try:
            holds.mkdir(exist_ok=True)
            (holds / name).touch()
        except FileNotFoundError:
            raise EntryGone(f"store entry {data.parent} was evicted", "look it up again") from None
        except PermissionError:
            raise ImagekitError(f"cannot hold {data.parent}: permission denied",
                                "a shared store needs group-writable directories (umask 002, setgid)") from None
        # A gc that moved the entry aside before our hold landed has put it back by now, or
        # removed it; either way the file is where we return it, or the caller must look again.
        if not data.is_file():
            (holds / name).unlink(missing_ok=True)
            raise EntryGone(f"store entry {data.parent} was evicted", "look it up again")
        return holds / name

    def release(self, entry: Entry | Path, name: str | None = None) -> None:
        """Drop a hold; calling it twice, or after eviction, is fine."""
        data = entry.path if isinstance(entry, Entry) else Path(entry)
        with contextlib.suppress(OSError):
            (data.parent / "holds" / (name or owners.me())).unlink()

    def held(self, entry: Entry | Path) -> list[str]:
        """The live holds on ``entry`` (an Entry, or an entry's directory), by name."""
        directory = entry.dir if isinstance(entry, Entry) else Path(entry)
        live = []
        with contextlib.suppress(OSError):
            for hold in (directory / "holds").iterdir():
                if _is_token(hold.name) and _this_host(hold.name):
                    if owners.alive(hold.name):
                        live.append(hold.name)
                    continue
                with contextlib.suppress(OSError):
                    if self._age(hold.stat().st_mtime) <= self.hold_max_age:
                        live.append(hold.name)
        return live

    def _to_trash(self, directory: Path) -> Path | None:
        aside = self.root / "trash" / f"{directory.name}@{owners.me()}@{os.urandom(4).hex()}"
        try:
            os.rename(directory, aside)
        except FileNotFoundError:
            return None
        return aside

    def evict(self, entry: Entry) -> bool:
        """Remove ``entry`` unless it is held; True when it went."""
        if self.held(entry):
            return False
        aside = self._to_trash(entry.dir)
        if aside is None:
            return False
        if self.held(aside):   # a hold landed between the check and the move: put it back
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
        total = sum(e.bytes for e in entries)
        evicted = []
        for entry in entries:
            if total <= max_size:
                break
            if self.evict(entry):
                total -= entry.bytes
                evicted.append(entry)
        return evicted


@dataclass
class _Made:
    sha256: str
    tool: str = ""


def _sha256(path: Path) -> str:
    from imagekit.export.output import sha256_file

    return sha256_file(path)


def find(store: Store, image_id: str, fmt: str, *, any_version: bool = False) -> list[Entry]:
    """Every entry of ``image_id`` in ``fmt`` (any preset and options), newest use first.

    Only entries of the current FORMAT_VERSION unless ``any_version``. Does not mark them used.
    """
    key = store.key(image_id, fmt, "x")
    fmt_dir = store._format_dir(key.image_id, fmt)
    try:
        dirs = list(fmt_dir.iterdir())
    except OSError:
        return []
    found = [e for e in (_read_entry(d, fmt) for d in dirs) if e is not None
             and (any_version or e.version == FORMAT_VERSION[fmt])]
    return sorted(found, key=lambda e: e.last_used, reverse=True)


SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:i?B)?\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``50G``, ``500M``, ``1.5T``, ``123`` (bytes); units are powers of 1024."""
    match = SIZE_RE.fullmatch(text or "")
    if match is None:
        raise UsageError(f"bad size {text!r}", "write a number with an optional K, M, G or T, e.g. 50G")
    power = " KMGTP".index(match.group(2).upper() or " ")
    return int(float(match.group(1)) * 1024 ** power)


def link_or_copy(entry: Entry, target: Path, *, force: bool = False) -> str:
    """Put ``entry``'s file at ``target``: a hard link, or a copy on another file system.

    Returns "link", "copy" or "same" (already that file). Atomic like every output:
    a temporary name beside ``target``, renamed over it.
    """
    target = Path(target)
    if target.exists():
        with contextlib.suppress(OSError):
            if os.path.samefile(entry.path, target):
                return "same"
        if not force:
            raise UsageError(f"{target} already exists", "remove it or pass --force to replace it")
    owners.sweep_parts(target)
    tmp = target.parent / f"{owners.part_prefix(target)}{os.urandom(4).hex()}.part"
    try:
        os.link(entry.path, tmp)
        os.replace(tmp, target)
        return "link"
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
            if _no_space(exc):
                raise NoSpaceError(f"no space left in {target.parent} for {target.name}") from None
            raise
    _need_space(target.parent, entry.bytes, f"a copy of {entry.path}")
    from imagekit import atomic

    try:
        with atomic.target(target, mode=entry.path.stat().st_mode & 0o7777 | 0o200, sync=True) as part:
            shutil.copyfile(entry.path, part)
    except OSError as exc:
        if _no_space(exc):
            raise NoSpaceError(f"no space left in {target.parent} while copying {entry.path}",
                               "free some space or write elsewhere with -o") from None
        raise
    return "copy"
