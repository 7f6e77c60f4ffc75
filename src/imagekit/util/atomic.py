"""Write outputs to a temporary name beside the target and rename when complete.

An interrupted or failed write never leaves a partial file under the final
name: recipes, scripts, JUnit files and exports all go through here.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Iterator

from imagekit.util import leases, quoting
from imagekit.util.errors import OutputError

# errno -> what it means for an output directory, in words (not a Python exception's repr).
_WHY = {errno.EROFS: "is on a read-only file system", errno.EACCES: "is not writable by this user (permission denied)",
        errno.EPERM: "is not writable by this user (operation not permitted)", errno.ENOTDIR: "is not a directory"}


def current_umask() -> int:
    """This process's umask, read without changing it (another thread may be creating files)."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1], 8) for line in fh if line.startswith("Umask:"))
    old = os.umask(0o022)   # Linux < 4.7 has no Umask: line
    os.umask(old)
    return old


def writable_dir(directory: str | os.PathLike, what: str = "the output", create: bool = False) -> Path:
    """``directory``, refused in one line (OutputError, exit 2) when nothing can be written there:
    a read-only file system, no write permission, not a directory. ``create`` makes it first."""
    d = Path(directory).expanduser().absolute()
    if create:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise unwritable(d, exc, what) from None
    if not d.is_dir():
        raise OutputError(f"cannot write {what}: {d} " + ("is not a directory" if d.exists() else "does not exist"),
                          f"mkdir -p {quoting.sh_arg(str(d))}, or choose another directory")
    st = os.statvfs(d)
    if st.f_flag & os.ST_RDONLY:
        raise OutputError(f"cannot write {what}: {d} {_WHY[errno.EROFS]}", "choose a directory on a writable "
                          "file system (-o DIR/NAME)")
    if not os.access(d, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {what}: {d} {_WHY[errno.EACCES]}",
                          "choose a directory you can write (-o DIR/NAME), or ask its owner for write access")
    return d


def unwritable(path: Path, exc: OSError, what: str = "the output") -> Exception:
    """An OSError met while creating an output, as one line; other errors stay as they are."""
    if exc.errno in _WHY:
        where = path if path.is_dir() else path.parent
        return OutputError(f"cannot write {what}: {where} {_WHY[exc.errno]}",
                           "choose a directory you can write, on a writable file system (-o DIR/NAME)")
    return exc


@contextlib.contextmanager
def target(path: str | os.PathLike, mode: int = 0o644, sync: bool = False) -> Iterator[Path]:
    """Yield a temporary path (``.NAME.<owner>.*.part``) beside ``path``; rename it over ``path`` on success.

    The file gets ``mode`` less the umask, as ``open(2)`` would give it: a user with umask 077
    keeps their outputs to themselves. ``sync`` flushes the data to disk before the rename
    (large exports on shared filesystems). Any exception, KeyboardInterrupt included, removes
    the temporary file.
    """
    final = Path(path)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        leases.sweep_parts(final)  # what a killed earlier run left (never a live writer's)
        import tempfile   # here: the importer's hit path writes nothing and need not load it
        fd, tmp = tempfile.mkstemp(prefix=leases.part_prefix(final), suffix=".part", dir=final.parent)
    except OSError as exc:
        raise unwritable(final, exc, str(final)) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if sync:
            with open(tmp_path, "rb+") as fh:
                os.fsync(fh.fileno())
        os.chmod(tmp_path, mode & ~current_umask())
        os.replace(tmp_path, final)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str, mode: int = 0o644) -> Path:
    """UTF-8; non-UTF-8 bytes that came in through argv (surrogateescape) are written back as they came."""
    with target(path, mode) as tmp:
        tmp.write_bytes(quoting.encode(text))
    return Path(path)
