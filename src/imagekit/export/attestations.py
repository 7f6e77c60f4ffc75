"""Signed statements as OCI 1.1 referrers of the image's manifest, beside the ``.sqsh``/``.sif`` artifacts.

One artifact per DSSE envelope:

| field | value |
|---|---|
| artifactType | ``application/vnd.dsse.envelope.v1+json`` |
| config | the OCI empty descriptor |
| layers | one: the envelope, ``application/vnd.dsse.envelope.v1+json`` |
| subject | the image's per-platform manifest (never an index) |
| annotations | ``in-toto.io/predicate-type`` (SLSA provenance v1 or CycloneDX), ``io.imagekit.attestation.signer`` (key ID), ``io.imagekit.image.config`` |

Pushed by :mod:`imagekit.export.attestation_push` and listed the way :mod:`imagekit.export.artifacts`
lists exports: through the referrers API when the registry indexes subjects, else in the
``sha256-<hex>`` referrers tag. Read back here (the Pyxis importer loads this module, not the pushing
one, whose export machinery it never needs). Reading them back is bounded:
at most ``MAX_ATTESTATIONS`` referrers are fetched, each at most :data:`imagekit.attest.dsse.MAX_ENVELOPE`.
"""

from __future__ import annotations

import io
from typing import Callable

from imagekit.attest import DSSE_MEDIA_TYPE, dsse
from imagekit.attest.dsse import Envelope, EnvelopeError
from imagekit.util.errors import IntegrityError, RegistryError
from imagekit.registry import client as reg

A_PREDICATE = "in-toto.io/predicate-type"
A_SIGNER = "io.imagekit.attestation.signer"
MAX_ATTESTATIONS = 32


def fetch(client: reg.RegistryClient, repo: str, subject: reg.Resolved,
          warn: Callable[[str], None] | None = None) -> list[Envelope]:
    """The DSSE envelopes listed as referrers of ``subject`` (a malformed one is skipped with a warning:
    the caller decides whether what is left is enough)."""
    entries, _ = client.referrers(repo, subject.digest)
    found = [e for e in entries if e.get("artifactType") == DSSE_MEDIA_TYPE][-MAX_ATTESTATIONS:]
    out = []
    for entry in found:
        digest = entry.get("digest")
        try:
            manifest = client.get_manifest(repo, str(digest), reg.OCI_MANIFEST).json()
            layers = [layer for layer in manifest.get("layers") or []
                      if isinstance(layer, dict) and layer.get("mediaType") == DSSE_MEDIA_TYPE]
            if (manifest.get("subject") or {}).get("digest") != subject.digest or len(layers) != 1:
                raise IntegrityError(f"referrer {digest} is not an envelope about {subject.digest}")
            size = layers[0].get("size")
            if not isinstance(size, int) or size > dsse.MAX_ENVELOPE:
                raise EnvelopeError(f"referrer {digest}: its envelope is {size} bytes, more than imagekit reads")
            buf = io.BytesIO()
            client.download_blob(repo, layers[0]["digest"], buf, size=size)
            out.append(dsse.parse(buf.getvalue(), f"{client.registry}/{repo}@{digest}"))
        except (IntegrityError, RegistryError, EnvelopeError, ValueError, AttributeError) as exc:
            if warn:
                warn(f"skipping the attestation {digest}: {getattr(exc, 'message', exc)}")
    return out
