"""Push an image to a registry and name it the way Pyxis/Enroot want it.

Pyxis passes ``--container-image`` to ``enroot import docker://…``, whose
reference syntax separates the registry with ``#``: ``registry#repo:tag``
(Enroot's reg_registry/reg_image/reg_tag patterns in src/docker.sh). A plain
``registry/repo:tag`` would be read as a Docker Hub repository.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from imagekit.util import platforms
from imagekit.util.ticker import Ticker
from imagekit.engines import docker as engine
from imagekit.util.errors import CredentialsError, EngineError, ImagekitError, IntegrityError, RegistryError, UsageError
from imagekit.registry import client as reg
from imagekit.registry.reference import parse

DIGEST_RE = re.compile(r"digest: (sha256:[0-9a-f]{64}) size: (\d+)")


@dataclass
class PushResult:
    image: str
    reference: str        # registry/repo:tag as Docker names it
    digest: str           # manifest digest reported by the registry
    size: int             # manifest size in bytes
    pyxis: str            # registry#repo:tag for srun --container-image
    pinned: str           # registry/repo@digest

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def split_reference(ref: str) -> tuple[str, str, str]:
    """``host[:port]/repo[:tag]`` → (registry, repo, tag); the registry part is required."""
    first, sep, rest = ref.partition("/")
    if not sep or not ("." in first or ":" in first or first == "localhost"):
        raise UsageError(f"{ref!r} does not name a registry",
                         "use REGISTRY/REPO[:TAG], e.g. 127.0.0.1:5000/hpc/mpi:1.0")
    repo, tag = rest, "latest"
    if ":" in rest.rsplit("/", 1)[-1]:
        repo, tag = rest.rsplit(":", 1)
    if not repo or not re.fullmatch(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*", repo):
        raise UsageError(f"bad repository name {repo!r} in {ref!r}",
                         "repository names are lower case: letters, digits, . _ - /")
    return first, repo, tag


def pyxis_reference(registry: str, repo: str, tag: str) -> str:
    return f"{registry}#{repo}:{tag}"


# What `docker push` prints (the engine relays the registry's answer) -> the exit-code table's kind.
_UNREACHABLE = ("connection refused", "no such host", "i/o timeout", "dial tcp", "network is unreachable",
                "tls handshake timeout", "connection reset by peer")
_REJECTED = ("unauthorized", "authentication required", "no basic auth credentials",
             "requested access to the resource is denied", "insufficient_scope")
_REFUSED = ("received unexpected http status", "name unknown", "name_unknown", "manifest invalid",
            "blob upload unknown", "toomanyrequests")


def _push_failed(reference: str, registry: str, output: str, last: str) -> ImagekitError:
    """The error of a failed ``docker push``, of its kind in the exit-code table: an unreachable or
    refusing registry is exit 4 and rejected credentials exit 7, as for the registry calls imagekit
    makes itself; anything else is the engine's (exit 3)."""
    low = output.lower()
    what = f"docker push {reference} failed: {last}"
    if "http response to https client" in low:
        return RegistryError(what, f"the engine treats {registry} as a TLS registry: add it to "
                                   "insecure-registries in /etc/docker/daemon.json, or use 127.0.0.1")
    if any(s in low for s in _UNREACHABLE):
        return RegistryError(what, f"is a registry listening on {registry}?")
    if any(s in low for s in _REJECTED):
        return CredentialsError(what, f"log in first: docker login {registry} (--password-stdin)")
    if any(s in low for s in _REFUSED):
        return RegistryError(what, "the registry refused the push: see its answer above")
    return EngineError(what)


def _engine_id(ref: str) -> str | None:
    try:
        return engine.image_id(ref)
    except engine.ImageMissing:
        return None


def _undo_tag(docker: str, reference: str, before: str | None) -> None:
    """Put ``reference`` back as it was before the push tagged it: moved back to the image it named,
    or removed. Removed only while the image has another name: untagging an image's last name
    deletes the image, and a stray tag is the lesser harm."""
    if before is not None:
        subprocess.run([docker, "tag", before, reference], capture_output=True)
        return
    try:
        names = engine.image_attrs(reference).get("RepoTags") or []
    except ImagekitError:
        return
    if len(names) > 1:
        subprocess.run([docker, "image", "rm", "--no-prune", reference], capture_output=True)


