"""The image's SBOM: CycloneDX 1.6 JSON (cyclonedx-python-lib), with an SPDX 2.3 export (spdx-tools).

Seeded from what imagekit knows rather than from a scan alone: the resolved stack's components, read
from the image's labels (name, version, source; for release tarballs built from source, the upstream
URL, the pinned sha256 and where the build installed it: ``io.imagekit.component.<name>.url``,
``.sha256``, ``.paths``), which dpkg and pip scanners cannot see, plus the image's dpkg and pip
inventories (:mod:`.inventory`) and its distribution.

purls: ``pkg:generic/openmpi@5.0.7?checksum=sha256:…&download_url=…`` for a release tarball,
``pkg:deb/debian/libucx0@1.13.1-1?arch=amd64&distro=debian-12``, ``pkg:pypi/mpi4py@4.0.1``.

The document is about one platform's image: ``metadata.component`` is the image (its config digest
as version, its platform as a property). Its serial number and timestamp derive from the image (config
digest, platform, creation time), so the same image gives the same SBOM every time.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from cyclonedx.model import ExternalReference, ExternalReferenceType, HashAlgorithm, HashType, Property, XsUri
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.component_evidence import ComponentEvidence, Occurrence
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from imagekit import __version__, image_facts
from imagekit.attest.inventory import Inventory, Package
from imagekit.util.errors import UsageError

FORMATS = ("cyclonedx", "spdx")
P = "imagekit:"                 # property names


@dataclass
class ImageRecord:
    """The image an SBOM or statement is about: one platform's."""

    name: str                    # the reference shown (tag, or registry/repo@digest)
    config_digest: str           # sha256:<hex>: the image ID
    platform: str                # os/arch[/variant]
    created: str = ""            # the config's "created" (RFC 3339)
    labels: dict[str, str] = field(default_factory=dict)
    manifest_digest: str = ""    # the per-platform manifest, once pushed

    @property
    def when(self) -> dt.datetime:
        # Docker writes nanoseconds ("2026-11-27T15:41:00.123456789Z"): the second is enough.
        try:
            return dt.datetime.strptime(self.created[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.timezone.utc)
        except ValueError:
            return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class StackComponent:
    name: str
    version: str
    source: str
    url: str = ""
    sha256: str = ""
    paths: tuple[str, ...] = ()
    facts: tuple[tuple[str, str], ...] = ()

    @property
    def purl(self) -> PackageURL:
        qualifiers = {}
        if self.url:
            qualifiers["download_url"] = self.url
        if self.sha256:
            qualifiers["checksum"] = f"sha256:{self.sha256}"
        return PackageURL(type="generic", name=self.name, version=self.version, qualifiers=qualifiers or None)


SBOM_FACTS = ("url", "sha256", "paths")


def stack_components(labels: dict[str, str]) -> list[StackComponent]:
    """The resolved stack's components, as the image's labels record them."""
    facts = image_facts.from_labels(labels)
    out = []
    for c in facts.components.values():
        extra = dict(c.facts)
        paths = tuple(p for p in extra.pop("paths", "").split(",") if p)
        out.append(StackComponent(c.name, c.version, c.source, extra.pop("url", ""), extra.pop("sha256", ""),
                                  paths, tuple(sorted(extra.items()))))
    return out


def _deb_purl(pkg: Package, distro: tuple[str, str]) -> PackageURL:
    namespace = distro[0] or "debian"
    qualifiers = {"arch": pkg.arch} if pkg.arch else {}
    if distro[0] and distro[1]:
        qualifiers["distro"] = f"{distro[0]}-{distro[1]}"
    return PackageURL(type="deb", namespace=namespace, name=pkg.name, version=pkg.version,
                      qualifiers=qualifiers or None)


def _pypi_purl(pkg: Package) -> PackageURL:
    return PackageURL(type="pypi", name=pkg.name.lower().replace("_", "-").replace(".", "-"), version=pkg.version)


def build(image: ImageRecord, inventory: Inventory) -> Bom:
    """The CycloneDX BOM of ``image`` (its labels and its inventory)."""
    bom = Bom(serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"imagekit:{image.config_digest}:{image.platform}"))
    subject = Component(type=ComponentType.CONTAINER, name=image.name, version=image.config_digest,
                        bom_ref="image", properties=_props({
                            "platform": image.platform, "config-digest": image.config_digest,
                            "manifest-digest": image.manifest_digest,
                            "stack": image.labels.get(image_facts.STACK, ""),
                            "recipe-sha256": image.labels.get(image_facts.RECIPE_SHA256, "")}))
    bom.metadata.component = subject
    bom.metadata.timestamp = image.when
    bom.metadata.tools.components.add(Component(type=ComponentType.APPLICATION, name="imagekit", version=__version__))
    parts: list[Component] = []
    distro = inventory.distro
    if distro[0]:
        parts.append(Component(type=ComponentType.OPERATING_SYSTEM, name=distro[0], version=distro[1] or None,
                               bom_ref=f"os:{distro[0]}@{distro[1]}",
                               description=inventory.os_release.get("PRETTY_NAME") or None))
    for c in stack_components(image.labels):
        refs = [ExternalReference(type=ExternalReferenceType.DISTRIBUTION, url=XsUri(c.url))] if c.url else []
        hashes = [HashType(alg=HashAlgorithm.SHA_256, content=c.sha256)] if c.sha256 else []
        evidence = (ComponentEvidence(occurrences=[Occurrence(location=p) for p in c.paths]) if c.paths else None)
        parts.append(Component(type=ComponentType.LIBRARY, name=c.name, version=c.version, bom_ref=f"stack:{c.name}",
                               purl=c.purl, hashes=hashes, external_references=refs, evidence=evidence,
                               properties=_props({"source": c.source, "stack-component": "true",
                                                  **{f"fact.{k}": v for k, v in c.facts}})))
    seen: set[str] = set()
    for pkg in inventory.packages:
        if pkg.ecosystem == "deb":
            ref = f"deb:{pkg.name}:{pkg.arch}"
            comp = Component(type=ComponentType.LIBRARY, name=pkg.name, version=pkg.version, bom_ref=ref,
                             purl=_deb_purl(pkg, distro),
                             properties=_props({"source-package": pkg.source, "ecosystem": "deb"}))
        else:
            ref = f"pypi:{pkg.name}@{pkg.version}@{pkg.location}"
            comp = Component(type=ComponentType.LIBRARY, name=pkg.name, version=pkg.version, bom_ref=ref,
                             purl=_pypi_purl(pkg), properties=_props({"location": pkg.location, "ecosystem": "pypi"}))
        if ref in seen:
            continue
        seen.add(ref)
        parts.append(comp)
    for comp in parts:
        bom.components.add(comp)
    bom.register_dependency(subject, parts)
    return bom


def _props(values: dict[str, str]) -> list[Property]:
    return [Property(name=P + k, value=v) for k, v in values.items() if v]


def to_json(bom: Bom) -> bytes:
    """CycloneDX 1.6 JSON, keys sorted: the same image gives the same bytes."""
    text = JsonV1Dot6(bom).output_as_string()
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")).encode()


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """What ``imagekit inspect`` shows of a CycloneDX document: counts by kind, the stack components."""
    comps = doc.get("components") or []
    props = [{p.get("name"): p.get("value") for p in (c.get("properties") or [])} for c in comps]
    stack = [f"{c.get('name')} {c.get('version')}" for c, p in zip(comps, props) if p.get(P + "stack-component")]
    return {"format": f"CycloneDX {doc.get('specVersion', '?')}", "components": len(comps),
            "deb": sum(1 for p in props if p.get(P + "ecosystem") == "deb"),
            "pypi": sum(1 for p in props if p.get(P + "ecosystem") == "pypi"),
            "stack": stack,
            "subject": (doc.get("metadata") or {}).get("component", {}).get("name", "")}


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise UsageError(f"unknown SBOM format {fmt!r}", f"use one of: {', '.join(FORMATS)}")
    return fmt
