"""Small JSON records in a directory that is this user's alone: read stamps, image platforms, policy verdicts.

A record kept here can save work (a hash, a request, a signature check) but never grants anything another
user could not: the directory must be a real directory (not a link), owned by this user and writable by
nobody else, or no record in it is read or written. Records are opened without following links, read up
to a bound, and written under a temporary name then renamed, so a reader sees a whole record or none.
Anything unreadable, malformed or missing reads as None: the caller does the work the record would have
saved.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any


def own_private_dir(path: Path) -> bool:
    """``path`` is a real directory (not a link), this user's, and writable by nobody else: a record kept
    there is this user's own."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def make_private_dir(path: Path) -> bool:
    """Create ``path`` (0700) if it is missing; then :func:`own_private_dir`."""
    with contextlib.suppress(OSError):
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return own_private_dir(path)


def read(path: Path, limit: int = 4096) -> Any:
    """The JSON document at ``path`` (at most ``limit`` bytes), or None. The caller has checked the
    directory (:func:`own_private_dir`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            return json.loads(os.read(fd, limit))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None


def write(path: Path, doc: Any) -> None:
    """Write ``doc`` to ``path`` whole or not at all. Best effort: a failure costs the work next time."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    with contextlib.suppress(OSError):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, json.dumps(doc, sort_keys=True).encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)
    with contextlib.suppress(OSError):
        tmp.unlink()
