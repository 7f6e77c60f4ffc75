"""Site keys: the two types imagekit signs with, their key IDs, and every other key refused by name."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from helpers.needs import need
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from imagekit.attest import keys
from imagekit.util.errors import UsageError


@pytest.mark.parametrize("kind", keys.KINDS)
def test_keygen_writes_a_private_key_only_its_owner_reads_and_a_public_key(kind, tmp_path):
    key_path, pub_path = keys.write_pair(keys.generate(kind), tmp_path / "site")
    assert oct(key_path.stat().st_mode & 0o777) == "0o600"
    signing = keys.load_private(key_path)
    public = keys.load_public(pub_path)
    assert signing.key.keyid == public.keyid and public.kind == kind
    assert keys.load_public(key_path).keyid == public.keyid      # a private key file gives its public half
    assert "PRIVATE" not in repr(signing) and public.keyid in repr(signing)


def test_key_id_is_the_openssh_fingerprint(tmp_path):
    """The ID apptainer's verifier expects in a DSSE envelope, and what `ssh-keygen -lf` prints."""
    need(None if shutil.which("ssh-keygen") else "ssh-keygen is not installed (openssh-client)")
    private = keys.generate("ecdsa-p256")
    line = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    (tmp_path / "k.pub").write_bytes(line + b"\n")
    shown = subprocess.run(["ssh-keygen", "-lf", str(tmp_path / "k.pub")], capture_output=True, text=True).stdout
    assert shown.split()[1] == keys.keyid(private.public_key())
    assert keys.load_public(tmp_path / "k.pub").keyid == keys.keyid(private.public_key())   # OpenSSH .pub reads too


@pytest.mark.parametrize("make,said", [
    (lambda: rsa.generate_private_key(65537, 2048), r"unknown key type RSA \(2048 bits\)"),
    (lambda: ec.generate_private_key(ec.SECP384R1()), "curve secp384r1"),
])
def test_other_key_types_are_refused_by_name(make, said, tmp_path):
    private = make()
    path = tmp_path / "other.key"
    path.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    path.chmod(0o600)
    with pytest.raises(UsageError, match=said) as err:
        keys.load_private(path)
    assert "ECDSA P-256 or Ed25519" in str(err.value)
    pub = tmp_path / "other.pub"
    pub.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(UsageError, match=said):
        keys.load_public(pub)


def test_a_private_key_others_can_read_is_refused(tmp_path):
    key_path, _ = keys.write_pair(keys.generate(), tmp_path / "site")
    key_path.chmod(0o644)
    with pytest.raises(UsageError, match="readable by other users.*0644"):
        keys.load_private(key_path)


def test_encrypted_key_needs_its_passphrase_and_errors_never_show_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv(keys.PASSWORD_ENV, "correct horse")
    key_path, _ = keys.write_pair(keys.generate(), tmp_path / "site")
    assert b"ENCRYPTED" in key_path.read_bytes()
    assert keys.load_private(key_path).key.kind == "ecdsa-p256"
    monkeypatch.setenv(keys.PASSWORD_ENV, "wrong")
    with pytest.raises(UsageError, match="wrong passphrase") as err:
        keys.load_private(key_path)
    body = key_path.read_text().splitlines()[1]
    assert body not in str(err.value)
    monkeypatch.delenv(keys.PASSWORD_ENV)
    with pytest.raises(UsageError, match="encrypted"):
        keys.load_private(key_path)


def test_garbage_and_missing_key_files(tmp_path):
    bad = tmp_path / "bad.pub"
    bad.write_text("not a key\n")
    with pytest.raises(UsageError, match="not a public key"):
        keys.load_public(bad)
    with pytest.raises(UsageError, match="no such public key"):
        keys.load_public(tmp_path / "missing.pub")
    assert os.path.exists(bad)


def test_h14_a_public_key_others_can_change_is_not_trusted(tmp_path):
    """What `imagekit verify --key` and the policy's keys trust: refused when anyone else could have
    swapped it (the file, or its directory, open to others), naming the file and the fix."""
    keys.write_pair(keys.generate(), tmp_path / "ci")
    keys.load_public(tmp_path / "ci.pub")
    for opened, said in ((tmp_path / "ci.pub", "is writable by everyone"), (tmp_path, "is writable by everyone")):
        opened.chmod(0o777 if opened.is_dir() else 0o666)
        with pytest.raises(UsageError, match=f"(?s)public key {tmp_path / 'ci.pub'}.* {said} .*chmod go-w"):
            keys.load_public(tmp_path / "ci.pub")
        opened.chmod(0o700 if opened.is_dir() else 0o644)
