"""in-toto v1 statements about one platform's image, and their subjects.

A statement's subjects bind the conversions to the image: the per-platform OCI manifest digest (when
the image was pushed), its config digest (the image ID, the same on every engine and registry), and
the sha256 of each ``.sqsh`` and ``.sif`` made from it. Never a multi-platform index: an SBOM and a
provenance describe exactly one root filesystem, so each platform's image gets its own statements.

Each subject is an in-toto ResourceDescriptor with imagekit's annotations::

    {"name": "registry:5000/hpc/mpi@sha256:…", "digest": {"sha256": "…"},
     "annotations": {"io.imagekit.kind": "oci-manifest", "io.imagekit.platform": "linux/amd64"}}

kinds: ``oci-manifest``, ``oci-config``, ``enroot`` (with ``io.imagekit.preset``), ``sif``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from imagekit.attest import STATEMENT_TYPE
from imagekit.util.errors import VerificationError
from imagekit.util import untrusted_json

KINDS = ("oci-manifest", "oci-config", "enroot", "sif")
A_KIND, A_PLATFORM, A_PRESET = "io.imagekit.kind", "io.imagekit.platform", "io.imagekit.preset"
MAX_SUBJECTS = 64
_HEX = re.compile(r"[0-9a-f]{64}")


class StatementError(VerificationError):
    """A payload that is not an in-toto v1 statement imagekit can use."""


def hex_of(digest: str) -> str:
    """``sha256:<hex>`` or ``<hex>`` → ``<hex>``."""
    return digest.split(":", 1)[1] if digest.startswith("sha256:") else digest


@dataclass(frozen=True)
class Subject:
    kind: str
    sha256: str                 # hex
    name: str
    platform: str = ""          # os/arch[/variant]
    preset: str = ""

    def descriptor(self) -> dict[str, Any]:
        notes = {A_KIND: self.kind}
        if self.platform:
            notes[A_PLATFORM] = self.platform
        if self.preset:
            notes[A_PRESET] = self.preset
        return {"name": self.name, "digest": {"sha256": self.sha256}, "annotations": notes}

    @property
    def digest(self) -> str:
        return f"sha256:{self.sha256}"


@dataclass
class Statement:
    subjects: list[Subject]
    predicate_type: str
    predicate: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> bytes:
        doc = {"_type": STATEMENT_TYPE, "subject": [s.descriptor() for s in self.subjects],
               "predicateType": self.predicate_type, "predicate": self.predicate}
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    def of_kind(self, kind: str) -> list[Subject]:
        return [s for s in self.subjects if s.kind == kind]

    def names(self, sha256: str) -> list[Subject]:
        """The subjects whose digest is ``sha256`` (hex or ``sha256:<hex>``)."""
        want = hex_of(sha256)
        return [s for s in self.subjects if s.sha256 == want]

    @property
    def platforms(self) -> set[str]:
        return {s.platform for s in self.subjects if s.platform}


def parse(payload: bytes, where: str) -> Statement:
    """The statement in a DSSE payload; StatementError naming ``where`` and what is wrong."""
    try:
        doc = untrusted_json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise StatementError(f"{where}: the signed payload is not JSON") from None
    if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE:
        raise StatementError(f"{where}: the signed payload is not an in-toto v1 statement "
                             f"(_type {doc.get('_type') if isinstance(doc, dict) else None!r})")
    raw = doc.get("subject")
    if not isinstance(raw, list) or not raw:
        raise StatementError(f"{where}: the statement names no subject")
    if len(raw) > MAX_SUBJECTS:
        raise StatementError(f"{where}: {len(raw)} subjects, more than the {MAX_SUBJECTS} imagekit reads")
    subjects = []
    for i, s in enumerate(raw):
        digest = s.get("digest") if isinstance(s, dict) else None
        sha = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(sha, str) or not _HEX.fullmatch(sha):
            raise StatementError(f"{where}: subject {i} has no sha256 digest")
        notes = s.get("annotations") if isinstance(s.get("annotations"), dict) else {}
        kind = notes.get(A_KIND, "")
        subjects.append(Subject(kind=kind if isinstance(kind, str) else "", sha256=sha,
                                name=str(s.get("name", "")), platform=str(notes.get(A_PLATFORM, "")),
                                preset=str(notes.get(A_PRESET, ""))))
    ptype = doc.get("predicateType")
    predicate = doc.get("predicate", {})
    if not isinstance(ptype, str) or not isinstance(predicate, dict):
        raise StatementError(f"{where}: the statement's predicateType or predicate is missing")
    return Statement(subjects, ptype, predicate)
