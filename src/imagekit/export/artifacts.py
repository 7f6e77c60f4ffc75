"""Exports pushed beside their image as OCI 1.1 artifacts, and pulled back by image digest.

An artifact is an OCI image manifest whose ``subject`` is the image's manifest
digest and whose one layer is the exported file:

| format | artifactType | config | layer |
|---|---|---|---|
| enroot | ``application/vnd.imagekit.enroot.v1`` | OCI empty ``{}`` (``application/vnd.oci.empty.v1+json``) | ``application/vnd.imagekit.enroot.layer.v1.squashfs`` |
| sif | ``application/vnd.sylabs.sif.config.v1+json`` | ``{}`` as that type | ``application/vnd.sylabs.sif.layer.v1.sif`` |

The SIF artifact is laid out the way Apptainer pushes a SIF (``oras://``: the
config type Apptainer writes, the layer type Sylabs registered); no type exists
for an Enroot squashfs, so imagekit defines one. The manifest's annotations (in
:data:`ANNOTATIONS`) record the export's format, preset, tool and squashfs
options, imagekit's version, the image's config digest (its Docker image ID)
and the file's sha256 and size; the layer carries ``org.opencontainers.image.title``.
The manifest is serialized canonically, so the same file on the same image is
the same artifact digest, and pushing it again changes nothing.

Registries with the referrers API answer the manifest PUT with
``OCI-Subject``. Without it (Debian's docker-registry, CNCF distribution 2.x),
imagekit maintains the referrers tag schema of distribution-spec 1.1 itself:
the image index tagged ``sha256-<hex>`` of the subject lists every referrer.
It is updated read-modify-write, keeping every other entry and field, and read
back after the write, redoing the update when another writer's index replaced
it. The spec leaves concurrent writers to the client and distribution 2.x has
no conditional PUT, so two pushers to one image can still lose an entry when
the other's write lands after the read-back; pushing again restores it (and
only what is missing is exported and uploaded).

Nothing half-made becomes visible: blobs are uploaded with their digest checked
by the registry, the manifest is written only after its blobs, and the index
only after the manifest. A refused manifest leaves at most blobs that no
manifest references (invisible to clients; the registry's garbage collection
removes them). They are not deleted by imagekit, because another push may share
them. Pulls write to a temporary file and rename it only after the digest matched.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from imagekit import __version__, export
from imagekit.util import atomic, platforms
from imagekit.engines import docker as engine
from imagekit.util.errors import ArtifactMissing, IntegrityError, RegistryError, UsageError
from imagekit.export import ExportRequest, export_image, formats, squash
from imagekit.export.formats import (ENROOT_ARTIFACT_TYPE, ENROOT_LAYER, SIF_CONFIG, SIF_LAYER,  # noqa: F401
                                     signed_inside)
from imagekit.export.output import check_free_space, prepare_target
from imagekit.util.signals import interrupt_on_sigterm
from imagekit.export.push import IndexPushResult, push_image, push_platforms
from imagekit.registry import client as reg
from imagekit.registry.reference import parse

EMPTY_CONFIG = b"{}"

# Manifest annotations (copied into the referrers index entry, so they can be filtered on).
A_FORMAT = "io.imagekit.export.format"
A_PRESET = "io.imagekit.export.preset"
A_TOOL = "io.imagekit.export.tool"
A_OPTIONS = "io.imagekit.export.squash-options"
A_VERSION = "io.imagekit.export.version"
A_CONFIG = "io.imagekit.image.config"
A_SHA256 = "io.imagekit.export.sha256"
A_SIZE = "io.imagekit.export.size"
A_SIGNER = "io.imagekit.export.signer"      # a SIF signed inside (its signature object): the key ID
TITLE = "org.opencontainers.image.title"
ANNOTATIONS = {
    A_FORMAT: "the export format (formats.FORMATS: enroot, sif)",
    A_PRESET: "the export preset (enroot, shared-fs, none; gzip, zstd)",
    A_TOOL: "the squashfs tool that wrote it (sqfstar, tar2sqfs, apptainer)",
    A_OPTIONS: "the preset's options for that tool plus --squash-opt, space-separated",
    A_VERSION: "the imagekit version that exported it",
    A_CONFIG: "the image's config digest (the Docker image ID)",
    A_SHA256: "sha256:<hex> of the file (also the layer digest)",
    A_SIZE: "the file's size in bytes",
    A_SIGNER: "sif: the key ID that signed the file inside (docs/signing.md); absent when unsigned",
}


@dataclass(frozen=True)
class Kind:
    """An artifact's layout, read from its format's row (formats.Format.artifact, suffix and mode)."""

    format: str
    artifact_type: str
    config_media_type: str
    layer_media_type: str
    suffix: str
    mode: int


def kind(fmt: str) -> Kind:
    """The artifact layout of format ``fmt``; UsageError unless it is pushed as an artifact."""
    row = formats.FORMATS.get(fmt)
    if row is None or row.artifact is None:
        raise UsageError(f"unknown artifact format {fmt!r}", f"use one of: {', '.join(formats.with_artifacts())}")
    a = row.artifact
    return Kind(row.name, a.artifact_type, a.config_media_type, a.layer_media_type, row.suffix, row.mode)


@dataclass(frozen=True)
class RegistrySubject:
    """An image manifest (``subject``) and the repository of ``client``'s registry that its referrers
    (exports, signed statements) are pushed to."""

    client: reg.RegistryClient
    repo: str
    subject: reg.Resolved


@dataclass
class ExportedFile:
    """One export to push, with what its annotations record."""

    format: str
    path: Path
    preset: str
    tool: str = ""
    options: tuple[str, ...] = ()
    sha256: str = ""          # sha256:<hex>; computed when empty
    size: int = 0
    signer: str = ""          # the key ID of a SIF's own signature object


@dataclass
class PushedArtifact:
    format: str
    preset: str
    digest: str               # the artifact manifest's digest
    artifact_type: str
    file_sha256: str
    bytes: int
    listed_by: str            # "api" (OCI-Subject) or the referrers tag
    uploaded: bool            # False when the registry already had this artifact

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PullResult:
    path: str
    format: str
    reference: str
    subject: str              # the image manifest digest
    artifact: str             # the artifact manifest digest
    preset: str
    bytes: int
    sha256: str
    listed_by: str
    seconds: float = 0.0
    annotations: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def canonical(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def squash_options(tool: str, preset: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The options the preset gives ``tool`` (a SIF written by apptainer records only the preset)."""
    known = squash.PRESETS.get(preset)
    if known is None or tool not in ("sqfstar", "mksquashfs", "tar2sqfs"):
        return tuple(extra)
    args = known.tar2sqfs_args() if tool == "tar2sqfs" else known.mksquashfs_args()
    return tuple(args) + tuple(extra)


