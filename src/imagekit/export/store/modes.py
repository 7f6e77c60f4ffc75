"""The modes a store gives what it creates, whatever the creating process's umask.

Two shapes (docs/export.md, "Who may publish: the trust model"):

- a **private** store (one user's): directories ``0755`` and files ``0444``, less the
  umask, never group- or world-writable, so a umask of 077 keeps the user's exports
  to the user;
- a **shared** store (``imagekit store init --shared``): ``entries/``, ``tmp/``,
  ``locks/`` and ``trash/`` are writable by the publishers' group and setgid, so every
  directory a publisher makes is ``2775`` (``2770`` when only the group may read) in
  that group, and every file ``0444`` (``0440``), set explicitly: a publisher's umask of
  022 or 077 never locks the others out. ``tmp/`` is sticky too (``3775``): no publisher
  renames another's temporary directory while a tool writes into it. So is ``entries/`` and every
  directory below it (``3775``): a publisher adds entries, but renames or removes only their own, so
  an entry root published stays the file root checked (what a signature policy serves,
  :mod:`.sealed`). ``holds/`` and ``used/`` are sticky and
  writable by every reader (``1777``, or ``1770`` for group readers): a reader records
  there that a job uses an entry, and can remove only its own records.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from imagekit.util.atomic import current_umask
from imagekit.export.store import nofollow


@dataclass(frozen=True)
class Modes:
    """What a store's directories and files are made with."""

    dir: int                 # entries/…, tmp/…, locks/, trash/
    file: int                # entry files, entry.json, lock files
    public_dir: int          # holds/, used/: where readers write
    shared: bool
    group: int | None = None

    @classmethod
    def private(cls) -> "Modes":
        umask = current_umask()
        return cls(dir=0o755 & ~umask, file=0o444 & ~umask, public_dir=0o755 & ~umask, shared=False)

    @classmethod
    def shared_by(cls, group: int, readers_all: bool) -> "Modes":
        if readers_all:
            return cls(dir=0o2775, file=0o444, public_dir=0o1777, shared=True, group=group)
        return cls(dir=0o2770, file=0o440, public_dir=0o1770, shared=True, group=group)

    @property
    def entry_dir(self) -> int:
        """``entries/`` and every directory below it: in a shared store also sticky, so a publisher
        renames or removes only their own names there, never an entry root (or another publisher) made."""
        return self.dir | (stat.S_ISVTX if self.shared else 0)

    def top(self, sub: str) -> int:
        """The mode of the store's top-level directory ``sub``: ``holds/`` and ``used/`` are open to
        readers; a shared ``tmp/`` is also sticky, so no publisher can rename another's temporary
        directory (and plant a link in its place) while an export tool writes into it by path;
        ``entries/`` is :attr:`entry_dir`."""
        if sub in ("holds", "used"):
            return self.public_dir
        if sub == "entries":
            return self.entry_dir
        return self.dir | (stat.S_ISVTX if sub == "tmp" and self.shared else 0)

    def make_at(self, parent_fd: int, name: str, shown: Path, mode: int | None = None) -> int | None:
        """Create ``name`` in the directory open at ``parent_fd`` with exactly ``mode`` (default:
        :attr:`dir`), through its own descriptor (returned; None when it exists). See :mod:`.nofollow`."""
        return nofollow.make_dir(parent_fd, name, self.dir if mode is None else mode, self.group, shown)

    def mkdir(self, path: Path, mode: int | None = None) -> bool:
        """Create one directory with exactly ``mode`` (default: :attr:`dir`); False when it exists.
        Its parent is opened without following a link on the way (:mod:`.nofollow`)."""
        with nofollow.opened(path.parent) as parent:
            fd = self.make_at(parent, path.name, path, mode)
        if fd is None:
            return False
        os.close(fd)
        return True

    def makedirs_at(self, top_fd: int, parts: tuple[str, ...], shown: Path) -> int:
        """A descriptor of ``parts`` below ``top_fd`` in the entry tree, each missing one made with
        :attr:`entry_dir`; an existing one must be a real directory, never a link (NotADirectory), and
        one of this process's made by an older imagekit gets its sticky bit. The caller closes it."""
        return nofollow.ensure_dirs(top_fd, parts, self.entry_dir, self.group, shown,
                                    sticky=self.shared)

    def file_mode(self, current: int) -> int:
        """:attr:`file`, plus the execute bits ``current`` has where :attr:`file` lets read (a SIF
        stays executable, ``./x.sif`` runs it)."""
        return self.file | (current & 0o111 & (self.file >> 2))

    def fix_file(self, fd: int) -> None:
        """A finished file, open at ``fd``: read-only, readable as the store's readers need, in the
        publishers' group (set through the descriptor, never by path)."""
        nofollow.set_mode(fd, self.file_mode(os.fstat(fd).st_mode), self.group)
