"""``imagekit verify``: check a ``.sif``, a ``.sqsh``, an engine image or a registry reference.

Keys come from ``--key PUB`` (any of them may have signed) or from the site policy (the rule that
matches the target's name: ``REGISTRY/REPOSITORY`` for a reference, ``dockerd://IMAGE`` for an engine
image, ``file:/ABSOLUTE/PATH`` for a file). What is checked:

- ``.sif``: its signature object, as ``apptainer verify --key`` checks it (every object of the group,
  the root file system included); the provenance inside it; and when ``FILE.intoto.jsonl`` is beside
  it, that a signed statement names the file's sha256;
- ``.sqsh``: ``FILE.intoto.jsonl`` beside it: a signed statement names the file's sha256;
- an engine image: the statements ``imagekit sign``/``build --sign`` kept for its config digest;
- a reference: the statements pushed as referrers of its manifest (this platform's) name that manifest.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from imagekit import registry
from imagekit.engines import docker as engine
from imagekit.attest import CYCLONEDX_PREDICATE, SLSA_PROVENANCE, bundle, dsse, policy, verifier
from imagekit.attest.verifier import Trust, TrustedKey
from imagekit.attest.keys import load_public
from imagekit.attest.statement import Subject, hex_of
from imagekit.util.errors import UsageError, VerificationError
from imagekit.export import attestations, signing, sif_sign
from imagekit.export.output import sha256_file
from imagekit.image_facts import is_file_image
from imagekit.registry import client as reg
from imagekit.util import untrusted_json


@dataclass
class Verdict:
    target: str
    kind: str                      # sif | enroot | image | reference
    signers: list[str]
    subjects: list[Subject] = field(default_factory=list)
    platform: str = ""
    digest: str = ""               # what was checked: the file's sha256, the manifest or config digest
    sbom: dict | None = None
    provenance: dict | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"target": self.target, "kind": self.kind, "verified": True, "signers": self.signers,
                "digest": self.digest, "platform": self.platform, "notes": self.notes,
                "subjects": [s.descriptor() for s in self.subjects]}


def keys_trust(paths: list[str | os.PathLike]) -> Trust:
    keys = [load_public(p) for p in paths]
    return Trust([TrustedKey(k.keyid, k) for k in keys])


def policy_name(target: str) -> str:
    """The name a policy rule matches for ``target``."""
    if is_file_image(target) or Path(target).is_file():
        return f"file:{Path(target).resolve()}"
    if target.startswith(("docker://",)) or "#" in target:
        ref = registry.parse(target)
        return f"{ref.registry}/{ref.repository}"
    return f"dockerd://{target}"


def trust_for(target: str, keys: list[str], policy_file: str | None) -> Trust | None:
    """The keys to check ``target`` with; None when the policy accepts it unsigned."""
    if keys:
        return keys_trust(keys)
    path = policy_file or os.environ.get(policy.ENV)
    if not path:
        raise UsageError("no key to verify with", "give --key PUB, or --policy FILE (or set IMAGEKIT_POLICY)")
    rule = policy.load(path).rule_for(policy_name(target))
    return rule.trust


def _sections(signed: list[verifier.Signed]) -> tuple[dict | None, dict | None]:
    bom = next((s.statement.predicate for s in verifier.of_type(signed, CYCLONEDX_PREDICATE)), None)
    prov = next((s.statement.predicate for s in verifier.of_type(signed, SLSA_PROVENANCE)), None)
    return bom, prov


def verify_sif(path: Path, trust: Trust) -> Verdict:
    sif = sif_sign.verify(path, trust)
    verdict = Verdict(str(path), "sif", sif.signers, digest="sha256:" + sha256_file(path))
    verdict.notes.append(f"SIF signature holds over {sif.objects} objects (what apptainer verify checks)")
    if sif.sbom:
        verdict.sbom = json.loads(sif.sbom)
    if sif.provenance:
        inner = verifier.verify([dsse.parse(sif.provenance, f"{path}: provenance object")], trust, str(path))
        verdict.provenance = inner[0].statement.predicate
        verdict.subjects = inner[0].statement.subjects
    side = bundle.beside(path)
    if os.path.lexists(side):
        signed = verifier.verify(bundle.read(side, verdict.notes.append), trust, str(side))
        hit = verifier.require(signed, "sif", verdict.digest, str(path))
        verdict.subjects = hit.statement.subjects
        verdict.platform = next((s.platform for s in hit.statement.subjects if s.kind == "sif"), "")
        bom, prov = _sections(signed)
        verdict.provenance = prov or verdict.provenance
        verdict.sbom = verdict.sbom or bom
        verdict.notes.append(f"{side.name}: a signed statement names this file")
    return verdict


def verify_sqsh(path: Path, trust: Trust) -> Verdict:
    side = bundle.beside(path)
    digest = "sha256:" + sha256_file(path)
    skipped: list[str] = []
    envelopes = bundle.read(side, skipped.append)
    if not envelopes:
        raise VerificationError(f"{path} ({digest}): no signed statement beside it ({side.name} is missing): "
                                "unsigned image", f"sign it: imagekit sign {path} --key KEY")
    signed = verifier.verify(envelopes, trust, str(path))
    hit = verifier.require(signed, "enroot", digest, str(path))
    bom, prov = _sections(signed)
    plat = next((s.platform for s in hit.statement.subjects if s.kind == "enroot"), "")
    return Verdict(str(path), "enroot", verifier.signers(signed), hit.statement.subjects, plat, digest, bom, prov,
                   notes=skipped)


def verify_engine_image(image: str, trust: Trust) -> Verdict:
    image_id = engine.image_id(image)
    path = signing.image_bundle_path(image_id)
    envelopes = bundle.read(path)
    if not envelopes:
        raise VerificationError(f"{image} ({image_id}): no signed statement kept for it (unsigned image)",
                                f"sign it: imagekit sign {image} --key KEY (kept in {path.parent})")
    signed = verifier.verify(envelopes, trust, image)
    hit = verifier.require(signed, "oci-config", image_id, image)
    bom, prov = _sections(signed)
    plat = next((s.platform for s in hit.statement.subjects if s.kind == "oci-config"), "")
    return Verdict(image, "image", verifier.signers(signed), hit.statement.subjects, plat, image_id, bom, prov)


def platform_of_config(client: reg.RegistryClient, repo: str, config_digest: str) -> str:
    buf = io.BytesIO()
    client.download_blob(repo, config_digest, buf, size=None)
    doc = untrusted_json.loads(buf.getvalue())
    return signing.platform_of({"Os": doc.get("os"), "Architecture": doc.get("architecture"),
                                "Variant": doc.get("variant")})


def verify_reference(target: str, trust: Trust, platform: str | None = None) -> Verdict:
    ref = registry.parse(target)
    client = reg.RegistryClient.for_reference(ref)
    want = None
    if platform:
        os_, _, rest = platform.partition("/")
        arch, _, variant = rest.partition("/")
        want = {"os": os_, "architecture": arch, **({"variant": variant} if variant else {})}
    resolved = client.resolve(ref, want)
    plat = platform_of_config(client, ref.repository, resolved.config_digest)
    fetched = attestations.fetch(client, ref.repository, resolved, trust=trust)
    what = f"{ref.registry}/{ref.repository}@{resolved.digest}"
    if fetched.others and not fetched.envelopes:
        raise VerificationError(f"{what} ({plat}): {fetched.why_none()}", f"accepted signers: {trust.describe()}")
    if not fetched.envelopes:
        raise VerificationError(f"{what} ({plat}): no signed statement is listed for this manifest (unsigned image)",
                                "sign it: imagekit push IMAGE --to REF --sign KEY, or imagekit sign docker://REF")
    signed = verifier.verify(fetched.envelopes, trust, what)
    hit = verifier.require(signed, "oci-manifest", resolved.digest, what, platform=plat)
    bom, prov = _sections(signed)
    verdict = Verdict(target, "reference", verifier.signers(signed), hit.statement.subjects, plat, resolved.digest,
                      bom, prov)
    config_named = [s for s in hit.statement.subjects if s.kind == "oci-config"]
    if config_named and config_named[0].sha256 != hex_of(resolved.config_digest):
        raise VerificationError(f"{what}: the signed statement names config {config_named[0].digest}, but the "
                                f"manifest's config is {resolved.config_digest}")
    return verdict


def verify(target: str, *, keys: list[str] = (), policy_file: str | None = None,
           platform: str | None = None) -> Verdict:
    """Verify ``target`` (a file, an engine image or a reference); VerificationError says why not."""
    trust = trust_for(target, list(keys), policy_file)
    path = Path(target)
    if trust is None:
        return Verdict(target, "unsigned", [], notes=["the policy accepts this target unsigned"])
    if path.is_file():
        with open(path, "rb") as fh:
            head = fh.read(64)
        if head[32:41] == b"SIF_MAGIC":
            return verify_sif(path, trust)
        if head[:4] == b"hsqs":
            return verify_sqsh(path, trust)
        raise UsageError(f"{path} is neither a SIF nor a squashfs file")
    if is_file_image(target):
        raise UsageError(f"{target}: no such file")
    if target.startswith("docker://") or "#" in target:
        return verify_reference(target, trust, platform)
    return verify_engine_image(target, trust)
