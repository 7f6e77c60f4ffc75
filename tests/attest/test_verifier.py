"""Verifying statements: who signed, whether that key still counts, and what the statement is about."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from imagekit.attest import PAYLOAD_TYPE, SLSA_PROVENANCE, dsse, keys, signer, verifier
from imagekit.attest.verifier import Trust, TrustedKey
from imagekit.attest.statement import Statement, Subject
from imagekit.util.errors import VerificationError

AMD = "a" * 64
ARM = "b" * 64
CONFIG = "c" * 64


@pytest.fixture
def ci(tmp_path):
    path, _ = keys.write_pair(keys.generate(), tmp_path / "ci")
    return keys.load_private(path)


def envelope(key, subjects, payload_type=PAYLOAD_TYPE):
    st = Statement(subjects, SLSA_PROVENANCE, {"x": 1})
    return dsse.parse(dsse.encode(signer.sign(st.payload(), payload_type, key)), "test")


def amd64(extra=()):
    return [Subject("oci-manifest", AMD, "reg/x@sha256:a", "linux/amd64"),
            Subject("oci-config", CONFIG, "sha256:c", "linux/amd64"), *extra]


def test_a_signed_statement_names_its_subjects(ci):
    signed = verifier.verify([envelope(ci, amd64())], Trust([TrustedKey("ci", ci.key)]), "img")
    assert verifier.require(signed, "oci-manifest", "sha256:" + AMD, "img", platform="linux/amd64")
    assert verifier.signers(signed) == [f"ci ({ci.key.keyid})"]


def test_unsigned_wrong_signer_revoked_and_expired_each_say_so(ci, tmp_path):
    other_path, _ = keys.write_pair(keys.generate("ed25519"), tmp_path / "other")
    other = keys.load_private(other_path)
    trust = Trust([TrustedKey("ci", ci.key)])
    with pytest.raises(VerificationError, match="no signed statement \\(unsigned image\\)"):
        verifier.verify([], trust, "img")
    with pytest.raises(VerificationError, match=re.escape(f"signed by {other.key.keyid}, not by a key the site accepts")):
        verifier.verify([envelope(other, amd64())], trust, "img")
    with pytest.raises(VerificationError, match="which is revoked"):
        verifier.verify([envelope(ci, amd64())], Trust([TrustedKey("ci", ci.key)], {ci.key.keyid}), "img")
    with pytest.raises(VerificationError, match="which is revoked"):
        verifier.verify([envelope(ci, amd64())], Trust([TrustedKey("ci", ci.key)], {"ci"}), "img")
    expired = Trust([TrustedKey("ci", ci.key, dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc))])
    with pytest.raises(VerificationError, match="expired on 2020-01-01"):
        verifier.verify([envelope(ci, amd64())], expired, "img")
    with pytest.raises(VerificationError, match="not an in-toto statement"):
        verifier.verify([envelope(ci, amd64(), "text/plain")], trust, "img")


def test_a_statement_about_another_platform_or_digest_is_refused(ci):
    arm = [Subject("oci-manifest", ARM, "reg/x@sha256:b", "linux/arm64")]
    signed = verifier.verify([envelope(ci, arm)], Trust([TrustedKey("ci", ci.key)]), "img")
    with pytest.raises(VerificationError, match="no signed statement names this oci-manifest") as err:
        verifier.require(signed, "oci-manifest", AMD, "img", platform="linux/amd64")
    assert "linux/arm64" in str(err.value)
    mislabelled = [Subject("oci-manifest", AMD, "reg/x@sha256:a", "linux/arm64")]
    signed = verifier.verify([envelope(ci, mislabelled)], Trust([TrustedKey("ci", ci.key)]), "img")
    with pytest.raises(VerificationError, match="is for linux/arm64, not linux/amd64"):
        verifier.require(signed, "oci-manifest", AMD, "img", platform="linux/amd64")
