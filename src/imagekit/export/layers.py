"""An image's layers, merged into the one flattened tar stream ``docker export`` would give.

The export path with no engine (a registry, an OCI layout, a ``docker save`` tarball) has the
image's layer tars, not a container. They are applied the way the OCI image spec's changeset rules
and overlayfs do it, but as a stream: nothing is unpacked on disk. Two passes over the layers:

1. Headers only: for every path, the highest layer that replaces it (an entry at the same path),
   deletes it (a ``.wh.NAME`` whiteout, a ``.wh..wh..opq`` opaque marker on a parent, a non-directory
   where a parent directory was), each directory's last header, and each hard link's content (the
   entry its target named when its layer was applied, which may lie in a lower layer).
2. The members again, in layer order: what no higher layer replaces or deletes is copied byte for
   byte. A directory goes out once, with its final header, before the first member inside it. A file
   that a higher layer deletes, but that a surviving hard link still names, goes out under that
   link's name, and the other links point there.

Layers are checked against their digests as they stream (the feeder raises at the end of a layer
whose bytes do not hash to its digest; the export then writes nothing). Docker's init layer (empty
``/etc/hosts``, ``/etc/hostname``, ``/etc/resolv.conf``, ``/etc/mtab`` → ``/proc/mounts``, ``/.dockerenv``,
``/dev/console``, and ``/dev/pts``, ``/dev/shm``, ``/proc``, ``/sys`` where missing) sits above the image's
layers in every container ``docker export`` reads, so it is applied here as a last layer: both paths
give one tree, and Enroot and Apptainer bind their own files over these at start anyway. A member
whose parent its layer does not name gets that parent made in its layer (0755, root), as the engine
makes it.
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
from typing import IO, BinaryIO, Callable, Iterator, Sequence

from imagekit.errors import ImagekitError
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


class LayerError(ImagekitError):
    """A layer that cannot be applied: damaged, not a layer, or not a tar this merge can read."""


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
    # pigz inflates on one thread too, but reads, writes and checks the CRC on others: about 1.5x
    # gzip's speed here, and every layer is inflated twice (the plan, then the merge).
    found = (tool == "gzip" and shutil.which("pigz")) or shutil.which(tool)
    if found is None:
        raise LayerError(f"a {media_type} layer needs {tool}, which is not installed",
                         f"apt-get install {tool}")
    return [found, "-dc"]


class _Sink(io.RawIOBase):
    """What a layer's feeder writes into: the decompressor's stdin (or the pipe itself)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        return len(data)


@contextlib.contextmanager
def layer_tar(layer: Layer) -> Iterator[BinaryIO]:
    """The layer's tar stream, decompressed. The stored bytes are fed from a thread (a registry
    download, a file) and hashed on the way; leaving the block drains the stream and raises the
    feeder's error (a digest mismatch) before anything else."""
    check_media_type(layer)
    cmd = _decompressor(layer.media_type)
    read_fd, write_fd = os.pipe()          # the feeder writes the stored bytes into write_fd
    proc = None
    try:
        if cmd is not None:
            proc = subprocess.Popen(cmd, stdin=read_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    bufsize=0)
            os.close(read_fd)
            stream: BinaryIO = io.BufferedReader(proc.stdout, buffer_size=1 << 20)  # type: ignore[arg-type]
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
            layer.feed(_Sink(write_fd))
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
            pass
        ok = True
    finally:
        if not ok and proc is not None:
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
        if ok and rc != 0:
            raise LayerError(f"{layer.where} ({layer.digest}) does not decompress: {detail[-300:]}",
                             "the layer is damaged; push or save the image again")


def _parts(path: str) -> list[str]:
    """The proper ancestors of ``path``, outermost first."""
    bits = path.split("/")
    return ["/".join(bits[:i]) for i in range(1, len(bits))]


@dataclass
class Plan:
    """What the header pass learns (see the module docstring)."""

    entry: dict[str, int] = field(default_factory=dict)       # highest layer with a member at the path
    nondir: dict[str, int] = field(default_factory=dict)      # ... with a non-directory there
    whiteout: dict[str, int] = field(default_factory=dict)    # ... with a whiteout of the path
    opaque: dict[str, int] = field(default_factory=dict)      # ... that made the directory opaque
    final_dir: dict[str, list[bytes]] = field(default_factory=dict)
    content: dict[tuple[int, str], tuple[int, str]] = field(default_factory=dict)   # link -> content entry
    holders: dict[tuple[int, str], list[tuple[int, str]]] = field(default_factory=dict)
    ignored: set[tuple[int, str]] = field(default_factory=set)   # weak directories that found one

    def exists(self, path: str) -> bool:
        return path in self.entry and self.entry[path] > self.whiteout.get(path, -1)

    def deleted(self, layer: int, path: str) -> bool:
        """Whether a layer above ``layer`` replaces or deletes ``path`` from it."""
        if max(self.entry.get(path, -1), self.whiteout.get(path, -1)) > layer:
            return True
        return any(max(self.nondir.get(a, -1), self.whiteout.get(a, -1), self.opaque.get(a, -1)) > layer
                   for a in _parts(path))


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


