"""What the store's parts share: its directories, its errors, and file-system helpers."""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass
from pathlib import Path

from imagekit.util.errors import ImagekitError

TMP_STALE = 3600.0          # another namespace's or host's temp dir untouched this long is removed
SUBDIRS = ("entries", "tmp", "locks", "trash")
PUBLIC = ("holds", "used")   # where readers write
_ENOSPC_TEXT = os.strerror(errno.ENOSPC)


class EntryGone(ImagekitError):
    """The entry was evicted between finding it and holding it: look it up again."""


class NotPublisher(ImagekitError):
    """This process may read the store but not publish into it."""


@dataclass
class Made:
    sha256: str
    tool: str = ""


def fsync_dir(path: Path) -> None:
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


def newest_mtime(path: Path) -> float:
    """The latest mtime of a directory and what is directly in it (a writer's last sign of life)."""
    newest = 0.0
    with contextlib.suppress(OSError):
        newest = os.lstat(path).st_mtime
        for child in os.scandir(path):
            with contextlib.suppress(OSError):
                newest = max(newest, child.stat(follow_symlinks=False).st_mtime)
    return newest


def scandirs(path: Path) -> list[os.DirEntry]:
    """The real subdirectories of ``path`` (never through a symbolic link)."""
    try:
        return [d for d in os.scandir(path) if d.is_dir(follow_symlinks=False)]
    except OSError:
        return []