def annotations_for(file: ExportedFile, config_digest: str) -> dict[str, str]:
    notes = {A_FORMAT: file.format, A_PRESET: file.preset, A_TOOL: file.tool,
             A_OPTIONS: " ".join(file.options), A_VERSION: __version__, A_CONFIG: config_digest,
             A_SHA256: file.sha256, A_SIZE: str(file.size)}
    if file.signer:
        notes[A_SIGNER] = file.signer
    return notes


def artifact_manifest(file: ExportedFile, subject: reg.Resolved) -> bytes:
    k = kind(file.format)
    doc = {
        "schemaVersion": 2,
        "mediaType": reg.OCI_MANIFEST,
        "artifactType": k.artifact_type,
        "config": {"mediaType": k.config_media_type, "digest": reg.sha256_digest(EMPTY_CONFIG),
                   "size": len(EMPTY_CONFIG)},
        "layers": [{"mediaType": k.layer_media_type, "digest": file.sha256, "size": file.size,
                    "annotations": {TITLE: f"image{k.suffix}"}}],
        "subject": subject.descriptor(),
        "annotations": annotations_for(file, subject.config_digest),
    }
    if k.config_media_type == reg.OCI_EMPTY:
        doc["config"]["data"] = "e30="   # the empty descriptor's inline data, as image-spec 1.1 shows it
    return canonical(doc)


def referrer_descriptor(digest: str, body: bytes) -> dict:
    """The index entry distribution-spec 1.1 asks for: artifactType and every annotation copied."""
    doc = json.loads(body)
    entry = {"mediaType": doc.get("mediaType", reg.OCI_MANIFEST), "digest": digest, "size": len(body),
             "artifactType": doc.get("artifactType") or doc["config"]["mediaType"]}
    if doc.get("annotations"):
        entry["annotations"] = doc["annotations"]
    return entry


