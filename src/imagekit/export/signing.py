"""Signing what imagekit makes: an engine image, an exported ``.sqsh`` or ``.sif``, a pushed image.

Each platform image gets two in-toto v1 statements with the same subjects (:mod:`imagekit.attest`):
the SLSA provenance and the CycloneDX SBOM (predicate type ``https://cyclonedx.org/bom``), each in a
DSSE envelope signed with the site key. The subjects grow as the image travels: its config digest
(the image ID) from the build on, its per-platform manifest digest once pushed, and the sha256 of each
``.sqsh`` and ``.sif`` made of it. Where the envelopes go:

- an engine image: ``$IMAGEKIT_ATTESTATIONS`` (default ``~/.local/share/imagekit/attestations``),
  ``sha256-<config hex>.intoto.jsonl``: the engine has no place for them;
- an exported file: ``FILE.intoto.jsonl`` beside it, and ``attestations.intoto.jsonl`` beside the
  export store's entry (the entry's file is never changed);
- a ``.sif``: also inside it, the SBOM as a ``DataSBOM`` object, the provenance as a JSON object and
  a signature object over every object, which ``apptainer verify --key`` checks
  (:mod:`imagekit.export.sif_sign`);
- a pushed image: OCI referrers of its manifest (:mod:`imagekit.export.attestations`).

The private key is read once, used in this process and never written, logged or put in a build.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from imagekit import registry
from imagekit.engines import docker as engine
from imagekit.attest import (CYCLONEDX_PREDICATE, PAYLOAD_TYPE, SLSA_PROVENANCE, bundle, inventory, provenance,
                             sbom, signer)
from imagekit.attest.inventory import Inventory
from imagekit.attest import keys
from imagekit.attest.keys import SigningKey
from imagekit.attest.provenance import BuildRun
from imagekit.attest.sbom import ImageRecord
from imagekit.attest.statement import Statement, Subject, hex_of
from imagekit.util.errors import ImagekitError, IntegrityError, UsageError
from imagekit.export import artifacts, attestation_push, formats, sif_sign
from imagekit.export.store import nofollow
from imagekit.export.formats import signed_inside
from imagekit.export.image_source import Source, open_source
from imagekit.export.output import ExportResult, sha256_file
from imagekit.image_facts import reader
from imagekit.registry import client as reg
from imagekit.sif_reader import ARCH_NAMES, read_sif

ATTESTATIONS_ENV = "IMAGEKIT_ATTESTATIONS"
Log = Callable[[str], None]


def attestation_dir(env: dict[str, str] | os._Environ | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get(ATTESTATIONS_ENV):
        return Path(env[ATTESTATIONS_ENV])
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "imagekit" / "attestations"


def image_bundle_path(config_digest: str, env: dict[str, str] | os._Environ | None = None) -> Path:
    return attestation_dir(env) / f"sha256-{hex_of(config_digest)}.intoto.jsonl"


def platform_of(info: dict) -> str:
    os_, arch, variant = info.get("Os") or "linux", info.get("Architecture") or "amd64", info.get("Variant") or ""
    return f"{os_}/{arch}" + (f"/{variant}" if variant else "")


def record_of(source: Source, name: str | None = None, manifest_digest: str = "") -> ImageRecord:
    """The image a source gives, as statements name it."""
    info = source.inspect()
    labels = dict((info.get("Config") or {}).get("Labels") or {})
    return ImageRecord(name or source.text, info["Id"], platform_of(info), str(info.get("Created") or ""),
                       labels, manifest_digest)


def scan_source(source: Source, *, files: bool = False) -> Inventory:
    """The inventory of the source's root filesystem (one pass over its stream)."""
    with source.rootfs() as rootfs:
        try:
            found = inventory.scan(rootfs.file, files=files, what=source.text)
        except (tarfile.TarError, OSError) as exc:
            raise rootfs.failed(exc) from None
        rootfs.finish()
    return found


