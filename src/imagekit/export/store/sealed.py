"""Under a signature policy: the file about to be served is one only root and the caller can change,
and its bytes were hashed on this node.

A shared store's publishers may write its entries (:mod:`.trust`), and a seal or a sha256 in
``entry.json`` is whatever the last publisher wrote there. A site policy is there to distrust exactly
those publishers ("only what CI signed starts"), so when one is in force nothing a publisher wrote is
taken on trust:

- **the path cannot be redirected.** Every name from ``/`` down to the file is owned by root or the
  caller, and every directory on the way is writable by nobody else, or sticky (there, only a name's
  owner may rename or remove it: a shared store's entry tree is sticky, :mod:`.modes`). So the file
  Pyxis opens after the importer has exited is the file checked here, and it cannot be rewritten in
  place either (it is owned by root or the caller, and not writable by others). The walk opens each
  name with ``O_NOFOLLOW``: a link on the way is refused, never followed.
- **its bytes are hashed on first open on each node**, through the descriptor the walk opened, and
  the caller's stamp (:class:`.verify.Stamps`: this host, this inode, its size, mtime and ctime)
  spares the later hits a read. A ctime cannot be set back by anyone but root, so a file replaced
  or rewritten since it was hashed never matches a stamp, even if its inode number comes back.

A publisher's seal is never used here: it is written by someone who cannot sign.

:func:`check` is the importer's (:mod:`imagekit.export.pyxis_policy`); :func:`problem` alone is the
signing export's (:mod:`imagekit.export`), which hashes in full anyway.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from imagekit.util import digests
from imagekit.util.errors import IntegrityError
from imagekit.export.store.trust import UntrustedEntry, describe, private_group
from imagekit.export.store.verify import Stamps

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NotSealed(UntrustedEntry):
    """A file someone other than root and the caller could replace or rewrite: not served under a policy."""


def _others_may_write(st: os.stat_result) -> bool:
    """May someone other than the owner write this inode? (A user private group is the owner's own.)"""
    if st.st_mode & 0o002:
        return True
    return bool(st.st_mode & 0o020) and not private_group(st.st_gid, st.st_uid)


def _why(path: Path, st: os.stat_result, parent: Path | None, pst: os.stat_result | None, me: int) -> str | None:
    """What lets someone else change ``path`` (None: nothing): its owner, its mode, or its directory's."""
    if st.st_uid not in (0, me):
        return f"{path} belongs to uid {st.st_uid} ({describe(st)})"
    if not stat.S_ISDIR(st.st_mode) and _others_may_write(st):
        return f"{path} is writable by others ({describe(st)})"
    if pst is not None and _others_may_write(pst) and not pst.st_mode & stat.S_ISVTX:
        return f"{parent} is writable by others and not sticky ({describe(pst)}), so they can rename {path.name}"
    return None


def open_unreplaceable(path: Path, me: int | None = None) -> int:
    """A read descriptor of the regular file ``path``, opened name by name from ``/`` without following
    a link, every name owned by root or ``me`` (default: this process's user) in a directory nobody
    else can change (see the module docstring). NotSealed says which name and why; FileNotFoundError
    when it is gone."""
    me = os.geteuid() if me is None else me
    path = Path(path)
    if not path.is_absolute():
        raise NotSealed(f"{path} is not an absolute path")
    fd = os.open("/", _DIR)
    here, pst = Path("/"), os.fstat(fd)
    try:
        problem = _why(here, pst, None, None, me)
        names = path.parts[1:]
        for i, name in enumerate(names):
            last = i == len(names) - 1
            child = here / name
            try:
                nxt = os.open(name, _FILE if last else _DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise NotSealed(f"{child} is a symbolic link or not a directory: refused, never followed") from None
                raise
            os.close(fd)
            fd = nxt
            st = os.fstat(fd)
            problem = problem or _why(child, st, here, pst, me)
            here, pst = child, st
        if not stat.S_ISREG(pst.st_mode):
            raise NotSealed(f"{path} is not a regular file")
        if problem:
            raise NotSealed(f"{problem}: someone who cannot sign could replace what {path} names")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def problem(path: Path, me: int | None = None) -> str | None:
    """Why someone other than root and ``me`` could replace or rewrite ``path`` (None: nobody can)."""
    try:
        os.close(open_unreplaceable(path, me))
    except NotSealed as exc:
        return exc.message
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    return None


def check(path: Path, sha256: str, stamps: Stamps | None) -> bool:
    """NotSealed unless only root and this process's user can change ``path``; IntegrityError unless its
    bytes are ``sha256`` (hashed through the descriptor checked, unless this user's stamp on this node
    says they were, for this very inode, size, mtime and ctime). True when it was hashed now."""
    fd = open_unreplaceable(path)
    try:
        st = os.fstat(fd)
        if stamps is not None and stamps.known(st, sha256):
            return False
        got = digests.sha256_fd(fd)
        if got != sha256:
            raise IntegrityError(f"{path} has sha256:{got}, not the sha256:{sha256} its entry records",
                                 "it was damaged or replaced: remove it (imagekit store gc) and export again")
        after = os.fstat(fd)
        if stamps is not None and (after.st_ctime_ns, after.st_size) == (st.st_ctime_ns, st.st_size):
            stamps.record(after, sha256)
    finally:
        os.close(fd)
    return True
