"""Files imagekit trusts, as code or as the root of what it trusts: refused when someone else can change them.

The site's signature policy and the key files it names decide which images start; a site
component (``components/*.py`` beside a site's stacks, or a module an ``imagekit.components`` entry
point names) is code imagekit runs, as root in a CI job. Whoever can write such a file, or rename
something over it, decides for every user who runs imagekit (security-4 H10, H14). So, as OpenSSH
checks ``authorized_keys``: the file and every directory from ``/`` down to it must belong to root
or to the user running imagekit, and be writable by nobody else. A sticky directory above it
(``/tmp``) is fine (there only an entry's owner may rename it); so is group-write by the owner's own
private group (RHEL's umask 002). A symbolic link on the way must be root's or the user's, and the
directories of its target are checked the same way.

A refusal is one line naming the file, the path that is at fault, its owner and mode, and the fix.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from imagekit.util.errors import UsageError
from imagekit.util.owners import describe, private_group, user_name


class UntrustedFile(UsageError):
    """A trust file, or a directory above it, that someone other than root or this user can change."""


def problem(path: str | os.PathLike, *, made: bool = False) -> tuple[Path, os.stat_result, str] | None:
    """(the path at fault, its stat, what is wrong) when someone other than root or this process's user can
    change ``path``; None when nobody else can (or it does not exist: its reader says so). ``made``: a
    path that does not exist is judged by the deepest directory above it that does, sticky or not
    (whoever can write there can make the path before its reader looks)."""
    me = os.geteuid()
    given = Path(os.path.abspath(path))
    while made and not os.path.lexists(given) and given != given.parent:
        given = given.parent
    chains = [given] + ([Path(os.path.realpath(given))] if os.path.realpath(given) != str(given) else [])
    for target in chains:
        for current in (*reversed(target.parents), target):
            try:
                st = os.lstat(current)
            except OSError:
                return None
            last = current == target
            if st.st_uid not in (0, me):
                return current, st, f"belongs to {user_name(st.st_uid)}"
            if stat.S_ISLNK(st.st_mode):
                continue            # the link is its owner's; where it leads is the next chain
            sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and not last
            if st.st_mode & 0o002 and not sticky:
                return current, st, "is writable by everyone"
            if st.st_mode & 0o020 and not sticky and not private_group(st.st_gid, st.st_uid):
                return current, st, "is writable by its group"
    return None


def check(path: str | os.PathLike, what: str) -> None:
    """:class:`UntrustedFile` (one line) when someone other than root or this user can change ``path`` (``what``
    it is, e.g. "signature policy")."""
    found = problem(path)
    if found is None:
        return
    where, st, wrong = found
    me = user_name(os.geteuid())
    owners = "root" if me == "root" else f"root or {me}"
    at = "" if str(where) == os.path.abspath(path) else f": {where}"
    fix = (f"keep it where only {owners} can write (an admin: chown root {where})" if wrong.startswith("belongs")
           else f"chmod go-w {where}")
    raise UntrustedFile(f"{what} {path}{at} {wrong} ({describe(st)}): whoever can change it decides what imagekit "
                        "trusts, so it is not used", f"{fix}; the file and every directory above it must be "
                        f"{owners}'s and writable by nobody else (docs/security.md, \"Trust files\")")
