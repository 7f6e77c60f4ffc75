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
one, whose export machinery it never needs).

Anyone who can push to the repository can list referrers, so which ones are read is decided before
anything is downloaded, never by where they sit in the list (H5 of ../shared/reviews/security-4.md:
32 referrers signed by the pusher's own key used to push the genuine statements out of a window of the
last 32). The list is read whole (the client bounds its pages); with the keys the check accepts, only
referrers whose signer annotation names one of them, usable now, and whose predicate type imagekit
checks are read, provenance first (a few KiB, and a job start needs one statement); the rest are
skipped unread. What is read is bounded: ``MAX_ATTESTATIONS`` envelopes and ``MAX_FETCH_BYTES`` in all,
each at most :data:`imagekit.attest.dsse.MAX_ENVELOPE`.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Callable

from imagekit.attest import CYCLONEDX_PREDICATE, DSSE_MEDIA_TYPE, SLSA_PROVENANCE, dsse
from imagekit.attest.dsse import Envelope, EnvelopeError
from imagekit.attest.verifier import Trust
from imagekit.util.errors import IntegrityError, RegistryError
from imagekit.registry import client as reg

A_PREDICATE = "in-toto.io/predicate-type"
A_SIGNER = "io.imagekit.attestation.signer"
MAX_ATTESTATIONS = 32              # envelopes read per check: each signer's provenance and SBOM, many times over
MAX_FETCH_BYTES = 2 * dsse.MAX_ENVELOPE   # and bytes: a provenance (KiBs) and an SBOM (MiBs), with room
_CHECKED = (SLSA_PROVENANCE, CYCLONEDX_PREDICATE)   # provenance first


@dataclass
class Fetched:
    """What a check read: the envelopes, and the signers (by annotation) of those it skipped unread."""

    envelopes: list[Envelope] = field(default_factory=list)
    others: list[str] = field(default_factory=list)

    def why_none(self) -> str:
        """Why no envelope was read, for the refusal."""
        if self.others:
            return (f"no statement signed by an accepted key: {len(self.others)} listed, signed by "
                    f"{', '.join(sorted(set(self.others)))}, not by a key the site accepts (by their "
                    "annotations: none was read)")
        return "unsigned: no signed statement is listed for it"


def candidates(entries: list[dict], trust: Trust | None) -> tuple[list[dict], list[str]]:
    """(the DSSE referrers worth reading, in the order to read them; the signer annotations of those
    skipped). With ``trust``: those whose signer annotation names one of its keys and whose predicate
    type imagekit checks: first the keys usable now, provenance first, in the order listed; then those
    of its revoked or expired keys (read only to say why, never before a usable key's)."""
    found = [e for e in entries if e.get("artifactType") == DSSE_MEDIA_TYPE]
    if trust is None:
        return found, []
    by_state = [{k.key.keyid for k in trust.keys if (trust.unusable(k) is None) == now} for now in (True, False)]
    notes = [e.get("annotations") if isinstance(e.get("annotations"), dict) else {} for e in found]
    chosen = [e for keyids in by_state for ptype in _CHECKED for e, n in zip(found, notes)
              if n.get(A_PREDICATE) == ptype and n.get(A_SIGNER) in keyids]
    others = [str(n.get(A_SIGNER) or "no signer") for e, n in zip(found, notes) if e not in chosen]
    return chosen, others


def fetch(client: reg.RegistryClient, repo: str, subject: reg.Resolved,
          warn: Callable[[str], None] | None = None, trust: Trust | None = None) -> Fetched:
    """The DSSE envelopes listed as referrers of ``subject`` (:func:`candidates`: with ``trust``, only
    those its keys signed, by their annotation), within ``MAX_ATTESTATIONS`` and ``MAX_FETCH_BYTES``; a
    malformed one is skipped with a warning (the caller decides whether what is left is enough)."""
    entries, _ = client.referrers(repo, subject.digest)
    found, others = candidates(entries, trust)
    if warn and others and found:
        warn(f"skipping {len(others)} listed statements unread: not signed (their annotation says) by a key "
             f"the site accepts ({', '.join(sorted(set(others)))})")
    out: list[Envelope] = []
    spent = 0
    for n, entry in enumerate(found):
        digest = entry.get("digest")
        if n == MAX_ATTESTATIONS or spent >= MAX_FETCH_BYTES:
            if warn:
                warn(f"read {n} statements ({spent} bytes), the most one check reads; {len(found) - n} more "
                     f"listed for {subject.digest} were not read")
            break
        try:
            manifest = client.get_manifest(repo, str(digest), reg.OCI_MANIFEST).json()
            layers = [layer for layer in manifest.get("layers") or []
                      if isinstance(layer, dict) and layer.get("mediaType") == DSSE_MEDIA_TYPE]
            if (manifest.get("subject") or {}).get("digest") != subject.digest or len(layers) != 1:
                raise IntegrityError(f"referrer {digest} is not an envelope about {subject.digest}")
            size = layers[0].get("size")
            if not isinstance(size, int) or size > dsse.MAX_ENVELOPE or spent + size > MAX_FETCH_BYTES:
                raise EnvelopeError(f"referrer {digest}: its envelope is {size} bytes, more than imagekit reads"
                                    + (" in one check" if isinstance(size, int) and size <= dsse.MAX_ENVELOPE else ""))
            spent += size
            buf = io.BytesIO()
            client.download_blob(repo, layers[0]["digest"], buf, size=size)
            out.append(dsse.parse(buf.getvalue(), f"{client.registry}/{repo}@{digest}"))
        except (IntegrityError, RegistryError, EnvelopeError, ValueError, AttributeError) as exc:
            if warn:
                warn(f"skipping the attestation {digest}: {getattr(exc, 'message', exc)}")
    return Fetched(out, others)
