"""An image's layers, merged into the one flattened tar stream ``docker export`` would give.

The export path with no engine (a registry, an OCI layout, a ``docker save`` tarball) has the
image's layer tars, not a container. They are applied the way the OCI image spec's changeset rules
and overlayfs do it, but as a stream: nothing is unpacked on disk, and each layer is read (and
inflated) once, newest first. When a layer is read, every layer above it is known, so whether each
of its members survives is known too: a higher layer replaces it (an entry at the same path) or
deletes it (a ``.wh.NAME`` whiteout, a ``.wh..wh..opq`` opaque marker on a parent, a non-directory
where a parent directory was). What survives is copied byte for byte. A directory goes out once,
with the header of the highest layer that has it, before anything inside it (a layer that holds a
member but not its parent makes the parent, 0755 root, as the engine's ``mkdir -p`` does).

Hard links are written last, when every name they can point at has gone out. A link's content is
the entry its target named when the link's layer was applied: the first entry at the target found
below the link (or before it in its own layer). A file that a higher layer deletes but that a
surviving hard link still names goes out under that link's name, and the other links point there;
when that link comes later in the file's own layer, the file was already passed by, and that one
layer is read again at the end for it (the only case that reads a layer twice).

Layers are checked against their digests as they stream (the feeder raises at the end of a layer
whose bytes do not hash to its digest; the export then writes nothing). Docker's init layer (empty
``/etc/hosts``, ``/etc/hostname``, ``/etc/resolv.conf``, ``/etc/mtab`` → ``/proc/mounts``, ``/.dockerenv``,
``/dev/console``, and ``/dev/pts``, ``/dev/shm``, ``/proc``, ``/sys`` where missing) sits above the image's
layers in every container ``docker export`` reads, so it is applied here as a last layer: both paths
give one tree, and Enroot and Apptainer bind their own files over these at start anyway. It is held
in memory: its files replace the image's, but go out after the image's layers (their parents keep
the image's attributes), and its directories only where the image has none.

One difference from applying the layers in order: a layer that names a directory after something
inside it (no builder writes layers so; tar and Docker put the parent first) gets that directory
with the attributes ``mkdir -p`` gives, as the member inside it had to go out first.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import tarfile
import threading
from dataclasses import dataclass, field
from typing import IO, BinaryIO, Callable, Iterator, Mapping, Sequence

from imagekit.util.errors import ImagekitError, IntegrityError
from imagekit.util.sizes import parse_size
from imagekit.export import tarstream
from imagekit.export.tarstream import DIRECTORY, HARDLINK, ZERO_BLOCK, RawMember

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"

GZIP_TYPES = frozenset({"application/vnd.oci.image.layer.v1.tar+gzip",
                        "application/vnd.docker.image.rootfs.diff.tar.gzip"})
ZSTD_TYPES = frozenset({"application/vnd.oci.image.layer.v1.tar+zstd"})
TAR_TYPES = frozenset({"application/vnd.oci.image.layer.v1.tar",
                       "application/vnd.docker.image.rootfs.diff.tar"})
FOREIGN_TYPES = frozenset({"application/vnd.oci.image.layer.nondistributable.v1.tar",
                           "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
                           "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
                           "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"})
LAYER_TYPES = GZIP_TYPES | ZSTD_TYPES | TAR_TYPES


# The most stored bytes one layer may declare. Registries cap layers near here (Docker Hub and GHCR at
# 10 GB, ECR at 52,000 MiB), the largest layers of CUDA and PyTorch images are a few GiB compressed and
# ~15 GiB as `docker save` writes them (uncompressed): 32 GiB lets all of them through, while a blob that
# only claims to be larger (sparse, or a registry that lies) is refused before a minute of reading.
MAX_LAYER_ENV = "IMAGEKIT_MAX_LAYER_SIZE"
DEFAULT_MAX_LAYER_BYTES = 32 << 30

# A compressed layer may inflate to MAX_EXPANSION times its stored size, and to MIN_EXPANSION_BYTES
# whatever its size. gzip's format cannot pass 1032:1, so no gzip layer trips it; a zstd layer
# that does is a decompression bomb (a few KiB that inflate to terabytes of zeros).
MAX_EXPANSION = 1100
MIN_EXPANSION_BYTES = 1 << 30


class LayerError(ImagekitError):
    """A layer that cannot be applied: damaged, not a layer, or not a tar this merge can read."""


class DamagedLayer(LayerError, IntegrityError):
    """Stored bytes the decompressor refuses: damaged, or not the bytes the layer's digest names (a
    registry that lies). The decompressor stops before the digest can be checked at the end, so it
    is the digest-mismatch exit status either way."""

    exit_code = IntegrityError.exit_code


class Cancelled(BrokenPipeError):
    """The export stopped (a signal): a feeder or drain stops at its next chunk."""


@dataclass
class Layer:
    """One layer as its source stores it. ``feed(out)`` writes its stored bytes to ``out`` and raises
    when they do not match ``digest`` (after the last byte)."""

    digest: str
    size: int | None
    media_type: str
    feed: Callable[[IO[bytes]], None]
    where: str = ""          # for messages: "layer 3 of REF"
    # Docker's init layer makes its directories only where the image has none, and names no parents.
    weak_dirs: bool = False


def max_layer_bytes(env: Mapping[str, str] | None = None) -> int:
    """The most bytes a stored layer may declare: ``IMAGEKIT_MAX_LAYER_SIZE`` (a site setting, e.g.
    ``64G``), else :data:`DEFAULT_MAX_LAYER_BYTES`."""
    value = (os.environ if env is None else env).get(MAX_LAYER_ENV)
    return parse_size(value) if value else DEFAULT_MAX_LAYER_BYTES


def check_size(layer: Layer, env: Mapping[str, str] | None = None) -> None:
    """LayerError, before a byte is read, when ``layer`` declares more stored bytes than a layer may
    be: a sparse 64 GiB blob in an ``oci:`` layout costs 28 KB of disk and minutes of reading (H12 of
    ../shared/reviews/security-4.md)."""
    limit = max_layer_bytes(env)
    if layer.size is not None and layer.size > limit:
        raise LayerError(f"{layer.where} ({layer.digest}) declares {layer.size} bytes, more than the {limit} a "
                         f"layer may be ({MAX_LAYER_ENV}): refused before reading",
                         f"if the site has such layers, raise it ({MAX_LAYER_ENV}=64G)")


def check_media_type(layer: Layer) -> None:
    if layer.media_type in FOREIGN_TYPES:
        raise LayerError(f"{layer.where} ({layer.digest}) is a foreign layer ({layer.media_type}), whose bytes "
                         "lie outside the registry", "convert a Linux image whose layers the registry holds")
    if layer.media_type not in LAYER_TYPES:
        raise LayerError(f"{layer.where} ({layer.digest}) has media type {layer.media_type!r}, which is not a "
                         "container image layer (an artifact, a Helm chart or a signature?)",
                         "give the reference of a container image; layers are "
                         + ", ".join(sorted(LAYER_TYPES)))


def _decompressor(media_type: str) -> list[str] | None:
    if media_type in TAR_TYPES:
        return None
    tool = "zstd" if media_type in ZSTD_TYPES else "gzip"
    # Inflating is most of a merge's CPU. ISA-L's igzip (Debian's isal) inflates about 2.5x faster
    # than pigz, and pigz (which reads, writes and checks the CRC on threads of their own) about
    # 1.5x faster than gzip; all three check the CRC and refuse a cut-short stream.
    found = (tool == "gzip" and (shutil.which("igzip") or shutil.which("pigz"))) or shutil.which(tool)
    if found is None:
        raise LayerError(f"a {media_type} layer needs {tool}, which is not installed",
                         f"apt-get install {tool}")
    return [found, "-dc"]


class _Sink(io.RawIOBase):
    """What a layer's feeder writes into: the decompressor's stdin (or the pipe itself). Once
    ``cancel`` is set, the next write raises :class:`Cancelled`: a feeder stops within a chunk."""

    def __init__(self, fd: int, cancel: threading.Event | None = None) -> None:
        self.fd = fd
        self.cancel = cancel

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("the export was stopped")
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        return len(data)


def expansion_limit(layer: Layer) -> int:
    """How many bytes ``layer`` may inflate to (see :data:`MAX_EXPANSION`)."""
    return max(MAX_EXPANSION * (layer.size or 0), MIN_EXPANSION_BYTES)


class _Bounded(io.RawIOBase):
    """The decompressor's output, refused (LayerError) once it passes :func:`expansion_limit`."""

    def __init__(self, raw: BinaryIO, layer: Layer) -> None:
        self.raw, self.layer, self.limit, self.count = raw, layer, expansion_limit(layer), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[override]
        n = self.raw.readinto(buf)  # type: ignore[attr-defined]
        self.count += n or 0
        if self.count > self.limit:
            raise LayerError(f"{self.layer.where} ({self.layer.digest}) inflates past {self.limit} bytes "
                             f"({MAX_EXPANSION}x its {self.layer.size} stored bytes, or 1 GiB): a decompression "
                             "bomb, refused", "nothing was written; a real layer never inflates this much "
                             "(gzip cannot pass 1032x)")
        return n or 0