def add_to_referrers_tag(client: reg.RegistryClient, repo: str, subject: str, entry: dict,
                         attempts: int = 5) -> str:
    """Append ``entry`` to the index tagged with the referrers tag of ``subject`` (kept as is
    otherwise), unless it is there already. Returns the tag."""
    tag = reg.referrers_tag(subject)
    for _ in range(attempts):
        try:
            # Accept every manifest type: a registry answers 404 for a manifest the Accept header
            # excludes, and a non-index under this tag must be refused, not overwritten.
            current = client.get_manifest(repo, tag, reg.ACCEPT_ALL)
        except reg.NotFound:
            current = None
        if current is not None and current.media_type != reg.OCI_INDEX:
            raise RegistryError(f"{client.registry}/{repo}:{tag} holds a {current.media_type or 'manifest'}, "
                                "not a referrers index; refusing to overwrite it",
                                f"that tag belongs to the referrers schema: move the image tagged {tag}")
        doc = current.json() if current else {"schemaVersion": 2, "mediaType": reg.OCI_INDEX, "manifests": []}
        if any(m.get("digest") == entry["digest"] for m in doc.get("manifests") or []):
            return tag
        doc["manifests"] = list(doc.get("manifests") or []) + [entry]
        client.put_manifest(repo, tag, canonical(doc), reg.OCI_INDEX)
        # No conditional PUT in distribution 2.x: read back, and redo if another writer won.
        check = client.get_manifest(repo, tag, reg.OCI_INDEX)
        if any(m.get("digest") == entry["digest"] for m in check.json().get("manifests") or []):
            return tag
    raise RegistryError(f"{client.registry}/{repo}:{tag} kept changing while imagekit added its artifact "
                        f"({attempts} tries)", "push again when the other pushes are done")


