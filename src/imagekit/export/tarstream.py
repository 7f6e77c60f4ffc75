"""A streaming tar filter that works on raw 512-byte blocks.

``docker export`` produces one flattened tar stream; the squashfs tools read
one. In between, imagekit drops entries (``dev/*``, ``.dockerenv``, files it
replaces), adjusts modes or ownership in place and appends its own files at
the end. Re-encoding every member through :mod:`tarfile` would cost CPU and
risk changing what the engine wrote, so kept members are copied byte for byte
(extension headers included) and only the fields that must change are
patched, with the header checksum recomputed.
"""

from __future__ import annotations

import dataclasses
import errno
import io
import os
import stat
import tarfile
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterable

from imagekit.util.errors import UsageError

BLOCK = 512
CHUNK = 1 << 20
SPLICE_MIN = 64 << 10   # smaller members are cheaper to copy than to flush and splice
ZERO_BLOCK = bytes(BLOCK)
# A member's user and group names (ustar's uname and gname fields, pax's records). Every member leaves
# the filter without them: the squashfs tools map a name through this host's passwd and group files
# (mksquashfs -tar and sqfstar 4.5: an image's "slurm", uid 990, lands as the host's slurm, 64030),
# opening both files afresh for each member, 23,000 opens in one thread for an image of 11,600 files.
# Without names they keep the numeric ids the image has, as Enroot and Apptainer do from a directory.
OWNER_NAMES = slice(265, 329)
NO_NAMES = bytes(64)
NAMES = frozenset({"uname", "gname"})

REGULAR = (b"0", b"\0", b"7")
HARDLINK = b"1"
SYMLINK = b"2"
DIRECTORY = b"5"
EXT_TYPES = (b"x", b"L", b"K")  # describe the member that follows
GLOBAL_PAX = b"g"


class TarFormatError(ValueError):
    """The input is not a tar stream this filter understands."""


class DroppedLinkTarget(UsageError):
    """A hard link whose target the filter dropped and no extra member provides again: keeping it
    would lose the file under every name, so nothing is written."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(f"/{name} is a hard link to /{target}, which this export leaves out",
                         "rebuild the image with a copy of the file there, not a hard link to it")
        self.name, self.target = name, target


@dataclass
class Member:
    """What the callbacks see of one member; ``mode``/``uid``/``gid``/``mtime`` may be changed."""

    name: str          # normalised: no leading "./" or "/", no trailing "/"
    type: bytes
    mode: int
    uid: int
    gid: int
    size: int
    linkname: str
    mtime: int = 0     # whole seconds (a pax record's fraction is dropped when the member is changed)


@dataclass(frozen=True)
class Rewrite:
    """How :func:`filter_tar` rewrites a format's stream: the members it keeps, how it adjusts a kept
    one (mode, uid, gid), and ``extra(seen_names)``: members it appends before the end."""

    keep: Callable[[Member], bool]
    adjust: Callable[[Member], None] | None = None
    extra: Callable[[set[str]], Iterable[tuple[tarfile.TarInfo, bytes]]] | None = None


@dataclass
class FilterStats:
    kept: list[str] = field(default_factory=list)
    dropped: int = 0
    bytes_in: int = 0


def normalise(name: str) -> str:
    """A member name as the squashfs tools file it, so that filters compare what will land: they skip
    every leading "/", "./" and "../" (sqfstar, mksquashfs -tar: "../etc/rc" is etc/rc) and join
    components at any run of slashes ("etc//rc"); "." components are dropped here too (no tool keeps
    them apart from the name without). A ".." further in is left: every tool refuses or skips it."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    while parts and parts[0] == "..":
        parts.pop(0)
    return "/".join(parts)


def _num(field_: bytes) -> int:
    if field_ and field_[0] & 0x80:  # GNU base-256 for large values
        value = int.from_bytes(field_, "big") & ~(0x80 << (8 * (len(field_) - 1)))
        return value
    text = field_.split(b"\0", 1)[0].strip(b" ")
    return int(text, 8) if text else 0


def _mtime(pax: dict[str, str], hdr: bytearray) -> int:
    try:
        return int(float(pax["mtime"])) if "mtime" in pax else _num(bytes(hdr[136:148]))
    except ValueError:
        raise TarFormatError(f"bad pax mtime {pax['mtime']!r}") from None


def _octal(value: int, width: int) -> bytes:
    """``width``-byte octal field, NUL-terminated (base-256 when it does not fit)."""
    text = b"%0*o" % (width - 1, value)
    if len(text) > width - 1:
        return (value | (0x80 << (8 * (width - 1)))).to_bytes(width, "big")
    return text + b"\0"


