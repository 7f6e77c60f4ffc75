"""DSSE envelopes (Dead Simple Signing Envelope, secure-systems-lab/dsse v1.0).

An envelope is ``{"payloadType", "payload" (base64), "signatures": [{"keyid", "sig"}]}``; each
signature is over PAE(type, payload) = ``"DSSEv1" SP len(type) SP type SP len(payload) SP payload``.
ECDSA P-256 signs PAE with SHA-256 (DER signature), Ed25519 signs PAE itself: what sigstore's
signers produce, so Apptainer verifies imagekit's SIF signatures and imagekit verifies Apptainer's.

Signing goes through securesystemslib (:mod:`.signer`: its ``Envelope`` and ``CryptoSigner``), with
the key ID set to the key's OpenSSH fingerprint (:func:`imagekit.attest.keys.keyid`). Verification is
written here on ``cryptography`` alone, because it runs in the Pyxis importer before every job start
and securesystemslib's import costs more than the whole check; tests hold the two to each other.

Parsing is strict and bounded: an envelope larger than ``MAX_ENVELOPE`` or one that is not exactly
this shape (truncated JSON, bad base64, no signatures) is refused with what is wrong.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from imagekit.attest.keys import Key
from imagekit.util.errors import VerificationError
from imagekit.util import untrusted_json

MAX_ENVELOPE = 32 << 20          # an SBOM of a large CUDA image is a few MiB; refuse anything far larger
MAX_SIGNATURES = 16


class EnvelopeError(VerificationError):
    """An envelope that is not a well-formed DSSE envelope."""


def pae(payload_type: str, payload: bytes) -> bytes:
    t = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(t), t, len(payload), payload)


def encode(envelope: dict) -> bytes:
    return json.dumps(envelope, separators=(",", ":"), sort_keys=True).encode()


@dataclass
class Envelope:
    payload_type: str
    payload: bytes
    signatures: list[tuple[str, bytes]] = field(default_factory=list)   # (keyid, raw signature)
    raw: bytes = b""

    def signed_by(self, keys: list[Key]) -> list[Key]:
        """The keys among ``keys`` with a valid signature in this envelope (a signature with a key ID
        is tried only with that key; one without, with every key)."""
        message = pae(self.payload_type, self.payload)
        good: list[Key] = []
        for kid, sig in self.signatures:
            for key in keys:
                if key in good or (kid and kid != key.keyid):
                    continue
                if _valid(key, sig, message):
                    good.append(key)
                    break
        return good


def _valid(key: Key, sig: bytes, message: bytes) -> bool:
    try:
        if isinstance(key.public, ed25519.Ed25519PublicKey):
            key.public.verify(sig, message)
        else:
            key.public.verify(sig, message, ec.ECDSA(hashes.SHA256()))
        return True
    except (InvalidSignature, ValueError):
        return False


def _b64(text: object, what: str, where: str) -> bytes:
    if not isinstance(text, str):
        raise EnvelopeError(f"{where}: {what} is not a base64 string")
    # The spec allows either alphabet, padded or not; anything else is refused, never skipped over.
    std = text.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(std + "=" * (-len(std) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise EnvelopeError(f"{where}: {what} is not valid base64") from None


def parse(raw: bytes, where: str) -> Envelope:
    """The envelope in ``raw``; EnvelopeError naming ``where`` and what is wrong."""
    if len(raw) > MAX_ENVELOPE:
        raise EnvelopeError(f"{where}: the envelope is {len(raw)} bytes, more than the {MAX_ENVELOPE} imagekit reads",
                            "this is not an envelope imagekit wrote: sign the image again")
    try:
        doc = untrusted_json.loads(raw)
    except untrusted_json.TooDeep as exc:
        raise EnvelopeError(f"{where}: the envelope is not one imagekit reads: {exc}",
                            "this is not an envelope imagekit wrote: sign the image again") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise EnvelopeError(f"{where}: the envelope is not complete JSON ({exc}; truncated?)",
                            "fetch or copy it again; if it stays broken, sign the image again") from None
    if not isinstance(doc, dict):
        raise EnvelopeError(f"{where}: the envelope is not a JSON object")
    missing = [k for k in ("payloadType", "payload", "signatures") if k not in doc]
    if missing:
        raise EnvelopeError(f"{where}: the envelope has no {', '.join(missing)}")
    if not isinstance(doc["payloadType"], str):
        raise EnvelopeError(f"{where}: payloadType is not a string")
    sigs = doc["signatures"]
    if not isinstance(sigs, list) or not sigs:
        raise EnvelopeError(f"{where}: the envelope carries no signature", "sign it: imagekit sign")
    if len(sigs) > MAX_SIGNATURES:
        raise EnvelopeError(f"{where}: {len(sigs)} signatures, more than the {MAX_SIGNATURES} imagekit reads")
    signatures = []
    for i, s in enumerate(sigs):
        if not isinstance(s, dict):
            raise EnvelopeError(f"{where}: signature {i} is not an object")
        kid = s.get("keyid", "")
        if not isinstance(kid, str):
            raise EnvelopeError(f"{where}: signature {i}: keyid is not a string")
        signatures.append((kid, _b64(s.get("sig"), f"signature {i}", where)))
    return Envelope(doc["payloadType"], _b64(doc["payload"], "the payload", where), signatures, raw)
