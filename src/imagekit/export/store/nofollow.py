"""Directory operations that never follow a symbolic link: how the store walks paths others can write.

In a shared store other users write ``entries/`` and ``tmp/`` (the publishers) and ``holds/`` and
``used/`` (everyone). A process that resolves ``STORE/entries/sha256/HEX/enroot`` by path follows
whatever a publisher renamed into place a moment ago, a symbolic link to ``/etc`` included, and then
makes, chmods, renames or deletes *there*, as root when root runs it. So every operation below the
store's root starts from a descriptor:

- :func:`walk` opens a directory one name at a time from ``/``, each with
  ``O_DIRECTORY|O_NOFOLLOW``: a link anywhere on the way is refused (:class:`NotADirectory`), and
  the descriptor it returns is the directory it checked, wherever someone renames it later;
- :func:`make_dir` creates a directory ``0700``, opens it without following, checks that it is the
  one it just made (this process's, still ``0700``), and only then sets its group and mode, through
  the descriptor (``fchown``/``fchmod``);
- names are then created, renamed and removed relative to such descriptors (``dir_fd``), and trees
  removed with ``shutil.rmtree(dir_fd=...)``, which never follows a link inside either.

A planted link is therefore never followed; a planted *directory* (someone renames a real directory
into place) only moves the operation into a directory that user could already write.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import Iterator, Sequence

from imagekit.util.errors import ImagekitError

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotADirectory(ImagekitError):
    """A name on a store path is a symbolic link, or not a directory: refused, never followed."""


def describe(path: Path | str, dir_fd: int | None = None, name: str | None = None) -> str:
    """What ``path`` is, in words ("a symbolic link to /etc", "a regular file")."""
    try:
        st = os.stat(name if name is not None else path, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        return exc.strerror or "unreadable"
    if stat.S_ISLNK(st.st_mode):
        with contextlib.suppress(OSError):
            return f"a symbolic link to {os.readlink(name if name is not None else path, dir_fd=dir_fd)}"
        return "a symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "a directory"
    return "a regular file" if stat.S_ISREG(st.st_mode) else "not a directory"


MAX_LINKS = 40                   # as the kernel's own path walk (ELOOP)


def resolve(path: Path | str) -> Path:
    """``path``, absolute, with the symbolic links on it resolved, following only a link owned by root or
    this process's user in a directory nobody else can change (owned by one of them, and writable by no
    one else unless sticky): the store's own path is never another user's to redirect (H3 of
    ../shared/reviews/security-4.md). Walked name by name through descriptors, so what was checked is
    what is followed. What does not exist yet is kept as written. NotADirectory names a link refused."""
    me = os.geteuid()
    text = os.path.expanduser(str(path))
    todo = list(Path(os.getcwd(), text).parts[1:])     # ".." is taken as the kernel takes it: after links
    done = Path("/")
    fd = os.open("/", DIR_FLAGS)
    links = 0
    try:
        while todo:
            name = todo.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                done = done.parent
                os.close(fd)
                fd = walk(done)
                continue
            try:
                st = lstat_at(fd, name)
            except FileNotFoundError:
                return Path(os.path.normpath(Path(done, name, *todo)))
            if stat.S_ISLNK(st.st_mode):
                links += 1
                parent = os.fstat(fd)
                who = st.st_uid not in (0, me) and f"it belongs to uid {st.st_uid}"
                where = (parent.st_uid not in (0, me) and f"{done} belongs to uid {parent.st_uid}") or (
                    parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX
                    and f"{done} is writable by others ({owner_mode(parent)})")
                if who or where or links > MAX_LINKS:
                    why = who or where or f"more than {MAX_LINKS} links"
                    raise NotADirectory(f"{done / name} is a symbolic link to {os.readlink(name, dir_fd=fd)} and "
                                        f"{why}: refused, never followed (someone other than root could "
                                        "redirect it)", "give the path it leads to, or make the link root's "
                                        "in a directory only root can write")
                target = os.readlink(name, dir_fd=fd)
                todo = [*Path(target).parts, *todo]
                if target.startswith("/"):
                    todo = todo[1:]
                    done = Path("/")
                    os.close(fd)
                    fd = os.open("/", DIR_FLAGS)
                continue
            if not stat.S_ISDIR(st.st_mode):
                return Path(os.path.normpath(Path(done, name, *todo)))
            nxt = open_dir(name, fd, done / name)
            os.close(fd)
            fd, done = nxt, done / name
    finally:
        os.close(fd)
    return done


def open_dir(name: str, dir_fd: int | None, shown: Path | str) -> int:
    """A descriptor of the directory ``name`` (relative to ``dir_fd``), never through a link.

    NotADirectory names ``shown`` and what is there; FileNotFoundError when nothing is."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotADirectory(f"{shown} is {describe(shown, dir_fd, name)}, not a directory: refused, "
                                "never followed",
                                "a store holds only real directories: move it aside, then run "
                                "imagekit store init as the store's owner") from None
        raise