@contextlib.contextmanager
def layer_tar(layer: Layer, cancel: threading.Event | None = None) -> Iterator[BinaryIO]:
    """The layer's tar stream, decompressed (and bounded: :func:`expansion_limit`). The stored bytes
    are fed from a thread (a registry download, a file) and hashed on the way; leaving the block
    drains the stream and raises the feeder's error (a digest mismatch) before anything else.
    ``cancel`` set stops the feeder and the drain at their next chunk (a signal ends the export)."""
    check_media_type(layer)
    cmd = _decompressor(layer.media_type)
    read_fd, write_fd = os.pipe()          # the feeder writes the stored bytes into write_fd
    proc = None
    try:
        if cmd is not None:
            proc = subprocess.Popen(cmd, stdin=read_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    bufsize=0)
            os.close(read_fd)
            stream: BinaryIO = io.BufferedReader(_Bounded(proc.stdout, layer),  # type: ignore[arg-type]
                                                 buffer_size=1 << 20)
        else:
            stream = io.BufferedReader(io.FileIO(read_fd, "r"), buffer_size=1 << 20)
    except BaseException:
        os.close(write_fd)
        if proc is None:
            os.close(read_fd)
        raise
    failure: list[BaseException] = []

    def run() -> None:
        try:
            layer.feed(_Sink(write_fd, cancel))
        except BrokenPipeError:
            pass            # the reader stopped first; its own error says why
        except BaseException as exc:   # noqa: BLE001 - handed to the reading thread
            failure.append(exc)
        finally:
            os.close(write_fd)

    feeder = threading.Thread(target=run, name=f"feed {layer.digest[:19]}", daemon=True)
    feeder.start()
    ok = False
    try:
        yield stream
        while stream.read(1 << 20):     # what follows the end-of-archive blocks is fed and hashed too
            if cancel is not None and cancel.is_set():
                raise Cancelled("the export was stopped")
        ok = True
    finally:
        gave_up = 0        # the decompressor's status when it stopped on its own before the reader
        if not ok and proc is not None:
            try:
                # A tar stream cut short: the decompressor has usually stopped on damage it names
                # better than the tar reader can (igzip writes nothing of a stream whose CRC fails).
                gave_up = proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                proc.kill()
        stream.close()
        feeder.join()
        rc, detail = 0, ""
        if proc is not None:
            rc = proc.wait()
            detail = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            if proc.stderr:
                proc.stderr.close()
        if failure:
            raise failure[0]
        if rc != 0 and (ok or gave_up):
            raise DamagedLayer(f"{layer.where} ({layer.digest}) does not decompress ({detail[-300:]}): its bytes "
                               "are damaged, or not the ones its digest names", "nothing was written; push or "
                               "save the image again, or ask why the registry serves other bytes")