def _checksum(hdr: bytearray) -> None:
    hdr[148:156] = b" " * 8
    hdr[148:156] = b"%06o\0 " % sum(hdr)


def _parse_pax(data: bytes) -> dict[str, str]:
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        if space < 0:
            break
        try:
            length = int(data[pos:space])
        except ValueError as exc:
            raise TarFormatError("bad pax record length") from exc
        record = data[space + 1:pos + length - 1]
        key, _, value = record.partition(b"=")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return records


def _pax_block(records: dict[str, str]) -> bytes:
    """A complete 'x' header + data for ``records`` (used when ownership must change)."""
    body = b""
    for key, value in records.items():
        payload = f" {key}={value}\n".encode("utf-8", "surrogateescape")
        n = len(payload)
        while len(str(n).encode()) + len(payload) != n:
            n = len(str(n).encode()) + len(payload)
        body += str(n).encode() + payload
    info = tarfile.TarInfo("././@PaxHeader")
    info.type = b"x"
    info.size = len(body)
    hdr = info.tobuf(format=tarfile.USTAR_FORMAT)
    return hdr + body + bytes(-len(body) % BLOCK)


class _Reader:
    def __init__(self, src: BinaryIO, on_bytes: Callable[[int], None] | None) -> None:
        self.src = src
        self.on_bytes = on_bytes
        self.total = 0
        self._splice_ok: bool | None = None

    def exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.src.read(n - len(buf))
            if not chunk:
                raise TarFormatError(f"tar stream ended early ({self.total + len(buf)} bytes read)")
            buf += chunk
        self._count(n)
        return bytes(buf)

    def copy(self, n: int, dst: BinaryIO | None) -> None:
        """Copy (or skip, when ``dst`` is None) ``n`` bytes plus block padding."""
        remaining = n + (-n % BLOCK)
        if dst is not None and remaining >= SPLICE_MIN and self.splice_to(dst):
            # What is already buffered goes through Python, the rest pipe to pipe in the kernel.
            chunk = self.src.read1(remaining)
            if not chunk:
                raise TarFormatError("tar stream ended inside a member")
            remaining -= len(chunk)
            self._count(len(chunk))
            dst.write(chunk)
            dst.flush()
            remaining = self._splice(remaining, dst.fileno())
        while remaining:
            chunk = self.src.read(min(CHUNK, remaining))
            if not chunk:
                raise TarFormatError("tar stream ended inside a member")
            remaining -= len(chunk)
            self._count(len(chunk))
            if dst is not None:
                dst.write(chunk)

    def splice_to(self, dst: BinaryIO) -> bool:
        """Whether file data may bypass Python: Linux has splice(2), the output is a pipe and the
        input a pipe or a socket (the engine's export, :mod:`imagekit.engines.docker_socket`)."""
        if self._splice_ok is None:
            self._splice_ok = False
            # Only one buffer may sit over the fd, or bytes in a lower one would be skipped.
            if (hasattr(os, "splice") and isinstance(self.src, io.BufferedReader)
                    and isinstance(self.src.raw, io.FileIO)):
                try:
                    mode = os.fstat(self.src.fileno()).st_mode
                    self._splice_ok = ((stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode))
                                       and stat.S_ISFIFO(os.fstat(dst.fileno()).st_mode))
                except (OSError, ValueError, io.UnsupportedOperation):
                    pass
        return self._splice_ok

    def _splice(self, remaining: int, out_fd: int) -> int:
        """Move ``remaining`` bytes from the source pipe to ``out_fd``; returns what is left
        when splice(2) is refused (the caller copies that)."""
        in_fd = self.src.fileno()
        while remaining:
            try:
                moved = os.splice(in_fd, out_fd, min(remaining, CHUNK))
            except OSError as exc:
                if exc.errno in (errno.EINVAL, errno.ENOSYS):
                    self._splice_ok = False
                    return remaining
                if exc.errno == errno.EPIPE:
                    raise BrokenPipeError(exc.errno, exc.strerror) from None
                raise
            if moved == 0:
                raise TarFormatError("tar stream ended inside a member")
            remaining -= moved
            self._count(moved)
        return 0

    def _count(self, n: int) -> None:
        self.total += n
        if self.on_bytes is not None:
            self.on_bytes(n)