class _PushPace:
    """docker push's own lines, passed on, and every ``EVERY`` seconds they stop (a big layer going up
    says nothing off a terminal) a line of how long and how many layers are up."""

    EVERY = 5.0
    _LAYER = re.compile(r"^(?P<id>[0-9a-f]{12}): (?P<state>.+)$")

    def __init__(self, reference: str, log) -> None:
        self.reference, self.log = reference, log
        self.started = self.last = time.monotonic()
        self.layers: dict[str, bool] = {}
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            m = self._LAYER.match(text)
            if m:
                self.layers[m["id"]] = self.layers.get(m["id"], False) or m["state"].startswith(
                    ("Pushed", "Layer already exists", "Mounted from"))
            self.last = time.monotonic()
            if self.log is not None:
                self.log(text)

    def tick(self, now: float) -> None:
        with self.lock:
            if self.log is None or now - self.last < self.EVERY:
                return
            self.last = now
            done = sum(self.layers.values())
            self.log(f"pushing {self.reference}: {done} of {len(self.layers)} layers up ({now - self.started:.0f} s)")


def push_image(image: str, to: str | None = None, log=None) -> PushResult:
    """Tag ``image`` as ``to`` (default: the image's own name, which must include a registry),
    push it, and return the digest the registry reported. A failed push leaves the engine's tags as
    they were."""
    target = to or image
    registry, repo, tag = split_reference(target)
    reference = f"{registry}/{repo}:{tag}"
    docker = engine.docker_cli()
    retag = reference != image
    before = _engine_id(reference) if retag else None
    if retag:
        tagged = subprocess.run([docker, "tag", image, reference], capture_output=True, text=True)
        if tagged.returncode != 0:
            raise EngineError(f"docker tag {image} {reference} failed: {tagged.stderr.strip()}",
                              "check the image name with `docker images`")
    try:
        proc = subprocess.Popen([docker, "push", reference], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        lines = []
        pace = _PushPace(reference, log)
        with Ticker(pace.tick, name="imagekit-push-pace"):
            for line in proc.stdout:
                lines.append(line.rstrip())
                pace.line(line.rstrip())
            rc = proc.wait()
        output = "\n".join(lines)
        if rc != 0:
            raise _push_failed(reference, registry, output, lines[-1] if lines else "no output")
        match = DIGEST_RE.search(output)
        if match is None:
            raise EngineError(f"docker push {reference} printed no digest", "check the engine's output")
    except BaseException:
        if retag:
            _undo_tag(docker, reference, before)
        raise
    digest = match.group(1)
    return PushResult(image=image, reference=reference, digest=digest, size=int(match.group(2)),
                      pyxis=pyxis_reference(registry, repo, tag),
                      pinned=f"{registry}/{repo}@{digest}")


# --- one reference, several platforms -------------------------------------------------------------


@dataclass
class PlatformPush:
    """One platform's image of a multi-platform push: pushed under its own tag, named by the index."""

    platform: str         # linux/arm64
    image: str            # the local image
    reference: str        # registry/repo:TAG-arm64, the platform's own tag
    digest: str           # its manifest digest: the subject of its artifacts
    size: int
    media_type: str
    config: str           # its config digest (the local image ID)

    def entry(self) -> dict[str, Any]:
        """Its descriptor in the index."""
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size,
                "platform": platforms.parse(self.platform).as_dict()}


@dataclass
class IndexPushResult:
    reference: str        # registry/repo:tag: the index
    digest: str           # the index's digest
    size: int
    pyxis: str            # registry#repo:tag: every node starts its own architecture's image
    pinned: str           # registry/repo@<index digest>
    platforms: list[PlatformPush] = field(default_factory=list)
    media_type: str = reg.OCI_INDEX

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def platform_images(images: list[str], platform_list: list[platforms.Platform]) -> list[str]:
    """``IMAGE`` + ``--platform a,b`` -> each platform's local tag of IMAGE (the build's naming:
    ``imagekit/x:latest`` and ``imagekit/x:latest-arm64``); several IMAGEs are taken as given."""
    if not platform_list:
        return list(images)
    if len(images) != 1 or is_reference(images[0]):
        raise UsageError("--platform names the platforms of one local IMAGE (its local tag per architecture)",
                         "give one IMAGE with --platform, or several IMAGEs (or pushed references) without it")
    return [platforms.local_tag(images[0], platforms.buildable(p)) for p in platform_list]


def is_reference(text: str) -> bool:
    """A pushed image named as Pyxis and skopeo name one (``docker://…``, ``REGISTRY#REPO:TAG``),
    rather than a local image."""
    return text.startswith("docker://") or "#" in text


def inspect_platforms(images: list[str]) -> list[tuple[str, platforms.Platform, str]]:
    """(image, its platform, its ID) for each local image; refused before anything is pushed when
    one is missing or names no architecture."""
    out = []
    for image in images:
        try:
            found = engine.inspect(image)
        except engine.ImageMissing:
            arch = next((a for a in platforms.ARCHES if platforms.tag_suffix(a) and
                         image.endswith(platforms.tag_suffix(a))), None)
            raise EngineError(f"{image} is not in the local engine",
                              f"build it first, e.g. imagekit build STACK --platform "
                              f"{platforms.of_arch(arch or 'x86_64')}") from None
        platform = platforms.Platform.of(found.attrs)
        if not platform.architecture:
            raise UsageError(f"{image} names no architecture in its config", "rebuild it with imagekit build")
        out.append((image, platform, found.id))
    return out


