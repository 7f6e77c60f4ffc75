"""``imagekit store init``: lay a store out with the modes its trust model needs.

A shared store (README "The export store: who may publish")::

    ROOT                 owner (root or CI), group G, 0755 (0750: group readers only)
    entries/ tmp/ locks/ trash/
                         owner, group G, 2775 (2770): publishers write, setgid keeps G
    holds/ used/         owner, group G, 1777 (1770): every reader writes, sticky

The root is writable by its owner alone, so no publisher can swap ``entries/`` for a
directory of their own, and nobody outside G can write anything a job starts from.
"""

from __future__ import annotations

import grp
import os
from pathlib import Path

from imagekit.errors import ImagekitError, UsageError
from imagekit.export.store.core import PUBLIC, SUBDIRS, Store
from imagekit.export.store.keys import default_root
from imagekit.export.store.modes import Modes


def init_store(root: str | Path | None, group: str | None, *, readers_all: bool = True) -> Path:
    """Create or fix the store at ``root`` (default: the user's own); ``group`` makes it shared."""
    path = Path(os.path.realpath(Path(root).expanduser() if root is not None else default_root()))
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
    try:
        path.mkdir(parents=True, exist_ok=True)
        st = os.lstat(path)
        if st.st_uid != os.geteuid():
            raise UsageError(f"{path} belongs to uid {st.st_uid}, not to this account (uid {os.geteuid()})",
                             "run init as the account that owns the store (root or CI)")
        os.chown(path, -1, gid)
        os.chmod(path, 0o755 if readers_all else 0o750)
        for sub in SUBDIRS:
            modes.mkdir(path / sub) or modes.fix_dir(path / sub)
        for sub in PUBLIC:
            modes.mkdir(path / sub, modes.public_dir) or modes.fix_dir(path / sub, modes.public_dir)
    except PermissionError as exc:
        raise ImagekitError(f"cannot set up {path}: {exc.strerror} ({exc.filename})",
                            "run init as the store's owner; only root can give it a group it is not in") from None
    return Store.open(path).root
