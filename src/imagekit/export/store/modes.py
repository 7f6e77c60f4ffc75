"""The modes a store gives what it creates, whatever the creating process's umask.

Two shapes (README "The export store: who may publish"):

- a **private** store (one user's): directories ``0755`` and files ``0444``, less the
  umask, never group- or world-writable, so a umask of 077 keeps the user's exports
  to the user;
- a **shared** store (``imagekit store init --shared``): ``entries/``, ``tmp/``,
  ``locks/`` and ``trash/`` are writable by the publishers' group and setgid, so every
  directory a publisher makes is ``2775`` (``2770`` when only the group may read) in
  that group, and every file ``0444`` (``0440``), set explicitly: a publisher's umask of
  022 or 077 never locks the others out. ``holds/`` and ``used/`` are sticky and
  writable by every reader (``1777``, or ``1770`` for group readers): a reader records
  there that a job uses an entry, and can remove only its own records.
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass
from pathlib import Path

from imagekit.atomic import current_umask


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

    def mkdir(self, path: Path, mode: int | None = None) -> bool:
        """Create one directory with exactly ``mode`` (default: :attr:`dir`); False when it exists."""
        try:
            os.mkdir(path, 0o700)    # nobody else may enter before its mode and group are right
        except FileExistsError:
            return False
        self.fix_dir(path, mode)
        return True

    def fix_dir(self, path: Path, mode: int | None = None) -> None:
        # Only for a directory this process just made 0700: nobody else can have put a link there.
        if self.group is not None:
            with contextlib.suppress(PermissionError):   # setgid parents give the group already
                os.chown(path, -1, self.group)
        os.chmod(path, self.dir if mode is None else mode)

    def makedirs(self, path: Path, top: Path) -> None:
        """Create ``path`` and its missing parents below ``top``, each with :attr:`dir`."""
        missing = []
        current = path
        while current != top and not current.exists():
            missing.append(current)
            current = current.parent
        for directory in reversed(missing):
            try:
                self.mkdir(directory)
            except FileNotFoundError:
                raise OSError(errno.ENOENT, "a parent was removed meanwhile", str(directory)) from None

    def file_mode(self, current: int) -> int:
        """:attr:`file`, plus the execute bits ``current`` has where :attr:`file` lets read (a SIF
        stays executable, ``./x.sif`` runs it)."""
        return self.file | (current & 0o111 & (self.file >> 2))

    def fix_file(self, fd_or_path: int | Path) -> None:
        """A finished file: read-only, readable as the store's readers need, in the publishers' group."""
        if isinstance(fd_or_path, int):
            if self.group is not None:
                with contextlib.suppress(PermissionError):
                    os.fchown(fd_or_path, -1, self.group)
            os.fchmod(fd_or_path, self.file_mode(os.fstat(fd_or_path).st_mode))
            return
        # A path only for a file this process wrote in its own 0700-born temporary directory.
        if self.group is not None:
            with contextlib.suppress(PermissionError):
                os.chown(fd_or_path, -1, self.group)
        os.chmod(fd_or_path, self.file_mode(os.stat(fd_or_path).st_mode))
