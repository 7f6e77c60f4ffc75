"""``imagekit store init``: lay a store out with the modes its trust model needs.

A shared store (docs/export.md, "Who may publish: the trust model")::

    ROOT                 owner (root or CI), group G, 0755 (0750: group readers only)
    entries/ tmp/ locks/ trash/
                         owner, group G, 2775 (2770): publishers write, setgid keeps G
    holds/ used/         owner, group G, 1777 (1770): every reader writes, sticky
    tmp/                 as entries/, and sticky (3775): nobody renames another's temporary
    entries/ and below   sticky too (3775): nobody renames or removes another's entry

The root is writable by its owner alone, so no publisher can swap ``entries/`` for a
directory of their own, and nobody outside G can write anything a job starts from.

init runs as root on a store that others may have written (the old, group-writable layout),
so it follows nothing: the root is made owner-only first, through its descriptor, and each
top-level name is checked with lstat and changed only through a descriptor opened with
O_NOFOLLOW (:mod:`.nofollow`). A link is refused, naming it; a directory someone else owns is
renamed aside.
"""

from __future__ import annotations

import grp
import os
import stat
import time
from pathlib import Path

from imagekit.util.errors import ImagekitError, UsageError
from imagekit.export.store import nofollow, notices
from imagekit.export.store.core import PUBLIC, SUBDIRS, Store, make_private, resolved
from imagekit.export.store.modes import Modes
from imagekit.export.store.trust import Trust, UntrustedStore


READERS = ("all", "group")   # who may read a shared store: everyone, or its group only
ENTRY_DEPTH = 4              # entries/sha256/<hex>/<format>/<entry>


def init_store(root: str | Path | None, group: str | None, *, readers_all: bool = True) -> Path:
    """Create or fix the store at ``root`` (default: the user's own); ``group`` makes it shared."""
    path = resolved(root)
    if group is None:
        return Store.open(path).root
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        try:
            gid = grp.getgrgid(int(group)).gr_gid if group.isdigit() else None
        except KeyError:
            gid = int(group)          # a numeric group the site's directory does not list
        if gid is None:
            raise UsageError(f"no group named {group!r}", "give the publishers' group name or number "
                             "(getent group)") from None
    modes = Modes.shared_by(gid, readers_all)
    # Before anything is made: a directory above the store that a non-publisher could change is refused
    # (root would otherwise make the store inside another user's directory, then refuse to use it).
    Trust(path, os.geteuid(), gid, os.geteuid()).check_ancestors()
    try:
        if not os.path.lexists(path):
            make_private(path)
        with nofollow.opened(path) as fd:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid():
                raise UsageError(f"{path} belongs to uid {st.st_uid}, not to this account (uid {os.geteuid()})",
                                 "run init as the account that owns the store (root or CI)")
            # The root first: from here on nobody else can rename, remove or plant a name in it.
            os.fchown(fd, -1, gid)
            os.fchmod(fd, 0o755 if readers_all else 0o750)
            for sub in (*SUBDIRS, *PUBLIC):
                _top_dir(fd, path, sub, modes)
            with nofollow.opened(path, "entries") as entries:
                _sticky_below(entries, ENTRY_DEPTH)
    except PermissionError as exc:
        raise ImagekitError(f"cannot set up {path}: {exc.strerror} ({exc.filename or path})",
                            "run init as the store's owner; only root can give it a group it is not in") from None
    return Store.open(path).root


def _sticky_below(dir_fd: int, depth: int) -> None:
    """The sticky bit on every directory below ``dir_fd``, ``depth`` levels down, that this account owns
    (root: every one, taken over; :func:`.nofollow.add_sticky`), for a store made before the entry tree
    was sticky: from then on no publisher renames what root (or the owner) published. Each name is
    opened without following a link."""
    if depth == 0:
        return
    with os.scandir(dir_fd) as listing:
        names = [item.name for item in listing if item.is_dir(follow_symlinks=False)]
    for name in names:
        try:
            fd = os.open(name, nofollow.DIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            continue        # removed meanwhile, or replaced by a link: nothing to do through it
        try:
            nofollow.add_sticky(fd, claim=depth > 1)   # an entry itself stays its publisher's to evict
            _sticky_below(fd, depth - 1)
        finally:
            os.close(fd)


def _top_dir(root_fd: int, root: Path, sub: str, modes: Modes) -> None:
    """Make ``root/sub``, or give an existing one its group and mode through its own descriptor.

    An existing name is checked first, never followed: a symbolic link or anything but a directory
    is refused, naming it (init changes nothing through it); a directory that someone other than
    root or this account owns was writable by them, so it is renamed aside, with a warning, and a
    fresh one made: nothing it holds is trusted."""
    shown = root / sub
    fd = modes.make_at(root_fd, sub, shown, modes.top(sub))
    if fd is None:
        st = nofollow.lstat_at(root_fd, sub)
        if not stat.S_ISDIR(st.st_mode):
            raise UntrustedStore(f"{shown} is {nofollow.describe(shown, root_fd, sub)}: store init changes "
                                 "nothing through it", f"remove it (rm {shown}) and run init again")
        if st.st_uid not in (0, os.geteuid()):
            aside = f"{sub}.untrusted-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(2).hex()}"
            os.rename(sub, aside, src_dir_fd=root_fd, dst_dir_fd=root_fd)
            notices.warn(f"{shown} belonged to uid {st.st_uid}, not root or this account: moved aside to "
                         f"{root / aside} (others could write what it holds; look through it, then remove it)")
            fd = modes.make_at(root_fd, sub, shown, modes.top(sub))
            if fd is None:
                raise UntrustedStore(f"{shown} reappeared while store init moved it aside",
                                     "someone else is changing the store: run init again")
        else:
            fd = nofollow.open_dir(sub, root_fd, shown)
            try:
                now = os.fstat(fd)
                if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                    raise UntrustedStore(f"{shown} was replaced while store init checked it",
                                         "someone else is changing the store: run init again")
                nofollow.set_mode(fd, modes.top(sub), modes.group)
            except BaseException:
                os.close(fd)
                raise
    os.close(fd)