def _pushed(client: reg.RegistryClient, registry: str, repo: str, text: str) -> tuple[PlatformPush, reg.Resolved]:
    """An image already pushed (by a native builder of its arch) into the index's own repository."""
    ref = parse(text)
    if (ref.registry, ref.repository) != (registry, repo):
        raise UsageError(f"{text} is in {ref.registry}/{ref.repository}, and the index goes to {registry}/{repo}",
                         "an index names manifests of its own repository: push each platform's image there "
                         "(e.g. under TAG-arm64) first")
    if client.get_manifest(ref.repository, ref.reference).media_type in reg.INDEX_TYPES:
        raise UsageError(f"{text} is an index itself", "name each platform's own image (TAG-amd64, TAG-arm64)")
    resolved = client.resolve(ref)
    platform = client.image_platform(resolved)
    return PlatformPush(platform=str(platform), image=text, reference=ref.docker, digest=resolved.digest,
                        size=resolved.size, media_type=resolved.media_type,
                        config=resolved.config_digest), resolved


def _one_per_platform(items: list[tuple[str, str]]) -> None:
    seen: dict[str, str] = {}
    for image, platform in items:
        key = "/".join(platform.split("/")[:2])
        if key in seen:
            raise UsageError(f"{seen[key]} and {image} are both {key} images: an index holds one image per "
                             "platform", "push one of them")
        seen[key] = image


def push_platforms(images: list[str], to: str, *, log: Callable[[str], None] | None = None,
                   before_index: Callable[[reg.RegistryClient, str, list[tuple[PlatformPush, reg.Resolved]]],
                                          None] | None = None) -> IndexPushResult:
    """Push each local image under ``TO``'s tag plus its architecture (``:1-amd64``, ``:1-arm64``),
    check that the registry holds each manifest and that it is that image, run ``before_index``
    (the per-platform artifacts of the local images), and only then write the OCI image index under
    ``TO``'s tag. An image given as a reference (``docker://REGISTRY/REPO:TAG-arm64``, pushed by
    another machine into the same repository) is named by the index as it is.

    A push that fails half-way leaves the tag as it was (its previous index or image, whose
    manifests the registry still has): never an index naming a manifest that is not there."""
    say = log or (lambda _m: None)
    registry, repo, tag = split_reference(to)
    ref = parse(f"{registry}/{repo}:{tag}")
    client = reg.RegistryClient.for_reference(ref)
    found = inspect_platforms([i for i in images if not is_reference(i)])
    already = [_pushed(client, registry, repo, i) for i in images if is_reference(i)]
    _one_per_platform([(i, str(p)) for i, p, _ in found] + [(one.image, one.platform) for one, _ in already])
    pushed: list[PlatformPush] = []
    for image, platform, image_id in found:
        own = f"{registry}/{repo}:{tag}-{platform.architecture}{'-' + platform.variant if platform.variant else ''}"
        say(f"pushing {image} ({platform}) as {own}")
        result = push_image(image, own, log=log)
        pushed.append(PlatformPush(platform=str(platform), image=image, reference=result.reference,
                                   digest=result.digest, size=result.size, media_type="", config=image_id))
    subjects = []
    for one in pushed:
        # Read back by digest: the registry has it, and it is this image (the per-arch tag may have
        # moved meanwhile; the digest cannot).
        resolved = client.resolve(ref.with_digest(one.digest))
        if resolved.config_digest != one.config:
            raise IntegrityError(f"{registry}/{repo}@{one.digest} has config {resolved.config_digest}, but "
                                 f"{one.image} is {one.config}", "push again; no index was written")
        one.media_type, one.size = resolved.media_type, resolved.size
        subjects.append((one, resolved))
    if before_index is not None:
        before_index(client, repo, subjects)
    every = sorted(pushed + [one for one, _ in already], key=lambda one: one.platform)
    body = reg.image_index([one.entry() for one in every])
    digest, _ = client.put_manifest(repo, tag, body, reg.OCI_INDEX)
    say(f"pushed the index {registry}/{repo}:{tag} ({digest}): " + ", ".join(one.platform for one in every))
    return IndexPushResult(reference=f"{registry}/{repo}:{tag}", digest=digest, size=len(body),
                           pyxis=pyxis_reference(registry, repo, tag), pinned=f"{registry}/{repo}@{digest}",
                           platforms=every)