def push_artifact(client: reg.RegistryClient, repo: str, subject: reg.Resolved, file: ExportedFile,
                  log: Callable[[str], None] | None = None) -> PushedArtifact:
    """Upload ``file`` and its manifest (subject = the image), then list it as a referrer."""
    say = log or (lambda _msg: None)
    if not file.sha256 or not file.size:
        file.sha256, file.size = reg.digest_file(file.path)
    body = artifact_manifest(file, subject)
    digest = reg.sha256_digest(body)
    k = kind(file.format)
    client.ensure_access(repo, push=True)
    client.upload_blob(repo, EMPTY_CONFIG, reg.sha256_digest(EMPTY_CONFIG), len(EMPTY_CONFIG))
    say(f"uploading {file.format} ({file.size / (1 << 20):,.1f} MiB) to {client.registry}/{repo}")
    state = {"next": 0, "said": time.monotonic()}

    def progress(done: int) -> None:
        # Every tenth (or 64 MiB), and at least every 5 s on a slow link.
        if done >= state["next"] or done == file.size or time.monotonic() - state["said"] >= 5.0:
            state["next"], state["said"] = done + max(file.size // 10, 64 << 20), time.monotonic()
            say(f"  {done / (1 << 20):,.1f} / {file.size / (1 << 20):,.1f} MiB")

    sent = client.upload_blob(repo, file.path, file.sha256, file.size, progress=progress)
    try:
        _, headers = client.put_manifest(repo, digest, body, reg.OCI_MANIFEST)
    except RegistryError as exc:
        status, codes = getattr(exc, "status", None), getattr(exc, "codes", [])
        # The spec's answer to a manifest a registry will not store: 400 MANIFEST_INVALID (or
        # UNSUPPORTED), or 415 for a media type it does not know.
        if status == 415 or (status == 400 and not any("BLOB_UNKNOWN" in c for c in codes)):
            raise RegistryError(f"{client.registry} refused the {file.format} artifact manifest "
                                f"(artifactType {k.artifact_type}, layer {k.layer_media_type}): "
                                f"{exc.message}",
                                "the registry does not accept this artifact type: allow it in the "
                                "registry's configuration, or push the artifacts to another registry; "
                                "nothing was listed as a referrer") from None
        raise
    if headers.get("OCI-Subject") == subject.digest:
        listed_by = "api"
    else:
        listed_by = add_to_referrers_tag(client, repo, subject.digest, referrer_descriptor(digest, body))
    say(f"pushed {file.format} artifact {digest} (subject {subject.digest}, listed by {listed_by})")
    return PushedArtifact(format=file.format, preset=file.preset, digest=digest, artifact_type=k.artifact_type,
                          file_sha256=file.sha256, bytes=file.size, listed_by=listed_by, uploaded=sent)


def matching(entries: list[dict], fmt: str, preset: str | None = None) -> list[dict]:
    """Referrer entries of ``fmt`` (and ``preset``), oldest first as the list gives them."""
    k = kind(fmt)
    # An entry whose format annotation names another format is not this one's, whatever its type; one
    # with none (a SIF pushed by another tool) is still of this format.
    found = [e for e in entries if e.get("artifactType") == k.artifact_type and _notes(e).get(A_FORMAT, fmt) == fmt]
    if preset is not None:
        found = [e for e in found if (e.get("annotations") or {}).get(A_PRESET) == preset]
    return found


def _notes(entry: dict) -> dict:
    """A referrer entry's annotations; {} when it has none or they are malformed (not an object)."""
    notes = entry.get("annotations")
    return notes if isinstance(notes, dict) else {}


def _describe(entries: list[dict]) -> str:
    have = sorted({f"{(e.get('annotations') or {}).get(A_FORMAT, e.get('artifactType', '?'))} "
                   f"({(e.get('annotations') or {}).get(A_PRESET, '?')})" for e in entries})
    return ", ".join(have)


@dataclass(frozen=True)
class ArtifactPull:
    """Which pushed export ``imagekit pull`` fetches: its format, only one made with ``preset`` (None:
    any), for the image of ``platform`` (``linux/arm64``; None: this machine's) when the reference
    names an index. ``force`` replaces an existing output. An unknown format fails when made."""

    format: str
    preset: str | None = None
    force: bool = False
    check_space: bool = True
    platform: str | None = None

    def __post_init__(self) -> None:
        kind(self.format)


def pull_artifact(reference: str, wanted: ArtifactPull, output: str | Path, *,
                  client: reg.RegistryClient | None = None,
                  progress: Callable[[int, int], None] | None = None) -> PullResult:
    """Fetch the export ``wanted`` names, pushed for the image ``reference`` names, and verify it.
    An index resolves to ``wanted.platform``'s image, and the artifact is that image's own.

    ArtifactMissing (exit 5) when none was pushed, IntegrityError (6) when the bytes do not
    match; either way nothing is left at ``output``."""
    import time

    started = time.monotonic()
    fmt, preset, platform = wanted.format, wanted.preset, wanted.platform
    k = kind(fmt)
    ref = parse(reference)
    target = prepare_target(Path(output), wanted.force)
    client = client or reg.RegistryClient.for_reference(ref)
    subject = client.resolve(ref, platforms.parse(platform) if platform else None)
    entries, listed_by = client.referrers(ref.repository, subject.digest)
    chosen = matching(entries, fmt, preset)
    if not chosen:
        others = f"; it has: {_describe(entries)}" if entries else ""
        wanted = fmt + (f" (preset {preset})" if preset else "")
        raise ArtifactMissing(
            f"no {wanted} artifact was pushed for {ref} ({subject.digest}){others}",
            f"make one where the image is: imagekit push IMAGE --to {ref.registry}/{ref.repository}:"
            f"{'TAG' if ref.digest else ref.tag} --with {fmt}" + (f" --preset {fmt}={preset}" if preset else ""))
    entry = chosen[-1]      # the newest one listed (the tag schema appends)
    layer, annotations = checked_layer(client, ref.repository, subject, entry, fmt)
    size = int(layer["size"])
    if wanted.check_space:
        check_free_space(target.parent, size, f"the {fmt} artifact of {ref}")

    def report(done: int) -> None:
        if progress is not None:
            progress(done, size)

    with interrupt_on_sigterm(), atomic.target(target, mode=k.mode, sync=True) as tmp:
        with open(tmp, "wb") as fh:
            client.download_blob(ref.repository, layer["digest"], fh, size=size, progress=report)
    return PullResult(path=str(target), format=fmt, reference=ref.docker, subject=subject.digest,
                      artifact=entry["digest"], preset=annotations.get(A_PRESET, ""), bytes=size,
                      sha256=layer["digest"].split(":", 1)[1], listed_by=listed_by,
                      seconds=round(time.monotonic() - started, 3), annotations=annotations)


def checked_layer(client: reg.RegistryClient, repository: str, subject: reg.Resolved, entry: dict,
                  fmt: str) -> tuple[dict, dict]:
    """The artifact manifest ``entry`` (a referrers entry) names, checked against ``subject``:
    its own subject, one layer of the format's media type, and, where it records them, the
    file's digest and the image's config digest. Returns (layer descriptor, annotations);
    IntegrityError or RegistryError say what is wrong."""
    k = kind(fmt)
    manifest = client.get_manifest(repository, entry["digest"], reg.OCI_MANIFEST)
    try:
        doc = manifest.json()
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise IntegrityError(f"artifact {entry['digest']} is not a JSON manifest", "push the artifact again")
    if (doc.get("subject") or {}).get("digest") != subject.digest:
        raise IntegrityError(f"artifact {entry['digest']} is listed for {subject.digest} but its subject "
                             f"is {(doc.get('subject') or {}).get('digest')}",
                             "the referrers index is wrong: push the artifact again")
    layers = [layer for layer in doc.get("layers") or []
              if isinstance(layer, dict) and layer.get("mediaType") == k.layer_media_type]
    if len(layers) != 1:
        raise RegistryError(f"artifact {entry['digest']} has {len(layers)} {k.layer_media_type} layers, not 1")
    layer = layers[0]
    if not isinstance(layer.get("digest"), str) or not isinstance(layer.get("size"), int) or layer["size"] < 0:
        raise IntegrityError(f"artifact {entry['digest']}: its layer has no valid digest and size")
    annotations = doc.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise IntegrityError(f"artifact {entry['digest']}: its annotations are not an object")
    recorded = annotations.get(A_SHA256)
    if recorded and recorded != layer["digest"]:
        raise IntegrityError(f"artifact {entry['digest']} records file {recorded} but its layer is "
                             f"{layer['digest']}", "push the artifact again")
    config = annotations.get(A_CONFIG)
    if config and config != subject.config_digest:
        raise IntegrityError(f"artifact {entry['digest']} is an export of image {config}, but "
                             f"{subject.digest} has config {subject.config_digest}",
                             "it was pushed beside the wrong image: push the right one again")
    return layer, annotations


def parse_presets(values: tuple[str, ...] | list[str], formats: list[str]) -> dict[str, str]:
    """``--preset P`` (every format) or ``--preset FORMAT=P`` (repeatable) → {format: preset}."""
    chosen = {fmt: export.formats.get(fmt).default_preset for fmt in formats}
    for value in values:
        if "=" in value:
            fmt, _, preset = value.partition("=")
            if fmt not in formats:
                raise UsageError(f"--preset {value}: {fmt!r} is not among --with {','.join(formats)}",
                                 "use FORMAT=PRESET with a format you push, or a plain PRESET")
            chosen[fmt] = preset
        else:
            chosen = {fmt: value for fmt in formats}
    return chosen


def parse_formats(value: str) -> list[str]:
    formats = [f.strip() for f in value.split(",") if f.strip()]
    for fmt in formats:
        kind(fmt)
    if not formats:
        raise UsageError("--with needs at least one format", "e.g. --with enroot,sif")
    return list(dict.fromkeys(formats))


@dataclass(frozen=True)
class ArtifactPlan:
    """What a push attaches beside each image it pushes: one checked export request per format (a bad
    preset fails when the plan is made, before anything is pushed), and how the push reports.

    ``prepare(format, file, subject)`` may change an export before it is pushed (signing a SIF
    inside); ``signer`` is then that key's ID: a SIF pushed without it is not reused."""

    requests: dict[str, ExportRequest]
    log: Callable[[str], None] | None = None
    export_progress: Callable[[int, bool], None] | None = None
    workdir: str | Path | None = None
    prepare: Callable[[str, Path, reg.Resolved], None] | None = None
    signer: str = ""

    @classmethod
    def of(cls, formats: list[str], presets: dict[str, str], *, log: Callable[[str], None] | None = None,
           export_progress: Callable[[int, bool], None] | None = None,
           workdir: str | Path | None = None) -> "ArtifactPlan":
        """The plan for ``--with FORMATS`` and ``presets`` ({format: preset}; a format left out gets its default)."""
        return cls(export_requests(formats, presets), log=log, export_progress=export_progress, workdir=workdir)

    def say(self, message: str) -> None:
        if self.log is not None:
            self.log(message)


def push_with_artifacts(image: str, to: str | None, plan: ArtifactPlan) -> tuple[object, list[PushedArtifact]]:
    """Push ``image`` (docker push), then one artifact per format of ``plan``, exporting only what
    the registry does not already have for this image, format and preset."""
    pushed = push_image(image, to, log=plan.say)
    ref = parse(pushed.reference)
    client = reg.RegistryClient.for_reference(ref)
    subject = client.resolve(ref.with_digest(pushed.digest))
    return pushed, attach(client, ref.repository, subject, image, plan)


def export_requests(formats: list[str], presets: dict[str, str]) -> dict[str, ExportRequest]:
    """One checked ExportRequest per format (a bad preset fails here, before anything is pushed)."""
    return {fmt: ExportRequest(fmt, preset=presets.get(fmt)) for fmt in formats}


def attach(client: reg.RegistryClient, repo: str, subject: reg.Resolved, image: str,
           plan: ArtifactPlan) -> list[PushedArtifact]:
    """The exports of the local ``image`` as referrers of ``subject``: that image's OWN manifest.

    In a multi-platform push each platform's image gets its own, so a node pulls the artifact
    of the image it runs; an index is never a subject (it is no image: an export of one platform
    would be served to every other). Exports the registry already lists for this subject, format
    and preset are not made again. This is the one place per-image artifacts are attached."""
    say, signer = plan.say, plan.signer
    if subject.media_type not in reg.MANIFEST_TYPES:
        raise RegistryError(f"{subject.reference} is a {subject.media_type}, not one image's manifest: "
                            "artifacts name the manifest of the image they were made from",
                            "resolve the index to each platform's manifest first")
    image_id = engine.inspect(image).id
    if subject.config_digest != image_id:
        raise IntegrityError(f"{subject.reference} has config {subject.config_digest}, but {image} is {image_id}",
                             "another push replaced the tag meanwhile: push again")
    entries, _ = client.referrers(repo, subject.digest)
    results: list[PushedArtifact] = []
    for fmt, request in plan.requests.items():
        preset = request.preset
        # Signing never reuses a listed export: its annotations (and bytes) are whoever pushed it, and
        # the statements would name them. The export is made (or hashed in full) here, and the
        # registry keeps one copy of equal bytes anyway.
        existing = [] if signer else matching(entries, fmt, preset)
        if existing:
            entry = existing[-1]
            notes = entry.get("annotations") or {}
            say(f"{fmt} ({preset}) is already pushed for {subject.digest}: {entry['digest']}")
            results.append(PushedArtifact(format=fmt, preset=preset, digest=entry["digest"],
                                          artifact_type=entry.get("artifactType", ""),
                                          file_sha256=notes.get(A_SHA256, ""), bytes=int(notes.get(A_SIZE, 0)),
                                          listed_by="existing", uploaded=False))
            continue
        with tempfile.TemporaryDirectory(prefix="imagekit-artifact-", dir=plan.workdir) as tmp:
            out = Path(tmp) / f"image{kind(fmt).suffix}"
            say(f"exporting {image} as {fmt} ({preset})")
            exported = export_image(image, request, out, progress=plan.export_progress, for_signing=bool(signer))
            file = ExportedFile(format=fmt, path=out, preset=preset, tool=exported.tool,
                                options=squash_options(exported.tool, preset),
                                sha256=f"sha256:{exported.sha256}", size=exported.bytes)
            if plan.prepare is not None:
                plan.prepare(fmt, out, subject)
                file.sha256, file.size = "", 0        # computed again from what is pushed
                file.signer = signer if signed_inside(fmt) else ""
            results.append(push_artifact(client, repo, subject, file, log=say))
    return results


def push_platforms_with_artifacts(images: list[str], to: str, plan: ArtifactPlan
                                  ) -> tuple[IndexPushResult, dict[str, list[PushedArtifact]]]:
    """:func:`imagekit.export.push.push_platforms` with each platform's exports attached to that
    platform's own manifest, before the index is written (the index appears when all is there).
    Returns the index push and platform -> its artifacts."""
    made: dict[str, list[PushedArtifact]] = {}

    def before_index(client: reg.RegistryClient, repo: str, subjects: list) -> None:
        for one, subject in subjects:
            made[one.platform] = attach(client, repo, subject, one.image, plan)

    result = push_platforms(images, to, log=plan.log, before_index=before_index)
    return result, made
