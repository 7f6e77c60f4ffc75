"""Where an export reads its image from: the Docker engine, a registry, or files on disk.

``open_source(text)`` reads the forms skopeo, Apptainer and Enroot users write:

- ``docker://[USER@]REGISTRY/REPO[:TAG][@DIGEST]`` and ``REGISTRY#REPO[:TAG]`` (Enroot's and Pyxis's
  form): a registry, through imagekit's client (its credentials: Enroot's file, Docker's
  ``config.json``); ``platform`` picks one image of a multi-platform index;
- ``oci:DIR[:TAG]``: an OCI image layout directory (``skopeo copy … oci:DIR:TAG``);
- ``oci-archive:FILE[:TAG]``: the same as one tar file (``podman save --format oci-archive``);
- ``docker-archive:FILE[:REPO:TAG]``: a ``docker save`` tarball;
- ``containers-storage:IMAGE`` (skopeo's name for Podman's store): an image in the calling user's
  Podman store, saved with ``podman save --format oci-archive`` into a temporary file when a
  conversion needs its layers (a store hit needs only its ID);
- ``docker-daemon:IMAGE``, or any other text: an image in the local Docker engine.

Every source gives a docker-inspect-like dict (``Id`` is the config digest, the image ID the engine
shows, so the export store meets one conversion from any source) and the flattened root filesystem
as one tar stream. The engine streams ``docker export`` of a throwaway container; the others merge
their layers (:mod:`imagekit.export.layers`), checked against their digests as they stream.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import hashlib
import io
import os
import stat
import subprocess
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Callable, Iterator, Mapping

from imagekit import registry
from imagekit.util import known_errors, platforms, untrusted_json
from imagekit.engines import docker as engine
from imagekit.engines import podman
from imagekit.util.errors import EngineError, ImagekitError, NotFoundError, UsageError
from imagekit.export.layers import Layer, LayerError, check_media_type, check_size, docker_init_layer, merge
from imagekit.util.procs import log_tail, stop, widen_pipe
# The media types are the registry client's: one list for a registry and an OCI layout alike.
from imagekit.registry.client import INDEX_TYPES, MANIFEST_TYPES

MAX_JSON_BYTES = 4 << 20          # a manifest, index or config larger than this is refused
PRODUCER_GRACE = 5.0              # seconds an export that stops waits for its layer reader thread
REF_NAME = "org.opencontainers.image.ref.name"
TRANSPORTS = ("docker://", "docker-daemon:", "oci:", "oci-archive:", "docker-archive:", "containers-storage:")
PODMAN = podman.TRANSPORT        # "containers-storage:"
FORMS = ("docker://REGISTRY/REPO[:TAG], REGISTRY#REPO[:TAG], oci:DIR[:TAG], oci-archive:FILE[:TAG], "
         "docker-archive:FILE[:REPO:TAG], containers-storage:IMAGE (Podman), docker-daemon:IMAGE or a local image name")


class SourceError(ImagekitError):
    """An image source that cannot give the image asked for."""


class SourceNotFound(SourceError, NotFoundError):
    """The file, layout or tag named does not exist: the "not found" exit code, as for any image."""

    exit_code = NotFoundError.exit_code


class Rootfs:
    """A flattened root filesystem as a tar stream being produced. ``file`` is read to its end;
    ``failed(exc)`` turns a read error into the producer's own error (why the stream broke);
    ``finish()`` raises when the producer failed although the stream looked whole."""

    def __init__(self, file: BinaryIO, failed: Callable[[Exception], Exception],
                 finish: Callable[[], None]) -> None:
        self.file, self.failed, self.finish = file, failed, finish


@dataclass
class Source(abc.ABC):
    """One image, however it is reached."""

    text: str                 # what the user gave
    stem: str                 # the default output's name, Enroot style: repo+name+tag
    engine_image: str | None  # set for the engine: the image name for the engine's own commands

    @abc.abstractmethod
    def inspect(self) -> dict[str, Any]:
        """The image as ``docker inspect`` shows it: Id, Config, Architecture, Os, Size."""

    def image_id(self) -> str:
        return self.inspect()["Id"]

    @abc.abstractmethod
    def rootfs(self) -> contextlib.AbstractContextManager[Rootfs]:
        """The flattened root filesystem, streamed."""


def _stem(text: str) -> str:
    return text.replace("/", "+").replace(":", "+")


# --- the engine ------------------------------------------------------------------------------


class EngineSource(Source):
    def __init__(self, image: str) -> None:
        super().__init__(text=image, stem=_stem(image), engine_image=image)
        self._info: dict[str, Any] | None = None

    def image_id(self) -> str:
        return engine.image_id(self.text)

    def inspect(self) -> dict[str, Any]:
        if self._info is None:
            self._info = engine.image_attrs(self.text)
        return self._info

    @contextlib.contextmanager
    def rootfs(self) -> Iterator[Rootfs]:
        with engine.exported(self.text) as body:
            if body is None:                 # an engine on tcp, ssh or TLS: its CLI knows how
                with self._cli_rootfs() as rootfs:
                    yield rootfs
                return

            def failed(exc: Exception) -> Exception:
                return EngineError(f"docker export {self.text} failed: the engine's stream broke off ({exc})")

            # The stream's end is the archive's end: the engine reports nothing after it.
            yield Rootfs(body, failed, lambda: None)

    @contextlib.contextmanager
    def _cli_rootfs(self) -> Iterator[Rootfs]:
        docker = engine.docker_cli()
        with engine.throwaway(self.text, purpose="export") as container, \
                tempfile.NamedTemporaryFile(prefix="imagekit-export-", suffix=".err") as err:
            # Unbuffered: the one buffer is the reader (the filter splices past it).
            exporter = subprocess.Popen([docker, "export", container], stdout=subprocess.PIPE,
                                        stderr=err, bufsize=0)
            widen_pipe(exporter.stdout.fileno())
            try:
                def failed(exc: Exception) -> Exception:
                    exporter.wait()
                    return EngineError(f"docker export {self.text} failed: {log_tail(err.name) or exc}")

                def finish() -> None:
                    rc = exporter.wait()
                    if rc != 0:
                        raise EngineError(f"docker export {self.text} failed (exit {rc}): {log_tail(err.name)}")

                yield Rootfs(io.BufferedReader(exporter.stdout, buffer_size=1 << 20), failed, finish)  # type: ignore[arg-type]
            finally:
                stop(exporter, grace=0)
                if exporter.stdout is not None:
                    exporter.stdout.close()


# --- layered sources: a registry, an OCI layout or archive, a docker save tarball ------------------


class LayeredSource(Source):
    """A source that has the image's config and layer blobs; subclasses fetch them."""

    def __init__(self, text: str, stem: str) -> None:
        super().__init__(text=text, stem=stem, engine_image=None)
        self._config_digest: str | None = None
        self._config: dict[str, Any] | None = None
        self._layers: list[Layer] | None = None

    @abc.abstractmethod
    def _load(self) -> tuple[str, dict[str, Any], list[Layer]]:
        """The config digest, the config, and the layers, lowest first."""

    def loaded(self) -> tuple[str, dict[str, Any], list[Layer]]:
        if self._layers is None:
            digest, config, layers = self._load()
            want = getattr(self, "platform", None)
            have = platforms.Platform.of(config)
            if want and not platforms.matches(have.as_dict(), want):
                raise SourceError(f"{self.text} has no {want} image (it has: {have})",
                                  "pick that one with --platform, or drop --platform")
            diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
            if len(diff_ids) != len(layers):
                raise SourceError(f"{self.text}: the config lists {len(diff_ids)} layers and the manifest "
                                  f"{len(layers)}", "the image is malformed; build and push it again")
            self._config_digest, self._config, self._layers = digest, config, layers
        return self._config_digest, self._config, self._layers  # type: ignore[return-value]

    def image_id(self) -> str:
        return self.loaded()[0]

    def inspect(self) -> dict[str, Any]:
        digest, config, layers = self.loaded()
        return {"Id": digest, "Config": config.get("config") or {}, "Created": config.get("created") or "",
                "Architecture": config.get("architecture") or "", "Os": config.get("os") or "",
                # The stored (compressed) size: the only one known before the layers stream.
                "Size": sum(layer.size or 0 for layer in layers)}

    @contextlib.contextmanager
    def rootfs(self) -> Iterator[Rootfs]:
        _, _, layers = self.loaded()
        read_fd, write_fd = os.pipe()
        widen_pipe(write_fd)
        failure: list[BaseException] = []
        cancel = threading.Event()

        def produce() -> None:
            try:
                with io.FileIO(write_fd, "w", closefd=True) as raw:
                    merge([*layers, docker_init_layer()], raw, cancel)
            except BrokenPipeError:
                pass
            except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
                failure.append(exc)

        producer = threading.Thread(target=produce, name=f"merge {self.text}", daemon=True)
        reader = io.BufferedReader(io.FileIO(read_fd, "r"), buffer_size=1 << 20)

        def failed(exc: Exception) -> Exception:
            reader.close()
            producer.join()
            return failure[0] if failure and isinstance(failure[0], Exception) else exc

        def finish() -> None:
            producer.join()
            if failure:
                raise failure[0]

        producer.start()
        try:
            yield Rootfs(reader, failed, finish)
        finally:
            cancel.set()       # feeders and drains stop at their next chunk,
            reader.close()     # a producer still writing gets EPIPE and stops,
            # and one blocked in a read (a stalled registry: up to its read timeout) is left to the
            # process's exit: it writes only into pipes, so a signal still ends the export at once.
            producer.join(timeout=PRODUCER_GRACE)


