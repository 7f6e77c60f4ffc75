"""The SPDX 2.3 export of imagekit's CycloneDX SBOM (spdx-tools' model, validated as it is written).

One SPDX package per CycloneDX component (purls as PACKAGE-MANAGER external references, a tarball's
sha256 as a checksum, its URL as the download location), the image as the document's described
package, CONTAINS from the image to each.
"""

from __future__ import annotations

import datetime as dt
import io
import re
from typing import Any

from spdx_tools.spdx.model import (Actor, ActorType, Checksum, ChecksumAlgorithm, CreationInfo, Document,
                                   ExternalPackageRef, ExternalPackageRefCategory, Package, Relationship,
                                   RelationshipType, SpdxNoAssertion)
from spdx_tools.spdx.model.package import PackagePurpose
from spdx_tools.spdx.writer.json.json_writer import write_document_to_stream

from imagekit import __version__
from imagekit.util.errors import ImagekitError

_ID_SAFE = re.compile(r"[^A-Za-z0-9.-]")


def _spdx_id(ref: str, used: set[str]) -> str:
    base = "SPDXRef-" + (_ID_SAFE.sub("-", ref) or "component")
    out, n = base, 1
    while out in used:
        n += 1
        out = f"{base}-{n}"
    used.add(out)
    return out


def _package(comp: dict[str, Any], spdx_id: str) -> Package:
    url = next((r.get("url") for r in comp.get("externalReferences") or [] if r.get("type") == "distribution"), None)
    checksums = [Checksum(ChecksumAlgorithm.SHA256, h["content"]) for h in comp.get("hashes") or []
                 if h.get("alg") == "SHA-256"]
    refs = [ExternalPackageRef(ExternalPackageRefCategory.PACKAGE_MANAGER, "purl", comp["purl"])] \
        if comp.get("purl") else []
    purpose = {"container": PackagePurpose.CONTAINER, "operating-system": PackagePurpose.OPERATING_SYSTEM,
               "application": PackagePurpose.APPLICATION}.get(comp.get("type", ""), PackagePurpose.LIBRARY)
    return Package(spdx_id=spdx_id, name=comp.get("name") or "unnamed", version=comp.get("version"),
                   download_location=url or SpdxNoAssertion(), files_analyzed=False, checksums=checksums,
                   external_references=refs, primary_package_purpose=purpose)


def from_cyclonedx(doc: dict[str, Any]) -> bytes:
    """SPDX 2.3 JSON for the CycloneDX document ``doc``."""
    meta = doc.get("metadata") or {}
    image = meta.get("component") or {}
    when = dt.datetime.fromisoformat(meta["timestamp"].replace("Z", "+00:00")) if meta.get("timestamp") \
        else dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    serial = (doc.get("serialNumber") or "urn:uuid:unknown").rsplit(":", 1)[-1]
    info = CreationInfo(spdx_version="SPDX-2.3", spdx_id="SPDXRef-DOCUMENT", name=image.get("name") or "image",
                        document_namespace=f"https://imagekit.invalid/spdx/{serial}",
                        creators=[Actor(ActorType.TOOL, f"imagekit-{__version__}")], created=when)
    used: set[str] = {"SPDXRef-DOCUMENT"}
    root_id = _spdx_id("image", used)
    packages = [_package(image, root_id)]
    relationships = [Relationship("SPDXRef-DOCUMENT", RelationshipType.DESCRIBES, root_id)]
    for comp in doc.get("components") or []:
        pid = _spdx_id(comp.get("bom-ref") or comp.get("name", ""), used)
        packages.append(_package(comp, pid))
        relationships.append(Relationship(root_id, RelationshipType.CONTAINS, pid))
    document = Document(info, packages=packages, relationships=relationships)
    out = io.StringIO()
    try:
        write_document_to_stream(document, out, validate=True)
    except ValueError as exc:   # spdx-tools raises ValueError listing what does not validate
        raise ImagekitError(f"the SPDX export does not validate: {str(exc)[:500]}") from None
    return out.getvalue().encode()