def _parts(path: str) -> list[str]:
    """The proper ancestors of ``path``, outermost first."""
    bits = path.split("/")
    return ["/".join(bits[:i]) for i in range(1, len(bits))]


def _marker(path: str) -> tuple[str, str] | None:
    """("opaque", DIR) or ("whiteout", PATH) for a whiteout file, else None."""
    head, _, base = path.rpartition("/")
    if base == OPAQUE:
        return "opaque", head
    if base.startswith(WHITEOUT):
        return "whiteout", f"{head}/{base[len(WHITEOUT):]}" if head else base[len(WHITEOUT):]
    return None


def _members(stream: BinaryIO, where: str) -> Iterator[tuple[tarstream._Reader, RawMember]]:
    reader = tarstream._Reader(stream, None)
    while True:
        try:
            raw = tarstream.read_member(reader, None)
        except tarstream.TarFormatError as exc:
            raise LayerError(f"{where} is not a tar stream this export can read: {exc}") from None
        if raw is None:
            return
        if len(raw.aliases) > 1:
            names = ", ".join(sorted(f"/{a}" for a in raw.aliases))
            raise LayerError(f"{where} has a member whose names disagree ({names})",
                             "tools would file it under different names; rebuild the layer")
        yield reader, raw


def _implicit_dir(path: str) -> list[bytes]:
    info, _ = tarstream.dir_entry(path)
    return [info.tobuf(format=tarfile.PAX_FORMAT)]