def walk(path: Path, parts: Sequence[str] = ()) -> int:
    """A descriptor of ``path``/``parts``, every name opened without following a link.

    ``path`` is absolute (the store's root, already resolved); the caller closes the descriptor."""
    path = Path(path)
    names = [*path.parts[1:], *parts]
    fd = os.open("/", DIR_FLAGS)
    shown = Path("/")
    try:
        for name in names:
            shown = shown / name
            nxt = open_dir(name, fd, shown)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def opened(path: Path, *parts: str) -> Iterator[int]:
    """:func:`walk` as a context manager: the descriptor is closed on leaving."""
    fd = walk(path, parts)
    try:
        yield fd
    finally:
        os.close(fd)


def make_dir(parent_fd: int, name: str, mode: int, group: int | None, shown: Path | str) -> int | None:
    """Create ``name`` in ``parent_fd`` with exactly ``mode`` (and ``group``); its descriptor, or None
    when the name exists.

    Made ``0700`` first, so nobody else can enter before its mode and group are right, then opened
    without following and checked to be the directory this process just made: someone who removed
    it and planted a link or a directory of their own in the meantime is refused, never chmodded."""
    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        return None
    fd = open_dir(name, parent_fd, shown)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
            raise NotADirectory(f"{shown} was replaced right after this process made it (now {owner_mode(st)})",
                                "someone else is changing the store: check who can write its directories")
        set_mode(fd, mode, group)
    except BaseException:
        os.close(fd)
        raise
    return fd


def set_mode(fd: int, mode: int, group: int | None) -> None:
    """Group (where this process may give it) and mode of the directory or file open at ``fd``."""
    if group is not None:
        with contextlib.suppress(PermissionError):   # setgid parents give the group already
            os.fchown(fd, -1, group)
    os.fchmod(fd, mode)


def add_sticky(fd: int, *, claim: bool = False) -> None:
    """The sticky bit on the directory open at ``fd`` when this process owns it and it lacks one. With
    ``claim``, root also takes the directory over (``fchown``, through the descriptor: a directory of
    the store's entry tree, never a link): a shared store's entry tree is root's wherever root publishes,
    so no publisher who made a directory first can rename root's entry out of it (their own names in it
    stay theirs)."""
    st = os.fstat(fd)
    if claim and os.geteuid() == 0 and st.st_uid != 0:
        os.fchown(fd, 0, -1)
        st = os.fstat(fd)
    if st.st_uid == os.geteuid() and not st.st_mode & stat.S_ISVTX:
        os.fchmod(fd, stat.S_IMODE(st.st_mode) | stat.S_ISVTX)


def owner_mode(st: os.stat_result) -> str:
    return f"uid {st.st_uid}, gid {st.st_gid}, mode {stat.S_IMODE(st.st_mode):04o}"


def ensure_dirs(top_fd: int, parts: Sequence[str], mode: int, group: int | None, shown: Path, *,
                sticky: bool = False) -> int:
    """A descriptor of ``parts`` below ``top_fd``, creating what is missing with :func:`make_dir`;
    an existing name must be a real directory (NotADirectory otherwise). ``sticky``: an existing one
    gets the sticky bit, and root takes it over (:func:`add_sticky`). The caller closes it."""
    fd = os.dup(top_fd)
    try:
        for name in parts:
            shown = shown / name
            nxt = make_dir(fd, name, mode, group, shown)
            if nxt is None:
                nxt = open_dir(name, fd, shown)
                if sticky:
                    add_sticky(nxt, claim=True)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_file(path: Path, data: bytes, mode: int) -> None:
    """Put ``data`` at ``path`` (atomically: a temporary name, then a rename), in the directory reached
    from ``/`` without following a link (:func:`walk`), the file made with ``O_EXCL|O_NOFOLLOW`` and
    given ``mode`` through its descriptor: root writing beside a store entry never writes where a
    publisher's link points. NotADirectory names a link on the way."""
    path = Path(path)
    with opened(path.parent) as dir_fd:
        tmp = f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.part"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, mode)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise


def lstat_at(dir_fd: int, name: str) -> os.stat_result:
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


def remove_tree(parent_fd: int, name: str) -> None:
    """Remove ``name`` below ``parent_fd``: a file or link itself, or a directory and all it holds,
    each level opened without following (a link inside is removed, never entered). Python's own
    ``shutil.rmtree(dir_fd=)`` needs 3.11; this is the same walk."""
    try:
        st = lstat_at(parent_fd, name)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=parent_fd)
        return
    fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise OSError(errno.ESTALE, "replaced while being removed", name)
        with os.scandir(fd) as items:
            names = [item.name for item in items]
        for child in names:
            remove_tree(fd, child)
    finally:
        os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(name, dir_fd=parent_fd)


def try_remove_tree(parent_fd: int, name: str) -> bool:
    """:func:`remove_tree`, False instead of an OSError (what may not be removed stays)."""
    try:
        remove_tree(parent_fd, name)
        return True
    except OSError:
        return False
