"""Delivering an entry at an output path (a hard link, else a copy), and the free-space check before a write."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import TYPE_CHECKING

from imagekit.util import atomic, leases
from imagekit.util.errors import NoSpaceError, UsageError
from imagekit.export import output

if TYPE_CHECKING:
    from imagekit.export.store.entries import Entry

def need_space(directory: Path, size: int, what: str) -> None:
    """Refuse before writing a file of known ``size`` that would not fit (no estimate, no margin
    beyond a little metadata)."""
    have = output.free_bytes(directory)
    if have < size + (1 << 20):
        raise NoSpaceError(f"not enough free space in {directory} for {what}: need {output.human(size)}, "
                           f"{output.human(have)} free", "free some space, or write elsewhere")


def _full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def link_or_copy(entry: "Entry", target: Path, *, force: bool = False) -> str:
    """Put ``entry``'s file at ``target``: a hard link, or a copy on another file system (or where
    the kernel refuses to link another user's file, fs.protected_hardlinks).

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
    leases.sweep_parts(target)
    tmp = target.parent / f"{leases.part_prefix(target)}{os.urandom(4).hex()}.part"
    try:
        os.link(entry.path, tmp, follow_symlinks=False)   # the entry checked, never a link put in its place
        os.replace(tmp, target)
        return "link"
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
            if _full(exc):
                raise NoSpaceError(f"no space left in {target.parent} for {target.name}") from None
            raise
    need_space(target.parent, entry.bytes, f"a copy of {entry.path}")

    try:
        # The entry's read permissions (atomic.target takes the umask off), and writable by its new owner.
        with atomic.target(target, mode=entry.path.stat().st_mode & 0o777 | 0o200, sync=True) as part:
            import shutil   # here: a hit serves the entry itself and never copies it
            shutil.copyfile(entry.path, part)
    except OSError as exc:
        if _full(exc):
            raise NoSpaceError(f"no space left in {target.parent} while copying {entry.path}",
                               "free some space or write elsewhere with -o") from None
        raise
    return "copy"