Node = tuple[int, int]       # (layer index, member number in the layer)
_DIR: Node = (-1, -1)        # what a link resolves to when its target is a directory


@dataclass
class _Link:
    node: Node
    path: str
    target: str
    raw: RawMember
    alive: bool               # no higher layer replaces or deletes it
    where: str
    whited: bool              # its layer whited the target out before naming it
    points: Node | None = None


@dataclass
class _Merge:
    """What the layers above the one being read say (see the module docstring). Each map holds the
    highest layer that did it: newest first, the first to set a path is the highest."""

    layers: Sequence[Layer]
    dst: BinaryIO
    cancel: threading.Event | None = None
    entry: dict[str, int] = field(default_factory=dict)       # a member at the path (a directory made too)
    nondir: dict[str, int] = field(default_factory=dict)      # ... a non-directory there
    whiteout: dict[str, int] = field(default_factory=dict)    # ... a whiteout of the path
    whiteouts: dict[str, list[int]] = field(default_factory=dict)   # every layer with one
    opaque: dict[str, int] = field(default_factory=dict)      # ... made the directory opaque
    emitted: set[str] = field(default_factory=set)            # names written (or held for a link)
    links: dict[Node, _Link] = field(default_factory=dict)
    waiting: dict[str, list[Node]] = field(default_factory=dict)   # links whose target is below
    pointed_by: dict[Node, list[Node]] = field(default_factory=dict)
    content_name: dict[Node, str] = field(default_factory=dict)   # content a link may name -> its name

    def deleted(self, layer: int, path: str, parts: list[str]) -> bool:
        """Whether a layer above ``layer`` replaces or deletes ``path`` from it."""
        if self.entry.get(path, -1) > layer or self.whiteout.get(path, -1) > layer:
            return True
        return any(self.nondir.get(a, -1) > layer or self.whiteout.get(a, -1) > layer
                   or self.opaque.get(a, -1) > layer for a in parts)

    def exists(self, path: str) -> bool:
        return path in self.entry and self.entry[path] > self.whiteout.get(path, -1)

    def parents(self, parts: list[str]) -> None:
        # Not written yet: no layer above or before this member in its own layer named it, so its
        # layer made it (see the module docstring for the one exception).
        for anc in parts:
            if anc not in self.emitted:
                for block in _implicit_dir(anc):
                    self.dst.write(block)
                self.emitted.add(anc)

    def write(self, blocks: list[bytes], path: str, parts: list[str]) -> None:
        self.parents(parts)
        for block in blocks:
            self.dst.write(block)
        self.emitted.add(path)

    def holders(self, node: Node) -> list[_Link]:
        """The links whose content is ``node``, lowest layer first."""
        out, todo = [], list(self.pointed_by.get(node, ()))
        while todo:
            link = self.links[todo.pop()]
            out.append(link)
            todo.extend(self.pointed_by.get(link.node, ()))
        return sorted(out, key=lambda link: link.node)

    def point(self, link: _Link, node: Node) -> None:
        link.points = node
        self.pointed_by.setdefault(node, []).append(link.node)

    def found(self, path: str, layer: int, node: Node) -> None:
        """The first entry at ``path`` in ``layer`` (``node``, or a directory): the content of the
        links above it that name ``path`` (the target their layer saw), unless a whiteout in
        between removed it."""
        waiters = self.waiting.get(path)
        if not waiters:
            return
        keep = []
        for ln in waiters:
            link = self.links[ln]
            if ln[0] == layer:       # named later in this layer: its target lies further down
                keep.append(ln)
                continue
            if link.whited or any(layer < w < ln[0] for w in self.whiteouts.get(path, ())):
                raise LayerError(f"{link.where}: /{link.path} is a hard link to /{path}, which no layer "
                                 "below it or before it holds", "rebuild the image")
            self.point(link, node)
        if keep:
            self.waiting[path] = keep
        else:
            del self.waiting[path]

    def content(self, link: _Link) -> Node:
        node = link.points
        while node in self.links:
            node = self.links[node].points   # type: ignore[index]
        return node   # type: ignore[return-value]

    # --- one layer ---------------------------------------------------------------------------

    def apply(self, index: int) -> None:
        layer = self.layers[index]
        here: set[str] = set()            # directories this layer has, named or made
        first: dict[str, Node] = {}       # the first entry at each path in this layer
        whited: set[str] = set()          # targets this layer whited out so far
        dst = self.dst
        with layer_tar(layer, self.cancel) as stream:
            for seq, (reader, raw) in enumerate(_members(stream, layer.where)):
                path, typ = raw.member.name, raw.member.type
                if not path:
                    reader.copy(raw.data_size, None)
                    continue
                node = (index, seq)
                parts = _parts(path)
                for anc in parts:
                    if anc not in here:
                        here.add(anc)
                        self.entry.setdefault(anc, index)
                        if anc not in first:
                            first[anc] = _DIR
                            self.found(anc, index, _DIR)
                mark = _marker(path)
                if mark is not None:
                    kind, target = mark
                    if kind == "opaque":
                        self.opaque.setdefault(target, index)
                    else:
                        self.whiteout.setdefault(target, index)
                        self.whiteouts.setdefault(target, []).append(index)
                        whited.add(target)
                    # The directory it sits in is in this layer even when nothing else there is.
                    if parts and not self.deleted(index, parts[-1], parts[:-1]):
                        self.parents(parts)
                    reader.copy(raw.data_size, None)
                    continue
                gone = self.deleted(index, path, parts)
                self.entry.setdefault(path, index)
                if typ == DIRECTORY:
                    here.add(path)
                    if path not in first:
                        first[path] = _DIR
                        self.found(path, index, _DIR)
                    if not gone and path not in self.emitted:
                        self.write([*raw.blocks, bytes(raw.hdr)], path, parts)
                    reader.copy(raw.data_size, None)
                    continue
                self.nondir.setdefault(path, index)
                # A link's target is what its layer held before it (a link to its own name: below).
                prior = first.get(tarstream.normalise(raw.member.linkname)) if typ == HARDLINK else None
                if path not in first:
                    first[path] = node
                    self.found(path, index, node)
                if typ == HARDLINK:
                    target = tarstream.normalise(raw.member.linkname)
                    alive = not gone and path not in self.emitted
                    link = _Link(node, path, target, raw, alive, layer.where, target in whited)
                    self.links[node] = link
                    if alive:      # its parents go out now, with this layer's view of them
                        self.parents(parts)
                        self.emitted.add(path)
                    if prior is not None:
                        self.point(link, prior)
                    else:
                        self.waiting.setdefault(target, []).append(node)
                    continue
                if not gone:
                    if path in self.emitted:     # the same name twice in one layer: the first stays
                        reader.copy(raw.data_size, None)
                        continue
                    self.write([*raw.blocks, bytes(raw.hdr)], path, parts)
                    reader.copy(raw.data_size, dst)
                    self.content_name[node] = path
                    continue
                alive_holders = [h for h in self.holders(node) if h.alive]
                if alive_holders:    # deleted here, but a hard link above still names the content
                    name = alive_holders[0].path
                    self.write(tarstream.renamed(raw, name=name), name, _parts(name))
                    reader.copy(raw.data_size, dst)
                    self.content_name[node] = name
                else:
                    reader.copy(raw.data_size, None)

    def reread(self, index: int, wanted: dict[int, str]) -> None:
        """Read layer ``index`` again for the members numbered in ``wanted``: deleted files whose
        surviving links came after them in their own layer. Each goes out under its link's name."""
        layer = self.layers[index]
        with layer_tar(layer, self.cancel) as stream:
            for seq, (reader, raw) in enumerate(_members(stream, layer.where)):
                name = wanted.get(seq)
                if name is None:
                    reader.copy(raw.data_size, None)
                    continue
                self.dst.write(b"".join(tarstream.renamed(raw, name=name)))
                reader.copy(raw.data_size, self.dst)
                self.content_name[(index, seq)] = name

    def links_out(self) -> None:
        for target, waiters in self.waiting.items():
            link = self.links[waiters[0]]
            raise LayerError(f"{link.where}: /{link.path} is a hard link to /{target}, which no layer "
                             "below it or before it holds", "rebuild the image")
        alive = sorted((link for link in self.links.values() if link.alive), key=lambda link: link.node)
        missing: dict[Node, str] = {}
        for link in alive:
            node = self.content(link)
            if node == _DIR:
                raise LayerError(f"{link.where}: /{link.path} is a hard link to /{link.target}, a directory",
                                 "rebuild the image")
            if node not in self.content_name:
                missing.setdefault(node, link.path)    # the lowest surviving link takes the content
        by_layer: dict[int, dict[int, str]] = {}
        for (index, seq), name in missing.items():
            by_layer.setdefault(index, {})[seq] = name
        for index in sorted(by_layer, reverse=True):
            self.reread(index, by_layer[index])
        for link in alive:
            name = self.content_name[self.content(link)]
            if name != link.path:
                for block in tarstream.renamed(link.raw, linkname=name):
                    self.dst.write(block)

    def weak(self, index: int) -> list[tuple[RawMember, bytes]]:
        """Read a weak layer (Docker's init layer, the last): its non-directories replace what is below
        now; they and its directories go out at the end (see :meth:`weak_out`)."""
        layer = self.layers[index]
        held: list[tuple[RawMember, bytes]] = []
        with layer_tar(layer, self.cancel) as stream:
            for reader, raw in _members(stream, layer.where):
                path = raw.member.name
                if not path:
                    reader.copy(raw.data_size, None)
                    continue
                if raw.member.type == HARDLINK or _marker(path) is not None:
                    raise LayerError(f"{layer.where}: /{path} is a hard link or whiteout, which a layer made "
                                     "only where the image has nothing cannot hold")
                data = reader.exact(raw.data_size + (-raw.data_size % tarstream.BLOCK))
                if raw.member.type != DIRECTORY:
                    self.entry.setdefault(path, index)
                    self.nondir.setdefault(path, index)
                held.append((raw, data))
        return held

    def weak_out(self, index: int, held: list[tuple[RawMember, bytes]]) -> None:
        for raw, data in held:
            path = raw.member.name
            if raw.member.type == DIRECTORY:
                if self.exists(path) or path in self.emitted:
                    continue
                self.entry[path] = index
            elif path in self.emitted:
                continue
            self.write([*raw.blocks, bytes(raw.hdr)], path, _parts(path))
            self.dst.write(data)