def scan_squashfs(path: Path, offset: int = 0, size: int = 0, *, files: bool = False) -> Inventory:
    """The inventory of a squashfs file (``sqfs2tar``); of a SIF's partition at ``offset``, copied out first
    (sqfs2tar reads a file, not a slice)."""
    tool = shutil.which("sqfs2tar")
    if tool is None:
        raise ImagekitError("reading a squashfs's packages needs sqfs2tar (squashfs-tools-ng)",
                            "apt-get install squashfs-tools-ng")
    with tempfile.TemporaryDirectory(prefix="imagekit-scan-") as tmp:
        target = path
        if offset:
            target = Path(tmp) / "partition.sqfs"
            with open(path, "rb") as src, open(target, "wb") as out:
                src.seek(offset)
                left = size
                while left > 0:
                    chunk = src.read(min(left, 4 << 20))
                    if not chunk:
                        break
                    out.write(chunk)
                    left -= len(chunk)
        with open(Path(tmp) / "err", "w+b") as err:
            proc = subprocess.Popen([tool, "--no-skip", str(target)], stdout=subprocess.PIPE, stderr=err)
            try:
                found = inventory.scan(proc.stdout, files=files, what=str(path))  # type: ignore[arg-type]
            except (tarfile.TarError, OSError) as exc:
                proc.kill()
                raise ImagekitError(f"{path}: cannot read its file system: {exc}") from None
            except BaseException:       # a bound of the scan, an interrupt: sqfs2tar stops with it
                proc.kill()
                proc.wait()
                raise
            finally:
                proc.stdout.close()  # type: ignore[union-attr]
            if proc.wait() != 0:
                err.seek(0)
                raise ImagekitError(f"{path}: sqfs2tar failed: {err.read().decode(errors='replace')[-300:]}")
    return found


@dataclass
class Described:
    """An image's SBOM and provenance, not yet signed."""

    record: ImageRecord
    sbom: bytes
    predicate: dict
    inventory: Inventory = field(repr=False, default_factory=Inventory)

    def subjects(self, files: list[Subject] = ()) -> list[Subject]:
        out = []
        if self.record.manifest_digest:
            out.append(Subject("oci-manifest", hex_of(self.record.manifest_digest),
                               f"{self.record.name}@{self.record.manifest_digest}", self.record.platform))
        if self.record.config_digest:
            out.append(Subject("oci-config", hex_of(self.record.config_digest), self.record.config_digest,
                               self.record.platform))
        return out + list(files)


def describe(source: Source, *, name: str | None = None, manifest_digest: str = "", run: BuildRun | None = None,
             log: Log | None = None) -> Described:
    """SBOM and provenance of ``source``'s image: its labels, and its inventory read from its files."""
    record = record_of(source, name, manifest_digest)
    if log:
        log(f"reading the dpkg and pip inventories of {record.name} ({record.platform})")
    found = scan_source(source)
    run = run or BuildRun(engine=engine.version() if source.engine_image else "")
    return Described(record, sbom.to_json(sbom.build(record, found)), provenance.predicate(record, run), found)


def sign_statements(described: Described, subjects: list[Subject], key: SigningKey) -> list[dict]:
    """Two envelopes: the provenance statement and the SBOM statement, same subjects."""
    prov = Statement(subjects, SLSA_PROVENANCE, described.predicate)
    bom = Statement(subjects, CYCLONEDX_PREDICATE, json.loads(described.sbom))
    return [signer.sign(prov.payload(), PAYLOAD_TYPE, key), signer.sign(bom.payload(), PAYLOAD_TYPE, key)]


def file_subject(path: Path, fmt: str, platform: str, preset: str = "", sha256: str | None = None) -> Subject:
    return Subject(fmt, hex_of(sha256 or sha256_file(path)), path.name, platform, preset)


# --- the flows ------------------------------------------------------------------------------------


@dataclass
class Signed:
    """What one signing produced: the files written and the subjects signed."""

    target: str
    bundle: str
    subjects: list[Subject]
    signer: str
    files: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"target": self.target, "bundle": self.bundle, "signer": self.signer, "files": self.files,
                "subjects": [s.descriptor() for s in self.subjects]}


