"""Signing a payload into a DSSE envelope with a site key (securesystemslib's Envelope and CryptoSigner).

Kept apart from :mod:`.dsse` (parsing and verifying) so that verifiers, the Pyxis importer above
all, never load securesystemslib. The key ID is the key's OpenSSH fingerprint, the ID Apptainer's
verifier expects.
"""

from __future__ import annotations

from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, SSlibKey

from imagekit.attest.keys import SigningKey


def sign(payload: bytes, payload_type: str, key: SigningKey) -> dict:
    """A DSSE envelope (as a dict) of ``payload``, signed by ``key``."""
    public = SSlibKey.from_crypto(key.key.public, keyid=key.key.keyid)
    envelope = Envelope(payload, payload_type, {})
    envelope.sign(CryptoSigner(key.private, public))
    return envelope.to_dict()