def merge(layers: Sequence[Layer], dst: BinaryIO, cancel: threading.Event | None = None) -> None:
    """Write the merged root filesystem of ``layers`` (lowest first) to ``dst`` as one tar stream.
    Only the last layer may be weak (Docker's init layer). ``cancel``: see :func:`layer_tar`."""
    if any(layer.weak_dirs for layer in layers[:-1]):
        raise ValueError("only the last layer may make its directories only where none are")
    m = _Merge(layers, dst, cancel)
    top = len(layers)
    weak: list[tuple[RawMember, bytes]] = []
    if layers and layers[-1].weak_dirs:
        top -= 1
        weak = m.weak(top)
    for index in range(top - 1, -1, -1):
        m.apply(index)
    m.links_out()
    if weak:
        m.weak_out(top, weak)
    dst.write(ZERO_BLOCK * 2)


# What Docker's init layer puts over every container's root filesystem (docker_init_layer): files
# that no image layer holds, made for the engine's own bind mounts at run time.
INIT_LAYER_FILES = ("etc/hostname", "etc/hosts", "etc/resolv.conf")
INIT_LAYER_MTAB = ("etc/mtab", "/proc/mounts")


def made_by_docker(member: tarstream.Member) -> bool:
    """True for a member of ``docker export``'s stream that Docker's init layer made, as it makes
    them (an empty 0755 ``/etc/hosts``, ``/etc/hostname``, ``/etc/resolv.conf``; ``/etc/mtab`` ->
    ``/proc/mounts``), not the image's layers. ``enroot import`` of the image from a registry has
    none of them; an image's own file at one of these paths is hidden by the init layer from the
    engine and from :func:`docker_init_layer` alike."""
    if member.name in INIT_LAYER_FILES:
        return member.type in tarstream.REGULAR and member.size == 0 and member.mode & 0o7777 == 0o755
    if member.name == INIT_LAYER_MTAB[0]:
        return member.type == tarstream.SYMLINK and member.linkname == INIT_LAYER_MTAB[1]
    return False


