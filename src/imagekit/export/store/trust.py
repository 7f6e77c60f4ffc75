"""Who may have written a store's entries, checked on every hit.

The store does not sign anything: the file system says who can write what, and this
module checks that nobody outside the store's **publishers** could have written (or
replaced, or renamed into place) the entry a hit serves. The publishers of a store are

- root, and the owner of the store's root directory (its *anchor*: the user, for a
  private store; root or a CI account for a shared one);
- when ``entries/`` is group-writable, the members of its group (a shared store:
  ``imagekit store init --shared --group GROUP`` sets that up);
- the reader itself (nobody needs protecting from their own files).

The checks, like OpenSSH's StrictModes:

- the store root: a directory writable by its owner alone (a group- or world-writable
  root would let anyone swap ``entries/`` for their own), and every directory above it
  owned by root, the anchor or the reader, never writable by others unless it is sticky
  (``/tmp``, ``/var/tmp``) or group-writable by the publishers' group;
- an entry: its directories from ``entries/`` down, its file and its entry.json are real
  (no symbolic link), owned by a publisher, never world-writable, and group-writable only
  by the publishers' group.

A failure names the path, its owner and mode, and what would be valid.
"""

from __future__ import annotations

import functools
import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from imagekit.util.errors import ImagekitError, UsageError
from imagekit.util.owners import describe, private_group
from imagekit.util.owners import group_name as _group, user_name as _user


class UntrustedStore(UsageError):
    """The store's root, or a directory above it, can be changed by someone who is not a publisher."""


class UntrustedEntry(ImagekitError):
    """An entry that someone outside the store's publishers could have written."""


@functools.lru_cache(maxsize=256)
def member(uid: int, gid: int) -> bool:
    """Is ``uid`` in group ``gid`` (as its primary group, or listed in the group)?"""
    try:
        user = pwd.getpwuid(uid)
    except KeyError:
        return False
    if user.pw_gid == gid:
        return True
    try:
        return user.pw_name in grp.getgrgid(gid).gr_mem
    except KeyError:
        return False