def _json(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = untrusted_json.loads(data)
    except ValueError:
        raise SourceError(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise SourceError(f"{what} is not a JSON object")
    return value


def _platform(text: str | None) -> platforms.Platform | None:
    return platforms.parse(text) if text else None


def _pick(entries: list[dict[str, Any]], want: platforms.Platform | None, what: str) -> dict[str, Any]:
    """The index entry for ``want`` (default: this machine's): :func:`imagekit.util.platforms.pick`."""
    return dict(platforms.pick(entries, want, what))


def _layers_of(manifest: dict[str, Any], what: str, feed_for: Callable[[dict[str, Any]], Callable[[IO[bytes]], None]]
               ) -> list[Layer]:
    layers = []
    for i, desc in enumerate(manifest.get("layers") or []):
        _sized(desc, f"layer {i + 1} of {what}")
        layer = Layer(digest=str(desc.get("digest", "")), size=desc.get("size"),
                      media_type=str(desc.get("mediaType", "")), feed=feed_for(desc),
                      where=f"layer {i + 1} of {what}")
        check_media_type(layer)
        check_size(layer)
        layers.append(layer)
    return layers


def _sized(desc: Any, what: str) -> int:
    """A descriptor's size: every read of its blob stops there, so it must be there (the OCI spec
    requires it) and be a byte count."""
    size = desc.get("size") if isinstance(desc, dict) else None
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise SourceError(f"{what}: its descriptor's size is {size!r}, not a byte count",
                          "the manifest is malformed: build and push (or save) the image again")
    return size


def _checked_manifest(manifest: dict[str, Any], media_type: str, what: str) -> None:
    kind = manifest.get("mediaType") or media_type
    if kind not in MANIFEST_TYPES:
        raise SourceError(f"{what} is a {kind or 'document of unknown type'}, not an image manifest",
                          "give a container image")
    config_type = (manifest.get("config") or {}).get("mediaType", "")
    if config_type not in ("application/vnd.oci.image.config.v1+json",
                           "application/vnd.docker.container.image.v1+json"):
        raise SourceError(f"{what} is not a container image: its config is {config_type!r} "
                          "(an artifact, a Helm chart or a signature?)", "give a container image")


class RegistrySource(LayeredSource):
    def __init__(self, text: str, platform: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self.ref = registry.parse(text)
        super().__init__(text=text, stem=_stem(f"{self.ref.repository}:{self.ref.tag}"))
        self.platform = _platform(platform)
        self.env = dict(env) if env is not None else None
        self.resolved = None

    def _load(self) -> tuple[str, dict[str, Any], list[Layer]]:
        kwargs = {"env": self.env} if self.env is not None else {}
        client = registry.RegistryClient.for_reference(self.ref, **kwargs)
        repo = self.ref.repository
        self.resolved = resolved = client.resolve(self.ref, self.platform)
        manifest_doc = client.get_manifest(repo, resolved.digest, ", ".join(MANIFEST_TYPES))
        manifest = _json(manifest_doc.body, f"{self.ref}'s manifest")
        _checked_manifest(manifest, manifest_doc.media_type, str(self.ref))
        cdesc = manifest.get("config") or {}
        if _sized(cdesc, f"{self.ref}'s config") > MAX_JSON_BYTES:
            raise SourceError(f"{self.ref}: the image config is {cdesc.get('size')} bytes, over the "
                              f"{MAX_JSON_BYTES} this export reads")
        buf = io.BytesIO()
        client.download_blob(repo, resolved.config_digest, buf, size=cdesc["size"])
        config = _json(buf.getvalue(), f"{self.ref}'s config")

        def feed_for(desc: dict[str, Any]) -> Callable[[IO[bytes]], None]:
            def feed(out: IO[bytes]) -> None:
                client.download_blob(repo, desc["digest"], out, size=desc.get("size"))
            return feed

        return resolved.config_digest, config, _layers_of(manifest, str(self.ref), feed_for)


class _Blobs:
    """Blobs by digest in an OCI layout: a directory, or a tar file holding one."""

    def __init__(self, root: Path | None = None, archive: Path | None = None) -> None:
        self.root, self.archive = root, archive
        self._members: dict[str, tuple[int, int]] = {}
        if archive is not None:
            try:
                with tarfile.open(archive) as tar:
                    for m in tar:
                        if m.isfile():
                            self._members[m.name.lstrip("./") if m.name.startswith("./") else m.name] = (
                                m.offset_data, m.size)
            except (OSError, tarfile.TarError) as exc:
                raise SourceError(f"{archive} is not a readable tar archive: {exc}") from None

    def describe(self) -> str:
        return str(self.archive or self.root)

    @contextlib.contextmanager
    def open(self, name: str) -> Iterator[tuple[BinaryIO, int]]:
        """``name`` and its size. In a directory: a regular file inside the layout, or refused before
        a byte is read (:func:`_open_in_layout`)."""
        if self.archive is None:
            fd = _open_in_layout(self.root, name, self.describe())  # type: ignore[arg-type]
            with open(fd, "rb", closefd=True) as fh:
                yield fh, os.fstat(fd).st_size
            return
        where = self._members.get(name)
        if where is None:
            raise SourceError(f"{self.describe()} has no {name}")
        with open(self.archive, "rb") as fh:
            fh.seek(where[0])
            yield _Window(fh, where[1]), where[1]  # type: ignore[misc]

    def read(self, name: str, what: str) -> bytes:
        with self.open(name) as (fh, size):
            if size > MAX_JSON_BYTES:
                raise SourceError(f"{self.describe()}: {what} is {size} bytes, over the {MAX_JSON_BYTES} "
                                  "this export reads")
            return fh.read(size)

    def blob(self, digest: str, what: str, size: int | None = None) -> bytes:
        data = self.read(_blob_name(digest, self.describe()), what)
        got = "sha256:" + hashlib.sha256(data).hexdigest()
        if got != digest:
            # Neither the size nor the hash of what was read: a file there may not be the layout's own.
            raise SourceError(f"{self.describe()}: {what} {digest} does not hash to its digest",
                              "the layout is damaged")
        return data

    def feeder(self, name: str, digest: str, size: int | None, where: str) -> Callable[[IO[bytes]], None]:
        def feed(out: IO[bytes]) -> None:
            h = hashlib.sha256()
            done = 0
            with self.open(name) as (fh, have):
                if size is not None and have != size:
                    raise LayerError(f"{where} is damaged: {name} in {self.describe()} is not the {size} bytes "
                                     "its descriptor says", "nothing was written; save or copy the image again")
                limit = have if size is None else size
                # Never past the size known before reading (+1 to see a file that grows meanwhile).
                while done <= limit and (chunk := fh.read(min(1 << 20, limit + 1 - done))):
                    h.update(chunk)
                    out.write(chunk)
                    done += len(chunk)
            got = "sha256:" + h.hexdigest()
            if got != digest or (size is not None and done != size):
                # Neither the size nor the hash of what was read is shown: a file there (a hard link
                # its author could make) may hold bytes that are not the layout's own.
                raise LayerError(f"{where} is damaged: {name} in {self.describe()} does not hash to {digest}"
                                 + (f" in {size} bytes" if size is not None else ""),
                                 "nothing was written; save or copy the image again")
        return feed


def _open_in_layout(root: Path, name: str, where: str) -> int:
    """A descriptor of ``root/name``, which must be a regular file inside the layout.

    Each name below ``root`` is opened with O_NOFOLLOW (a blob that is a link, even to a file the
    exporting user may read, is refused: an OCI layout holds its blobs as files), the file with
    O_NONBLOCK (a FIFO does not block the open), and anything but a regular file (a FIFO, a device)
    is refused by ``fstat`` before a byte is read."""
    names = name.split("/")
    try:
        dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise SourceError(f"{where} cannot be opened ({exc.strerror})") from None
    shown = ""
    try:
        for i, part in enumerate(names):
            shown = f"{shown}/{part}" if shown else part
            last = i == len(names) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                fd = os.open(part, flags, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(part, dir_fd)):
                    raise SourceError(f"{where}: {shown} is a symbolic link; refused, not followed",
                                      "an OCI layout holds its blobs as files: copy the image with "
                                      "skopeo copy or podman save, which write no links") from None
                raise SourceError(f"{where} has no {name} ({exc.strerror})") from None
            os.close(dir_fd)
            dir_fd = fd
        fd, dir_fd = dir_fd, -1
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "FIFO" if stat.S_ISFIFO(st.st_mode) else "device" if stat.S_ISCHR(st.st_mode) or \
            stat.S_ISBLK(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else "directory" \
            if stat.S_ISDIR(st.st_mode) else "special file"
        raise SourceError(f"{where}: {name} is a {kind}, not a regular file; refused before reading",
                          "an OCI layout holds its blobs as regular files: copy the image again")
    os.set_blocking(fd, True)
    return fd


def _is_link(name: str, dir_fd: int) -> bool:
    with contextlib.suppress(OSError):
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    return False


class _Window(io.RawIOBase):
    """``size`` bytes of ``fh`` from where it stands."""

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self.fh, self.left = fh, size

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        n = self.left if n < 0 else min(n, self.left)
        data = self.fh.read(n)
        self.left -= len(data)
        return data


def _blob_name(digest: str, where: str) -> str:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or not all(c in "0123456789abcdef" for c in hexpart):
        raise SourceError(f"{where}: {digest!r} is not a sha256 digest")
    return f"blobs/sha256/{hexpart}"


class OciLayoutSource(LayeredSource):
    """An OCI image layout (a directory, or ``oci-archive:`` a tar of one)."""

    def __init__(self, text: str, path: Path, tag: str | None, archive: bool,
                 platform: str | None = None) -> None:
        super().__init__(text=text, stem=_stem(f"{path.name.split('.')[0] if archive else path.name}"
                                               + (f":{tag}" if tag else "")))
        self.path, self.tag, self.archive = path, tag, archive
        self.platform = _platform(platform)

    def _load(self) -> tuple[str, dict[str, Any], list[Layer]]:
        blobs = _Blobs(archive=self.path) if self.archive else _Blobs(root=self.path)
        where = blobs.describe()
        layout = _json(blobs.read("oci-layout", "oci-layout"), f"{where}/oci-layout")
        if "imageLayoutVersion" not in layout:
            raise SourceError(f"{where} is not an OCI image layout (oci-layout has no imageLayoutVersion)")
        index = _json(blobs.read("index.json", "index.json"), f"{where}/index.json")
        entries = list(index.get("manifests") or [])
        if self.tag is not None:
            named = [m for m in entries if (m.get("annotations") or {}).get(REF_NAME) == self.tag]
            if not named:
                names = sorted({(m.get("annotations") or {}).get(REF_NAME, "?") for m in entries})
                raise SourceNotFound(f"{where} has no image tagged {self.tag!r} (it has: {', '.join(names) or 'none'})",
                                  "name one of those after the last ':'")
            entries = named
        elif len(entries) != 1:
            names = sorted({(m.get("annotations") or {}).get(REF_NAME, "?") for m in entries})
            raise SourceError(f"{where} holds {len(entries)} images; say which: {', '.join(names) or 'none'}",
                              f"e.g. {self.text}:{names[0] if names else 'TAG'}")
        desc = entries[0]
        for _ in range(4):                    # an index may name an index
            if desc.get("mediaType") not in INDEX_TYPES:
                break
            nested = _json(blobs.blob(desc["digest"], "index"), f"{where}: index {desc['digest']}")
            desc = _pick(list(nested.get("manifests") or []), self.platform, f"{self.text}")
        manifest = _json(blobs.blob(desc["digest"], "manifest"), f"{where}: manifest {desc.get('digest')}")
        _checked_manifest(manifest, str(desc.get("mediaType", "")), self.text)
        config_digest = (manifest.get("config") or {}).get("digest", "")
        config = _json(blobs.blob(config_digest, "config"), f"{where}: config {config_digest}")

        def feed_for(d: dict[str, Any]) -> Callable[[IO[bytes]], None]:
            name = _blob_name(str(d.get("digest", "")), where)
            return blobs.feeder(name, d["digest"], d.get("size"), f"the layer {d['digest']} of {self.text}")

        return config_digest, config, _layers_of(manifest, self.text, feed_for)


class DockerArchiveSource(LayeredSource):
    """A ``docker save`` tarball: manifest.json, the config by its digest, uncompressed layer tars
    checked against the config's ``diff_ids``."""

    def __init__(self, text: str, path: Path, ref: str | None) -> None:
        super().__init__(text=text, stem=_stem(ref) if ref else path.name.split(".")[0])
        self.path, self.ref = path, ref

    def _load(self) -> tuple[str, dict[str, Any], list[Layer]]:
        blobs = _Blobs(archive=self.path)
        where = blobs.describe()
        try:
            listed = untrusted_json.loads(blobs.read("manifest.json", "manifest.json"))
        except ValueError:
            raise SourceError(f"{where}: manifest.json is not JSON") from None
        if not isinstance(listed, list) or not listed:
            raise SourceError(f"{where} is not a `docker save` tarball (manifest.json lists no image)")
        if self.ref is not None:
            wanted = {self.ref, f"{self.ref}:latest"} | ({f"docker.io/{self.ref}"} if "/" in self.ref else set())
            chosen = [m for m in listed if wanted & set(m.get("RepoTags") or [])]
            if not chosen:
                tags = sorted({t for m in listed for t in (m.get("RepoTags") or [])})
                raise SourceNotFound(f"{where} has no image {self.ref} (it has: {', '.join(tags) or 'untagged images'})")
        elif len(listed) != 1:
            tags = sorted({t for m in listed for t in (m.get("RepoTags") or [])})
            raise SourceError(f"{where} holds {len(listed)} images; say which: {', '.join(tags)}",
                              f"e.g. docker-archive:{self.path}:{tags[0] if tags else 'REPO:TAG'}")
        else:
            chosen = listed
        entry = chosen[0]
        config_bytes = blobs.read(str(entry.get("Config", "")), "the image config")
        config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
        config = _json(config_bytes, f"{where}: {entry.get('Config')}")
        diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
        names = list(entry.get("Layers") or [])
        if len(diff_ids) != len(names):
            raise SourceError(f"{where}: the config lists {len(diff_ids)} layers and manifest.json {len(names)}")
        layers = []
        for i, (name, diff_id) in enumerate(zip(names, diff_ids)):
            size = blobs._members.get(name, (0, None))[1]
            layers.append(Layer(digest=diff_id, size=size, media_type="application/vnd.docker.image.rootfs.diff.tar",
                                feed=blobs.feeder(name, diff_id, None, f"layer {i + 1} ({name}) of {self.text}"),
                                where=f"layer {i + 1} of {self.text}"))
            check_size(layers[-1])
        return config_digest, config, layers


class PodmanSource(OciLayoutSource):
    """An image in the calling user's Podman store: its ID from ``podman image inspect``; its config
    and layers from a ``podman save --format oci-archive`` made the first time they are needed, into
    a temporary directory removed when the root filesystem has streamed (or the source is dropped)."""

    def __init__(self, text: str, image: str, platform: str | None = None) -> None:
        super().__init__(text, Path(image), None, True, platform)   # the path is set when saved
        self.stem = _stem(image)
        self.image = image
        self._id: str | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    def image_id(self) -> str:
        if self._config_digest is not None:
            return self._config_digest
        if self._id is None:
            self._id = podman.image_id(self.image)
        return self._id

    def _load(self) -> tuple[str, dict[str, Any], list[Layer]]:
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="imagekit-podman-save-")
            self.path = Path(self._tmp.name) / "image.tar"
            podman.save_oci_archive(self.image, self.path)
        digest, config, layers = super()._load()
        if self._id is not None and digest != self._id:
            raise SourceError(f"{self.text}: podman save gave the config {digest}, not the image {self._id}",
                              "the image changed while it was exported; run the export again")
        return digest, config, layers

    @contextlib.contextmanager
    def rootfs(self) -> Iterator[Rootfs]:
        try:
            with super().rootfs() as fs:
                yield fs
        finally:
            if self._tmp is not None:
                self._tmp.cleanup()


def _split_file(rest: str) -> tuple[str, str | None]:
    """``FILE[:REF]`` where FILE may hold ':' itself: the longest prefix that exists is the file."""
    if os.path.exists(rest) or ":" not in rest:
        return rest, None
    for i in [j for j, c in enumerate(rest) if c == ":"]:
        if os.path.exists(rest[:i]):
            return rest[:i], rest[i + 1:] or None
    return rest.split(":", 1)[0], rest.split(":", 1)[1] or None


def is_engine_image(text: str) -> bool:
    return not (text.startswith(TRANSPORTS) or "#" in text)


def open_source(text: str, *, platform: str | None = None, env: Mapping[str, str] | None = None) -> Source:
    """The source ``text`` names (see the module docstring)."""
    if text.startswith("docker-daemon:"):
        text = text[len("docker-daemon:"):]
        if not text:
            raise UsageError("docker-daemon: names no image", f"valid forms: {FORMS}")
    elif text.startswith(PODMAN):
        image = text[len(PODMAN):]
        if not image:
            raise UsageError(f"{PODMAN} names no image", f"valid forms: {FORMS}")
        return PodmanSource(text, image, platform)
    elif text.startswith("docker://") or "#" in text:
        return RegistrySource(text, platform, env)
    elif text.startswith(("oci:", "oci-archive:")):
        archive = text.startswith("oci-archive:")
        rest = text.split(":", 1)[1]
        path, tag = _split_file(rest) if archive else _split_dir(rest)
        p = Path(path).expanduser()
        if not p.exists():
            raise SourceNotFound(f"{text}: {p} does not exist", f"valid forms: {FORMS}")
        if archive and not p.is_file():     # a FIFO or a device would be read without end
            raise UsageError(f"{text}: {p} is not a regular file", f"valid forms: {FORMS}")
        return OciLayoutSource(text, p, tag, archive, platform)
    elif text.startswith("docker-archive:"):
        path, ref = _split_file(text.split(":", 1)[1])
        p = Path(path).expanduser()
        if not p.is_file():
            raise (UsageError if p.exists() else SourceNotFound)(f"{text}: {p} is not a file", f"valid forms: {FORMS}")
        return DockerArchiveSource(text, p, ref)
    _not_an_exported_file(text)
    if platform:
        raise UsageError("--platform applies to registry and OCI sources",
                         "a local engine image has one platform already; drop --platform")
    return EngineSource(text)


# What an export writes; given back as a source, it would be looked up as an engine image and "not found".
_EXPORTED = {".sqsh": ("Enroot squashfs", "sif"), ".squashfs": ("Enroot squashfs", "sif"), ".sif": ("SIF", "enroot")}


def _not_an_exported_file(text: str) -> None:
    """A .sqsh or .sif named as the image to export (.sqsh -> SIF): said so, with the image to name instead."""
    kind = _EXPORTED.get(Path(text).suffix)
    if kind is not None and (text.startswith(("/", ".")) or os.path.isfile(text)):
        raise known_errors.EXPORT_FROM_FILE.error(path=text, kind=kind[0], fmt=kind[1])


def _split_dir(rest: str) -> tuple[str, str | None]:
    if os.path.isdir(rest) or ":" not in rest:
        return rest, None
    path, _, tag = rest.rpartition(":")
    return path, tag or None