def plan(layers: Sequence[Layer]) -> Plan:
    """Pass 1: read every layer's headers."""
    p = Plan()
    for index, layer in enumerate(layers):
        here: set[str] = set()       # directories this layer has, named or implied
        with layer_tar(layer) as stream:
            for reader, raw in _members(stream, layer.where):
                reader.copy(raw.data_size, None)
                path = raw.member.name
                if not path:
                    continue
                if not layer.weak_dirs:
                    # A member whose parent its layer does not name: the engine makes the parent in this
                    # layer (`mkdir -p`, 0755), and that directory's attributes then win (overlayfs).
                    for anc in _parts(path):
                        if anc not in here:
                            here.add(anc)
                            p.entry[anc] = index
                            p.final_dir[anc] = _implicit_dir(anc)
                mark = _marker(path)
                if mark is not None:
                    kind, target = mark
                    (p.opaque if kind == "opaque" else p.whiteout)[target] = index
                    if kind == "whiteout":
                        p.final_dir.pop(target, None)
                    continue
                if raw.member.type == HARDLINK:
                    target = tarstream.normalise(raw.member.linkname)
                    held = p.entry.get(target)
                    if held is None or p.whiteout.get(target, -1) > held:
                        raise LayerError(f"{layer.where}: /{path} is a hard link to /{target}, which no layer "
                                         "below it or before it holds", "rebuild the image")
                    content = p.content.get((held, target), (held, target))
                    p.content[(index, path)] = content
                    p.holders.setdefault(content, []).append((index, path))
                if raw.member.type == DIRECTORY:
                    if layer.weak_dirs and p.exists(path):
                        p.ignored.add((index, path))
                        continue
                    here.add(path)
                    p.final_dir[path] = [*raw.blocks, bytes(raw.hdr)]
                else:
                    p.nondir[path] = index
                    p.final_dir.pop(path, None)
                p.entry[path] = index
    return p


def merge(layers: Sequence[Layer], dst: BinaryIO) -> None:
    """Write the merged root filesystem of ``layers`` (lowest first) to ``dst`` as one tar stream."""
    p = plan(layers)
    emitted: set[str] = set()
    content_name: dict[tuple[int, str], str] = {}

    def parents(path: str) -> None:
        for anc in _parts(path):
            if anc not in emitted:
                blocks = p.final_dir.get(anc)
                if blocks is None:     # named by no layer: made as `mkdir -p` makes it
                    blocks = _implicit_dir(anc)
                for block in blocks:
                    dst.write(block)
                emitted.add(anc)

    def write(blocks: list[bytes], path: str) -> None:
        parents(path)
        for block in blocks:
            dst.write(block)
        emitted.add(path)

    for index, layer in enumerate(layers):
        with layer_tar(layer) as stream:
            for reader, raw in _members(stream, layer.where):
                path, typ = raw.member.name, raw.member.type
                here = (index, path)
                if not path or _marker(path) is not None or here in p.ignored:
                    reader.copy(raw.data_size, None)
                    continue
                if p.deleted(index, path):
                    alive = [h for h in p.holders.get(here, []) if not p.deleted(*h)] if typ != HARDLINK else []
                    if alive:   # deleted here, but a hard link above still names the content
                        content_name[here] = alive[0][1]
                        write(tarstream.renamed(raw, name=alive[0][1]), alive[0][1])
                        reader.copy(raw.data_size, dst)
                    else:
                        reader.copy(raw.data_size, None)
                    continue
                if typ == DIRECTORY:
                    if path not in emitted:
                        write([*raw.blocks, bytes(raw.hdr)], path)
                    continue
                if typ == HARDLINK:
                    content = p.content[here]
                    name = content_name.get(content)
                    if name is None:
                        raise LayerError(f"{layer.where}: /{path} is a hard link to /{content[1]}, whose content "
                                         "this merge lost", "report this as a bug, with the image")
                    if name != path:
                        write(tarstream.renamed(raw, linkname=name), path)
                    continue
                if path in emitted:      # the same name twice in one layer: the first stays
                    reader.copy(raw.data_size, None)
                    continue
                write([*raw.blocks, bytes(raw.hdr)], path)
                reader.copy(raw.data_size, dst)
                if here in p.holders:
                    content_name[here] = path
    dst.write(ZERO_BLOCK * 2)


def docker_init_layer() -> Layer:
    """Docker's init layer (moby daemon/initlayer), as ``docker export`` shows it on Docker 20.10: its
    files and ``/etc/mtab`` replace the image's (empty, 0755), its directories appear only where the
    image has none, and the parents keep the image's attributes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("dev/pts", "dev/shm", "proc", "sys"):
            info, _ = tarstream.dir_entry(name)
            tar.addfile(info)
        for name in (".dockerenv", "dev/console", "etc/hostname", "etc/hosts", "etc/resolv.conf"):
            info, data = tarstream.file_entry(name, b"", mode=0o755)
            tar.addfile(info, io.BytesIO(data))
        info, _ = tarstream.symlink_entry("etc/mtab", "/proc/mounts")
        tar.addfile(info)
    data = buf.getvalue()

    def feed(out: IO[bytes]) -> None:
        out.write(data)

    return Layer(digest="docker-init-layer", size=len(data), media_type="application/vnd.oci.image.layer.v1.tar",
                 feed=feed, where="Docker's init layer", weak_dirs=True)