def sign_engine_image(source: Source, key: SigningKey, *, run: BuildRun | None = None, log: Log | None = None,
                      described: Described | None = None) -> Signed:
    """Statements about an engine image (subject: its config digest), kept in the attestation directory."""
    described = described or describe(source, run=run, log=log)
    subjects = described.subjects()
    path = image_bundle_path(described.record.config_digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    bundle.write(path, sign_statements(described, subjects, key))
    return Signed(source.text, str(path), subjects, key.key.keyid)


def sign_sif(path: Path, key: SigningKey, described: Described, *, src: Path | None = None,
             expect: str | None = None) -> Path:
    """Write the signed SIF at ``path`` (from ``src``, default ``path``): SBOM, provenance, signature.
    ``expect``: the sha256 the unsigned file must have (checked on the copy that is signed)."""
    embedded = None
    if described.subjects():   # a file alone names no image: its provenance is only beside it
        prov = Statement(described.subjects(), SLSA_PROVENANCE, described.predicate)
        embedded = json.dumps(signer.sign(prov.payload(), PAYLOAD_TYPE, key), sort_keys=True).encode()
    return sif_sign.sign_file(src or path, path,
                              lambda payload: signer.sign(payload, sif_sign.METADATA_TYPE, key),
                              sbom=described.sbom, provenance=embedded, expect=expect)


def sign_export(exported: ExportResult, key: SigningKey, described: Described, *, log: Log | None = None) -> Signed:
    """Sign the export ``exported`` made of the described image (made with ``for_signing``: its sha256
    is of bytes this process made or hashed in full): a SIF gets its objects (written anew: its path
    may be a hard link to the store's entry), then the bundle beside it (and beside the store's entry).
    Only those bytes are signed: an output whose bytes are not that sha256 by now is refused."""
    path, fmt, preset, store_entry = Path(exported.path), exported.format, exported.compression, exported.store_entry
    files = []
    if signed_inside(fmt):
        sign_sif(path, key, described, expect=exported.sha256)
        files.append(str(path))
    subject = file_subject(path, fmt, described.record.platform, preset)
    if not signed_inside(fmt) and subject.sha256 != exported.sha256:
        raise IntegrityError(f"{path} has sha256:{subject.sha256} by now, not the sha256:{exported.sha256} "
                             "this export made: not signing it", "export it again (and keep others from "
                             "writing its directory)")
    subjects = described.subjects([subject])
    envelopes = sign_statements(described, subjects, key)
    side = bundle.write(bundle.beside(path), envelopes)
    files.append(str(side))
    # The bundle also goes beside the store's entry (the Pyxis importer reads it there), unless the
    # signature is inside the file: that signed file is written anew, and the entry is not it. Written
    # through descriptors from / (no link followed): a publisher may have swapped the entry's
    # directory for a link while the inventories were read.
    if store_entry and not signed_inside(fmt):
        beside_entry = Path(store_entry).parent / bundle.ENTRY_NAME
        try:
            nofollow.write_file(beside_entry, bundle.dumps(envelopes), 0o444)
            files.append(str(beside_entry))
        except OSError as exc:   # not a publisher of that store: the file beside the output still travels
            if log:
                log(f"note: not adding the signatures beside the store entry ({exc.strerror})")
        except nofollow.NotADirectory as exc:
            if log:
                log(f"warning: not adding the signatures beside the store entry: {exc.message}")
    return Signed(str(path), str(side), subjects, key.key.keyid, files)


def export_signer(key_path: str, log: Log | None = None) -> Callable[[ExportResult, Source], Signed]:
    """What ``imagekit export --sign KEY`` does after its export (the CLI loads this module by name, so an
    unsigned export loads neither the key's cryptography nor the SBOM's code). The key is read now, so a
    bad key or password fails before the export; the function returned describes the exported image and
    signs the file (:func:`sign_export`)."""
    key = keys.load_private(key_path)

    def sign(exported: ExportResult, source: Source) -> Signed:
        return sign_export(exported, key, describe(source, log=log), log=log)

    return sign


def file_record(path: Path) -> tuple[ImageRecord, Inventory, str]:
    """(record, inventory, format) of a ``.sqsh`` or ``.sif`` alone: labels and platform from the file."""
    with open(path, "rb") as fh:
        magic = fh.read(64)
    if magic[32:41] != b"SIF_MAGIC" and magic[:4] != b"hsqs":
        raise UsageError(f"{path} is neither a SIF nor a squashfs file", "give a .sqsh or .sif file")
    labels = reader.read(str(path)).labels or {}
    if magic[32:41] == b"SIF_MAGIC":
        info = read_sif(path)
        part = info.primary_partition()
        found = scan_squashfs(path, part.offset, part.size)
        return ImageRecord(path.name, "", f"linux/{ARCH_NAMES.get(info.arch, info.arch)}", "", labels), found, "sif"
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(labels.get("io.imagekit.arch", ""), "")
    return ImageRecord(path.name, "", f"linux/{arch}" if arch else "", "", labels), scan_squashfs(path), "enroot"


def sign_file(path: Path, key: SigningKey, log: Log | None = None) -> Signed:
    """Sign a ``.sqsh`` or ``.sif`` that is at hand with no image: its labels and packages are read
    from it; its only subject is itself (the image it came from is not known)."""
    record, found, fmt = file_record(path)
    if log:
        log(f"read {len(found.packages)} packages from {path}")
    described = Described(record, sbom.to_json(sbom.build(record, found)), provenance.predicate(record), found)
    inside = signed_inside(fmt)
    if inside:
        sign_sif(path, key, described)
    subjects = [file_subject(path, fmt, record.platform)]
    side = bundle.write(bundle.beside(path), sign_statements(described, subjects, key))
    return Signed(str(path), str(side), subjects, key.key.keyid, [str(path)] if inside else [])


# --- pushed images ---------------------------------------------------------------------------------


def _listed_files(entries: list[dict], config_digest: str, platform: str) -> list[Subject]:
    """The .sqsh/.sif artifacts listed for the image (their recorded sha256), as subjects."""
    out = []
    for fmt in formats.with_artifacts():
        for entry in artifacts.matching(entries, fmt):
            notes = entry.get("annotations") or {}
            sha = notes.get(artifacts.A_SHA256, "")
            if notes.get(artifacts.A_CONFIG) == config_digest and sha.startswith("sha256:"):
                out.append(Subject(fmt, hex_of(sha), f"image{artifacts.kind(fmt).suffix}", platform,
                                   notes.get(artifacts.A_PRESET, "")))
    return out


def push_statements(at: artifacts.RegistrySubject, described: Described, files: list[Subject], key: SigningKey,
                    log: Log | None = None) -> Signed:
    """Sign the statements (subjects: manifest, config, ``files``) and list them as referrers of ``at.subject``."""
    client, repo, subject = at.client, at.repo, at.subject
    subjects = described.subjects(files)
    envelopes = sign_statements(described, subjects, key)
    digests = [attestation_push.push(at, env, ptype, key.key.keyid, log)
               for env, ptype in zip(envelopes, (SLSA_PROVENANCE, CYCLONEDX_PREDICATE))]
    return Signed(f"{client.registry}/{repo}@{subject.digest}", ", ".join(digests), subjects, key.key.keyid)


def sign_reference(target: str, key: SigningKey, log: Log | None = None) -> Signed:
    """Sign a pushed image: SBOM and provenance of this platform's manifest (its layers read from the
    local engine when it has the image, else from the registry), with the exports listed beside it."""
    ref = registry.parse(target)
    client = reg.RegistryClient.for_reference(ref)
    subject = client.resolve(ref)
    source: Source
    if engine.available() and engine.image_exists(subject.config_digest):
        source = open_source(subject.config_digest)
    else:
        source = open_source(f"docker://{subject.reference.docker}")
    described = describe(source, name=f"{ref.registry}/{ref.repository}", manifest_digest=subject.digest, log=log)
    if hex_of(described.record.config_digest) != hex_of(subject.config_digest):
        raise ImagekitError(f"{target}: read image {described.record.config_digest}, but the manifest names "
                            f"{subject.config_digest}")
    entries, _ = client.referrers(ref.repository, subject.digest)
    files = _listed_files(entries, subject.config_digest, described.record.platform)
    return push_statements(artifacts.RegistrySubject(client, ref.repository, subject), described, files, key, log)


def push_signed(image: str, to: str | None, plan: artifacts.ArtifactPlan, key: SigningKey
                ) -> tuple[object, list, Signed]:
    """``imagekit push --with … --sign KEY``: the image, its exports as ``plan`` says (a SIF signed
    inside), then the signed statements naming the manifest, the config and every export, as referrers."""
    log = plan.log
    state: dict[str, Described] = {}

    def described_for(subject: reg.Resolved) -> Described:
        if "d" not in state:
            state["d"] = describe(open_source(image), name=subject.reference.docker.split("@")[0],
                                  manifest_digest=subject.digest, log=log)
        return state["d"]

    def prepare(fmt: str, path: Path, subject: reg.Resolved) -> None:
        if signed_inside(fmt):
            sign_sif(path, key, described_for(subject))

    signing_plan = dataclasses.replace(plan, prepare=prepare, signer=key.key.keyid)
    pushed, results = artifacts.push_with_artifacts(image, to, signing_plan)
    ref = registry.parse(pushed.reference)
    client = reg.RegistryClient.for_reference(ref)
    subject = client.resolve(ref.with_digest(pushed.digest))
    described = described_for(subject)
    files = [Subject(a.format, hex_of(a.file_sha256), f"image{artifacts.kind(a.format).suffix}",
                     described.record.platform, a.preset) for a in results if a.file_sha256]
    at = artifacts.RegistrySubject(client, ref.repository, subject)
    return pushed, results, push_statements(at, described, files, key, log)