@dataclass
class RawMember:
    """One member as it lies in the stream: its extension blocks, its header, and what they say."""

    blocks: list[bytes]      # the extension blocks ('x', 'L', 'K') that describe it, raw
    hdr: bytearray           # the 512-byte header (patch it and call _checksum)
    pax: dict[str, str]
    member: Member
    aliases: set[str]        # every name a tool could file it under, normalised
    link_aliases: set[str]   # the same for a link's target
    data_size: int           # bytes of data that follow the header (before padding)


def read_member(reader: "_Reader", dst: BinaryIO | None = None) -> RawMember | None:
    """The next member of the stream, or None at the end-of-archive block. A global pax header is
    copied to ``dst`` as it is met (it describes what follows, not one member)."""
    pending: list[bytes] = []
    pax: dict[str, str] = {}
    long_name = long_link = None
    while True:
        hdr = bytearray(reader.exact(BLOCK))
        if hdr == ZERO_BLOCK:
            return None
        stored = _num(bytes(hdr[148:156]))
        probe = bytearray(hdr)
        probe[148:156] = b" " * 8
        if sum(probe) != stored:
            raise TarFormatError(f"bad tar header checksum at byte {reader.total - BLOCK}")
        typ = bytes(hdr[156:157])
        size = _num(bytes(hdr[124:136]))

        if typ in EXT_TYPES:
            data = reader.exact(size + (-size % BLOCK))
            pending.append(bytes(hdr) + data)
            payload = data[:size]
            if typ == b"x":
                pax.update(_parse_pax(payload))
            elif typ == b"L":
                long_name = payload.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            else:
                long_link = payload.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            continue
        if typ == GLOBAL_PAX:
            if dst is not None:
                dst.write(bytes(hdr))
            reader.copy(size, dst)
            continue
        break

    own = hdr[0:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    if hdr[257:263] == b"ustar\0" and hdr[345] != 0:
        prefix = hdr[345:500].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        own = f"{prefix}/{own}"
    name = pax.get("path") or long_name or own
    # Tools differ in which name wins (the last of pax path and GNU long name; GNU.sparse.name for
    # a sparse file), so each must pass the filter: no alias may bring a dropped file back. The
    # header's own name counts only without them (Go writes it cut short, non-ASCII removed).
    named = [n for n in (pax.get("path"), long_name, pax.get("GNU.sparse.name")) if n]
    aliases = {normalise(n) for n in (named or [own])}
    link = pax.get("linkpath") or long_link
    if link is None:
        link = hdr[157:257].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    link_aliases = {normalise(n) for n in ([n for n in (pax.get("linkpath"), long_link) if n] or [link])}
    if "size" in pax:
        size = int(pax["size"])
    member = Member(name=normalise(name), type=typ, mode=_num(bytes(hdr[100:108])),
                    uid=int(pax["uid"]) if "uid" in pax else _num(bytes(hdr[108:116])),
                    gid=int(pax["gid"]) if "gid" in pax else _num(bytes(hdr[116:124])),
                    size=size, linkname=link, mtime=_mtime(pax, hdr))
    data_size = size if typ not in (HARDLINK, SYMLINK, DIRECTORY, b"3", b"4", b"6") else 0
    return RawMember(blocks=pending, hdr=hdr, pax=pax, member=member, aliases=aliases,
                     link_aliases=link_aliases, data_size=data_size)


def renamed(raw: RawMember, name: str | None = None, linkname: str | None = None) -> list[bytes]:
    """The member's header blocks with a new name and/or link target: one pax header carries both
    (GNU long-name blocks and the ustar prefix go), the other pax records and fields stay."""
    records = dict(raw.pax)
    records["path"] = name if name is not None else raw.member.name
    if raw.member.type in (HARDLINK, SYMLINK):
        records["linkpath"] = linkname if linkname is not None else raw.member.linkname
    hdr = bytearray(raw.hdr)
    for field_, value in ((slice(0, 100), records["path"]), (slice(157, 257), records.get("linkpath", ""))):
        short = value.encode("utf-8", "surrogateescape")[:field_.stop - field_.start - 1]
        hdr[field_] = short.ljust(field_.stop - field_.start, b"\0")
    if hdr[257:263] == b"ustar\0":
        hdr[345:500] = bytes(155)
    _checksum(hdr)
    return [_pax_block(records), bytes(hdr)]


def filter_tar(src: BinaryIO, dst: BinaryIO, *,
               keep: Callable[[Member], bool],
               adjust: Callable[[Member], None] | None = None,
               extra: Callable[[set[str]], Iterable[tuple[tarfile.TarInfo, bytes]]] | None = None,
               on_bytes: Callable[[int], None] | None = None) -> FilterStats:
    """Copy the tar stream ``src`` to ``dst``, keeping members for which ``keep`` is true.

    ``adjust`` may change a kept member's mode/uid/gid; ``extra(seen_names)`` returns
    members appended before the end-of-archive marker.

    Every name a tool could file the member under (pax ``path`` and ``GNU.sparse.name``, a GNU long
    name, the header's own) must pass ``keep``. A kept hard link to a dropped member is held back and
    written after the extra members when one of them takes the target's name (Enroot rewrites the
    files it regenerates in place, so every other name of such a file shows its new content);
    otherwise :class:`DroppedLinkTarget` is raised.
    """
    reader = _Reader(src, on_bytes)
    stats = FilterStats()
    seen: set[str] = set()
    dropped_names: set[str] = set()
    held: list[tuple[list[str], str, list[bytes]]] = []   # (target's names, name, blocks) of links to dropped members

    while True:
        raw = read_member(reader, dst)
        if raw is None:
            break
        member, hdr, pending, pax, typ = raw.member, raw.hdr, raw.blocks, raw.pax, raw.member.type
        aliases, data_size = raw.aliases, raw.data_size
        wanted = keep(member) and all(keep(dataclasses.replace(member, name=alias))
                                      for alias in aliases - {member.name})
        if not wanted:
            stats.dropped += 1
            dropped_names.update(aliases)
            reader.copy(data_size, None)
        else:
            before = (member.mode, member.uid, member.gid, member.mtime)
            if adjust is not None:
                adjust(member)
            overriding = NAMES if pax else set()
            if (member.mode, member.uid, member.gid, member.mtime) != before:
                hdr[100:108] = _octal(member.mode & 0o7777, 8)
                hdr[108:116] = _octal(member.uid, 8)
                hdr[116:124] = _octal(member.gid, 8)
                hdr[136:148] = _octal(member.mtime, 12)
                hdr[OWNER_NAMES] = NO_NAMES
                _checksum(hdr)
                overriding = {"uid", "gid", *NAMES} | ({"mtime"} if member.mtime != before[3] else set())
            elif hdr[OWNER_NAMES] != NO_NAMES:
                # The checksum is a plain sum of the bytes: the names' bytes come off it.
                checksum = _num(bytes(hdr[148:156])) - sum(hdr[OWNER_NAMES])
                hdr[OWNER_NAMES] = NO_NAMES
                hdr[148:156] = b"%06o\0 " % checksum
            if overriding & set(pax):
                # Rewrite the pax header too, or it would override the patched fields.
                pending = [b for b in pending if b[156:157] != b"x"]
                records = {k: v for k, v in pax.items() if k not in overriding}
                if records:
                    pending.append(_pax_block(records))
            lost = sorted(raw.link_aliases & dropped_names) if typ == HARDLINK else []
            if lost:
                held.append((lost, member.name, [*pending, bytes(hdr)]))
            else:
                for block in pending:
                    dst.write(block)
                dst.write(bytes(hdr))
                reader.copy(data_size, dst)
                seen.add(member.name)
                stats.kept.append(member.name)

    provided: set[str] = set()
    if extra is not None:
        for info, data in extra(seen):
            provided.add(normalise(info.name))
            dst.write(info.tobuf(format=tarfile.PAX_FORMAT))
            if data:
                dst.write(data + bytes(-len(data) % BLOCK))
    for targets, name, blocks in held:
        if not provided.intersection(targets):
            raise DroppedLinkTarget(name, targets[0])
        for block in blocks:
            dst.write(block)
        seen.add(name)
        stats.kept.append(name)
    dst.write(ZERO_BLOCK * 2)
    stats.bytes_in = reader.total
    return stats


def file_entry(name: str, data: bytes, *, mode: int = 0o644, mtime: int = 0) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, mtime
    info.uid = info.gid = 0
    return info, data


def dir_entry(name: str, *, mode: int = 0o755, mtime: int = 0) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, mtime
    return info, b""


def symlink_entry(name: str, target: str, *, mtime: int = 0) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, target, 0o777, mtime
    return info, b""


def missing_dirs(path: str, seen: set[str]) -> list[str]:
    """Parents of ``path`` (and ``path`` itself) not present in ``seen``, outermost first."""
    parts = normalise(path).split("/") if normalise(path) else []
    out = []
    for i in range(1, len(parts) + 1):
        candidate = "/".join(parts[:i])
        if candidate not in seen:
            out.append(candidate)
    return out