@dataclass(frozen=True)
class Trust:
    """The publishers of one store, and the checks against them."""

    root: Path
    owner: int                 # the root directory's owner: the anchor
    group: int | None          # the publishers' group (entries/ group-writable), None for one user
    me: int                    # the effective uid of this process

    @classmethod
    def of(cls, root: Path) -> "Trust":
        """Check ``root`` and the directories above it; UntrustedStore says what is wrong."""
        st = os.lstat(root)
        me = os.geteuid()
        if not stat.S_ISDIR(st.st_mode):
            raise UntrustedStore(f"export store {root} is not a directory",
                                 "point --store or IMAGEKIT_STORE at a directory")
        if st.st_mode & 0o002 or st.st_mode & 0o020 and not private_group(st.st_gid, st.st_uid):
            who = "everyone" if st.st_mode & 0o002 else f"group {_group(st.st_gid)}"
            raise UntrustedStore(
                f"export store {root} is writable by {who} ({describe(st)}): anyone there could replace "
                "its entries with their own",
                f"a private store: chmod go-w {root}; a store shared by a group of publishers: "
                f"imagekit store --store {root} init --shared --group GROUP (as its owner)")
        group = None
        try:
            entries = os.lstat(root / "entries")
            if stat.S_ISDIR(entries.st_mode) and entries.st_mode & 0o020 and \
                    not private_group(entries.st_gid, entries.st_uid):
                group = entries.st_gid
        except FileNotFoundError:
            pass
        trust = cls(root, st.st_uid, group, me)
        trust.check_ancestors()
        return trust

    # --- who ----------------------------------------------------------------------------------

    def trusted_uid(self, uid: int) -> bool:
        return uid in (0, self.me, self.owner) or (self.group is not None and member(uid, self.group))

    def can_publish(self) -> bool:
        """May this process publish here (so that other readers will trust what it writes)?

        In a shared store only root and members of the publishers' group (the owner too: a
        non-member's chmod would clear the setgid bit, and the directories it makes would
        fall out of the group, locking the other publishers out)."""
        if self.me == 0:
            return self.redirectable() is None
        if self.group is None:
            return self.me == self.owner
        return self.group == os.getegid() or self.group in os.getgroups()

    def redirectable(self) -> str | None:
        """Where someone other than root could redirect what root writes into this store (None: nowhere).

        Export tools write their file by path (``ROOT/tmp/NAME/image.sqsh``); :mod:`.nofollow` covers
        what imagekit itself does, but not a tool's ``open``. So root publishes only where every
        directory from ``/`` to ``tmp/`` is root's and writable by nobody else (a sticky directory
        is fine: there only its owner, root, can rename what root made)."""
        for path in (*reversed(self.root.parents), self.root, self.root / "tmp"):
            try:
                st = os.lstat(path)
            except OSError as exc:
                return f"{path} cannot be checked ({exc.strerror})"
            sticky = st.st_mode & stat.S_ISVTX
            if stat.S_ISLNK(st.st_mode):
                return f"{path} is a symbolic link"
            if st.st_uid != 0:
                return f"{path} belongs to {_user(st.st_uid)}, who could rename what root writes there"
            if st.st_mode & 0o022 and not sticky:
                return f"{path} is writable by others ({describe(st)})"
        return None

    def publishers(self) -> str:
        who = "root" if self.owner == 0 else f"root and {_user(self.owner)}"
        return who + (f", and group {_group(self.group)}" if self.group is not None else "")

    # --- checks -------------------------------------------------------------------------------

    def check_ancestors(self) -> None:
        """UntrustedStore when a directory above the root could be changed by a non-publisher (one not
        made yet is skipped: whoever makes it, makes it theirs)."""
        for parent in self.root.parents:
            try:
                st = os.lstat(parent)
            except FileNotFoundError:
                continue
            problem = self._writers(st, above=True)
            if problem:
                raise UntrustedStore(
                    f"{parent}, above the export store {self.root}, {problem} ({describe(st)}): they "
                    "could replace the store with their own",
                    f"make it writable only by root or {_user(self.owner)} (chmod go-w {parent}), "
                    "or put the store elsewhere")

    def _writers(self, st: os.stat_result, *, above: bool = False) -> str | None:
        """Who outside the publishers can change this inode (None: nobody)."""
        if stat.S_ISLNK(st.st_mode):
            return "is a symbolic link"
        if not self.trusted_uid(st.st_uid):
            return f"belongs to {_user(st.st_uid)}, who is not a publisher"
        if st.st_mode & 0o002 and not (above and st.st_mode & stat.S_ISVTX):
            return "is writable by everyone"
        if st.st_mode & 0o020 and st.st_gid != self.group and not private_group(st.st_gid, st.st_uid) \
                and not (above and st.st_mode & stat.S_ISVTX):
            return f"is writable by group {_group(st.st_gid)}, which is not the publishers' group"
        return None

    def check_entry(self, directory: Path, files: list[Path]) -> None:
        """UntrustedEntry unless only publishers could have made ``directory`` and ``files`` what they are."""
        try:
            rel = directory.relative_to(self.root)
        except ValueError:
            raise UntrustedEntry(f"{directory} is not inside the export store {self.root}") from None
        chain = [self.root / Path(*rel.parts[:i]) for i in range(1, len(rel.parts) + 1)]
        for path in chain + files:
            try:
                st = os.lstat(path)
            except OSError as exc:
                raise UntrustedEntry(f"cannot check {path}: {exc.strerror}") from None
            want_dir = path in chain
            if stat.S_ISLNK(st.st_mode):
                raise UntrustedEntry(f"store entry {directory}: {path} is a symbolic link",
                                     "a store holds no links: remove it (imagekit store gc)")
            if not (stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)):
                raise UntrustedEntry(f"store entry {directory}: {path} is not a "
                                     + ("directory" if want_dir else "regular file"))
            problem = self._writers(st)
            if problem:
                raise UntrustedEntry(
                    f"store entry {directory}: {path} {problem} ({describe(st)}); the publishers of "
                    f"{self.root} are {self.publishers()}",
                    "only publishers may write a store that others start containers from: remove it "
                    "(imagekit store gc), and publish as a member of the store's group")