# What `docker export` shows with the time its container was made, not the image's: the init layer's
# entries and the directories that hold them. Two exports of one image differed in these alone.
CONTAINER_TIMED = frozenset((".dockerenv", "dev", "dev/console", "dev/pts", "dev/shm", "proc", "sys", "etc",
                             *INIT_LAYER_FILES, INIT_LAYER_MTAB[0]))


def steady_times(when: int | None) -> Callable[[tarstream.Member], None] | None:
    """An ``adjust`` that gives :data:`CONTAINER_TIMED` members the time ``when`` (the image's), so that
    two exports of one image are the same bytes; None (no change) without a time."""
    if when is None:
        return None

    def adjust(member: tarstream.Member) -> None:
        if member.name in CONTAINER_TIMED:
            member.mtime = when

    return adjust


def docker_init_layer() -> Layer:
    """Docker's init layer (moby daemon/initlayer), as ``docker export`` shows it on Docker 20.10: its
    files and ``/etc/mtab`` replace the image's (empty, 0755), its directories appear only where the
    image has none, and the parents keep the image's attributes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("dev/pts", "dev/shm", "proc", "sys"):
            info, _ = tarstream.dir_entry(name)
            tar.addfile(info)
        for name in (".dockerenv", "dev/console", *INIT_LAYER_FILES):
            info, data = tarstream.file_entry(name, b"", mode=0o755)
            tar.addfile(info, io.BytesIO(data))
        info, _ = tarstream.symlink_entry(*INIT_LAYER_MTAB)
        tar.addfile(info)
    data = buf.getvalue()

    def feed(out: IO[bytes]) -> None:
        out.write(data)

    return Layer(digest="docker-init-layer", size=len(data), media_type="application/vnd.oci.image.layer.v1.tar",
                 feed=feed, where="Docker's init layer", weak_dirs=True)
