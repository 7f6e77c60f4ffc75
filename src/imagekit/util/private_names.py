"""Names in a shared directory (``/tmp``, ``/var/tmp``) that no other user can take first.

``/tmp/imagekit-stage-UID`` is a name anyone can make before its user does, and in a sticky directory
the user cannot remove what another made: every later launch of that user stops (security-4 H8). So
after the plain name comes one with the user's own token, 16 random hex digits kept in
``~/.config/imagekit/private-name`` (mode 0600): nobody else can guess it, and every process of the
user on the node (and on every node, with a shared home) arrives at the same name.
``data/enroot-node.sh`` reads the same file the same way.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path
from typing import Iterator

FILE = Path(".config") / "imagekit" / "private-name"
_TOKEN = re.compile(rb"[0-9a-f]{16}")


def token(home: str | None = None) -> str | None:
    """This user's token (made on first use); None without a home of the user's own to keep it in."""
    home = home if home is not None else os.environ.get("HOME", "")
    if not home or not os.path.isabs(home):
        return None
    path = Path(home) / FILE
    with contextlib.suppress(OSError):
        if os.path.lexists(path):
            raise FileExistsError(path)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, os.urandom(8).hex().encode() + b"\n")   # secrets.token_hex's bytes
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)          # the first of concurrent processes wins; the others read its token
        os.unlink(tmp)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return None                 # not the user's own secret: others could know it
        m = _TOKEN.match(os.read(fd, 64))
    finally:
        os.close(fd)
    return m.group().decode() if m else None


def names(parent: Path, stem: str, home: str | None = None) -> Iterator[Path]:
    """``parent/stem``, then ``parent/stem-TOKEN`` when the user has a token (made only when asked for: the
    plain name is taken): the order every process of the user tries them in."""
    yield parent / stem
    mine = token(home)
    if mine:
        yield parent / f"{stem}-{mine}"
