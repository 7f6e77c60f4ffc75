"""Pushing signed statements as OCI referrers of an image's manifest (the layout is in
:mod:`imagekit.export.attestations`, which reads them back)."""

from __future__ import annotations

from typing import Callable

from imagekit.attest import CYCLONEDX_PREDICATE, DSSE_MEDIA_TYPE, SLSA_PROVENANCE, dsse
from imagekit.export import artifacts
from imagekit.export.attestations import A_PREDICATE, A_SIGNER
from imagekit.registry import client as reg


def manifest_for(envelope: dict, subject: reg.Resolved, predicate_type: str, signer: str) -> tuple[bytes, bytes]:
    """(the envelope's bytes, the artifact manifest) for one envelope."""
    body = dsse.encode(envelope)
    doc = {
        "schemaVersion": 2,
        "mediaType": reg.OCI_MANIFEST,
        "artifactType": DSSE_MEDIA_TYPE,
        "config": {"mediaType": reg.OCI_EMPTY, "digest": reg.sha256_digest(artifacts.EMPTY_CONFIG),
                   "size": len(artifacts.EMPTY_CONFIG), "data": "e30="},
        "layers": [{"mediaType": DSSE_MEDIA_TYPE, "digest": reg.sha256_digest(body), "size": len(body)}],
        "subject": subject.descriptor(),
        "annotations": {A_PREDICATE: predicate_type, A_SIGNER: signer, artifacts.A_CONFIG: subject.config_digest},
    }
    return body, artifacts.canonical(doc)


def push(at: artifacts.RegistrySubject, envelope: dict, predicate_type: str, signer: str,
         log: Callable[[str], None] | None = None) -> str:
    """Upload one envelope and its artifact manifest to ``at.repo``, list it as a referrer of
    ``at.subject``; its manifest digest."""
    client, repo, subject = at.client, at.repo, at.subject
    body, manifest = manifest_for(envelope, subject, predicate_type, signer)
    client.ensure_access(repo, push=True)
    client.upload_blob(repo, artifacts.EMPTY_CONFIG, reg.sha256_digest(artifacts.EMPTY_CONFIG),
                       len(artifacts.EMPTY_CONFIG))
    client.upload_blob(repo, body, reg.sha256_digest(body), len(body))
    digest = reg.sha256_digest(manifest)
    _, headers = client.put_manifest(repo, digest, manifest, reg.OCI_MANIFEST)
    if headers.get("OCI-Subject") != subject.digest:
        artifacts.add_to_referrers_tag(client, repo, subject.digest, artifacts.referrer_descriptor(digest, manifest))
    if log:
        kind = {SLSA_PROVENANCE: "provenance", CYCLONEDX_PREDICATE: "SBOM"}.get(predicate_type, predicate_type)
        log(f"pushed the signed {kind} statement {digest} (subject {subject.digest})")
    return digest
