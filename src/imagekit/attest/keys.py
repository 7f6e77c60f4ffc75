"""Site keys: ECDSA P-256 or Ed25519, read from PEM or OpenSSH files, named by their key ID.

A key ID is the OpenSSH SHA256 fingerprint of the public key (``SHA256:<base64>``), the ID that
sigstore's DSSE adapter (and so ``apptainer verify --key``) expects in an envelope's ``keyid``:
one ID for a key in imagekit's envelopes, in a SIF signature, in a policy's revocation list and in
``ssh-keygen -lf KEY.pub``.

Private keys are read here and handed to the signer, never printed, logged or written anywhere but
where ``generate`` is told to; an encrypted key's passphrase comes from ``IMAGEKIT_KEY_PASSWORD``.
Any other key type (RSA, another curve, DSA) is refused by name.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from imagekit.util import atomic, trusted_files
from imagekit.util.errors import UsageError

PASSWORD_ENV = "IMAGEKIT_KEY_PASSWORD"
KINDS = ("ecdsa-p256", "ed25519")
MAX_KEY_FILE = 64 << 10

PublicKey = Union[ec.EllipticCurvePublicKey, ed25519.Ed25519PublicKey]
PrivateKey = Union[ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey]

_HINT = ("imagekit signs with ECDSA P-256 or Ed25519 keys: make one with `imagekit keygen NAME` "
         "(or `openssl genpkey -algorithm ed25519`, `ssh-keygen -t ed25519`)")


@dataclass(frozen=True)
class Key:
    """A public key with its ID and where it came from."""

    public: PublicKey
    keyid: str
    kind: str
    source: str = ""
    # of the file it was read from (hex): what a record of a policy verdict names (pyxis_verdicts)
    sha256: str = field(default="", compare=False)

    def pem(self) -> bytes:
        return self.public.public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)


def kind_of(key: object, where: str) -> str:
    """``ecdsa-p256`` or ``ed25519``; UsageError naming any other key type."""
    if isinstance(key, (ed25519.Ed25519PublicKey, ed25519.Ed25519PrivateKey)):
        return "ed25519"
    if isinstance(key, (ec.EllipticCurvePublicKey, ec.EllipticCurvePrivateKey)):
        if isinstance(key.curve, ec.SECP256R1):
            return "ecdsa-p256"
        raise UsageError(f"{where}: an ECDSA key on curve {key.curve.name} is not a key type imagekit signs with",
                         _HINT)
    name = type(key).__name__.replace("_", "").replace("PublicKey", "").replace("PrivateKey", "")
    size = getattr(key, "key_size", None)
    raise UsageError(f"{where}: unknown key type {name or type(key).__name__}" + (f" ({size} bits)" if size else ""),
                     _HINT)


def keyid(public: PublicKey) -> str:
    """The OpenSSH SHA256 fingerprint of ``public``: ``SHA256:`` and unpadded base64."""
    line = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    blob = base64.b64decode(line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _read(path: Path, what: str) -> bytes:
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{path}: the {what} is not a regular file")
        if st.st_size > MAX_KEY_FILE:
            raise UsageError(f"{path}: {st.st_size} bytes is too large for a {what} (at most {MAX_KEY_FILE})")
        return path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such {what}") from None
    except PermissionError:
        raise UsageError(f"{path}: cannot read the {what} (permission denied)") from None


def load_public(path: str | os.PathLike) -> Key:
    """A public key from a PEM (``PUBLIC KEY``), an OpenSSH public key line, or a private key file
    (its public half). What it trusts: refused when someone other than root or this user can change it (H14)."""
    path = Path(path)
    trusted_files.check(path, "public key")
    data = _read(path, "public key")
    public: object
    try:
        if data.lstrip().startswith(b"-----BEGIN") and b"PRIVATE KEY" in data.split(b"\n", 1)[0]:
            public = _parse_private(data, path).public_key()
        elif data.lstrip().startswith(b"-----BEGIN"):
            public = serialization.load_pem_public_key(data)
        else:
            public = serialization.load_ssh_public_key(data.strip())
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise UsageError(f"{path}: not a public key imagekit can read ({_first_line(exc)})",
                         "give a PEM public key (`imagekit keygen` writes NAME.pub) or an OpenSSH .pub line") from None
    kind = kind_of(public, str(path))
    return Key(public, keyid(public), kind, str(path), hashlib.sha256(data).hexdigest())  # type: ignore[arg-type]


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _parse_private(data: bytes, path: Path) -> object:
    password = os.environ.get(PASSWORD_ENV)
    secret = password.encode() if password else None
    try:
        if b"OPENSSH PRIVATE KEY" in data:
            return serialization.load_ssh_private_key(data, secret)
        return serialization.load_pem_private_key(data, secret)
    except TypeError:
        # Encrypted without a passphrase, or a passphrase given for a plain key.
        if secret is None:
            raise UsageError(f"{path}: the private key is encrypted", f"set {PASSWORD_ENV} to its passphrase") from None
        raise UsageError(f"{path}: the private key is not encrypted, but {PASSWORD_ENV} is set",
                         f"unset {PASSWORD_ENV}") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        # Never echo the key's bytes: cryptography's messages do not, and neither does this one.
        text = _first_line(exc)
        # A wrong passphrase decrypts to garbage: cryptography says "bad decrypt" or an ASN.1 error.
        if secret is not None and (b"ENCRYPTED" in data or "password" in text.lower() or "decrypt" in text.lower()):
            raise UsageError(f"{path}: cannot decrypt the private key: wrong passphrase in {PASSWORD_ENV}") from None
        raise UsageError(f"{path}: not a private key imagekit can read ({text})", _HINT) from None


@dataclass(frozen=True)
class SigningKey:
    """A private key loaded for signing: its public half and ID; the private part is never shown."""

    private: PrivateKey
    key: Key

    def __repr__(self) -> str:   # never the private key, in a traceback or a log line
        return f"SigningKey({self.key.kind} {self.key.keyid})"


def load_private(path: str | os.PathLike) -> SigningKey:
    """The signing key at ``path`` (PEM PKCS#8 or SEC1, or OpenSSH), checked for its type. A key file
    that other users could read is refused, as ssh refuses it."""
    path = Path(path)
    data = _read(path, "private key")
    st = path.stat()
    if st.st_mode & 0o077 and not os.environ.get("IMAGEKIT_KEY_ANY_MODE"):
        raise UsageError(f"{path}: the private key is readable by other users (mode {stat.S_IMODE(st.st_mode):04o})",
                         f"chmod 600 {path}")
    private = _parse_private(data, path)
    kind = kind_of(private, str(path))
    public = private.public_key()  # type: ignore[union-attr]
    return SigningKey(private, Key(public, keyid(public), kind, str(path)))  # type: ignore[arg-type]


def generate(kind: str = "ecdsa-p256") -> PrivateKey:
    if kind == "ecdsa-p256":
        return ec.generate_private_key(ec.SECP256R1())
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    raise UsageError(f"unknown key type {kind!r}", f"use one of: {', '.join(KINDS)}")


def write_pair(private: PrivateKey, stem: str | os.PathLike, *, force: bool = False) -> tuple[Path, Path]:
    """``STEM.key`` (PKCS#8 PEM, mode 0600, unencrypted unless IMAGEKIT_KEY_PASSWORD is set) and
    ``STEM.pub`` (PEM); each written to a temporary name and renamed."""
    stem = Path(stem)
    key_path, pub_path = stem.with_name(stem.name + ".key"), stem.with_name(stem.name + ".pub")
    for p in (key_path, pub_path):
        if p.exists() and not force:
            raise UsageError(f"{p} exists", "pick another name, or pass --force to replace it")
    password = os.environ.get(PASSWORD_ENV)
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    public = private.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    with atomic.target(key_path, 0o600) as tmp:
        tmp.write_bytes(pem)
    with atomic.target(pub_path, 0o644) as tmp:
        tmp.write_bytes(public)
    return key_path, pub_path
