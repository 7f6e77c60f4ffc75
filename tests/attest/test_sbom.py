"""The SBOM: CycloneDX 1.6 that validates against the schema, seeded with the stack's own components
(release tarballs with URL, sha256 and purl), plus the dpkg/pip inventory; and its SPDX 2.3 export."""

from __future__ import annotations

import json

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from spdx_tools.spdx.parser.json import json_parser
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document
from test_inventory import STATUS, rootfs

from imagekit import stack
from imagekit.attest import inventory, provenance, sbom, spdx
from imagekit.image_facts.writer import recipe_labels


def cuda_record() -> sbom.ImageRecord:
    labels = recipe_labels(stack.load("debian-cuda"))
    labels["io.imagekit.recipe.sha256"] = "d" * 64
    return sbom.ImageRecord("imagekit/debian-cuda:latest", "sha256:" + "c" * 64, "linux/amd64",
                            "2026-11-27T15:40:20.123456789Z", labels)


def cuda_inventory():
    return inventory.scan(rootfs({"var/lib/dpkg/status": STATUS, "etc/os-release": "ID=debian\nVERSION_ID=12\n",
                                  "usr/lib/python3/dist-packages/mpi4py-4.0.1.dist-info/METADATA":
                                      "Name: mpi4py\nVersion: 4.0.1\n"}))


def test_cyclonedx_validates_and_carries_the_stacks_tarballs():
    data = sbom.to_json(sbom.build(cuda_record(), cuda_inventory()))
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode()) is None
    doc = json.loads(data)
    assert doc["specVersion"] == "1.6" and doc["metadata"]["component"]["type"] == "container"
    by_ref = {c["bom-ref"]: c for c in doc["components"]}
    ompi = by_ref["stack:openmpi"]
    sha = stack.load("debian-cuda").components["openmpi"].pin
    assert ompi["version"] == "5.0.10" and ompi["hashes"] == [{"alg": "SHA-256", "content": sha}]
    assert ompi["purl"].startswith("pkg:generic/openmpi@5.0.10?checksum=sha256:" + sha)
    assert "download_url=https" in ompi["purl"]
    assert ompi["externalReferences"][0]["url"].endswith("openmpi-5.0.10.tar.bz2")
    assert ompi["evidence"]["occurrences"] == [{"location": "/usr/local/openmpi"}]
    for name in ("ucx", "pmix", "nccl-tests", "gdrcopy"):
        assert by_ref[f"stack:{name}"]["hashes"], name
    assert by_ref["deb:libucx0:amd64"]["purl"] == "pkg:deb/debian/libucx0@1.13.1-1?arch=amd64&distro=debian-12"
    assert any(c["purl"] == "pkg:pypi/mpi4py@4.0.1" for c in doc["components"])
    assert by_ref["os:debian@12"]["type"] == "operating-system"
    assert doc["metadata"]["timestamp"].startswith("2026-11-27T15:40:20")


def test_the_same_image_gives_the_same_bytes():
    assert sbom.to_json(sbom.build(cuda_record(), cuda_inventory())) == \
        sbom.to_json(sbom.build(cuda_record(), cuda_inventory()))


def test_spdx_export_validates(tmp_path):
    doc = json.loads(sbom.to_json(sbom.build(cuda_record(), cuda_inventory())))
    out = tmp_path / "x.spdx.json"
    out.write_bytes(spdx.from_cyclonedx(doc))
    parsed = json_parser.parse_from_file(str(out))
    assert validate_full_spdx_document(parsed) == []
    assert len(parsed.packages) == len(doc["components"]) + 1
    ompi = next(p for p in parsed.packages if p.name == "openmpi")
    assert ompi.checksums[0].value == stack.load("debian-cuda").components["openmpi"].pin


def test_provenance_names_recipe_sources_and_builder(monkeypatch):
    monkeypatch.setenv(provenance.BUILDER_ENV, "https://ci.example.invalid/runner/7")
    pred = provenance.predicate(cuda_record(), provenance.BuildRun(engine="docker 20.10", started="t0",
                                                                   finished="t1"))
    build = pred["buildDefinition"]
    assert build["externalParameters"]["recipe"] == {"sha256": "d" * 64}
    assert build["externalParameters"]["stack"]["name"] == "debian-cuda"
    deps = {d["annotations"]["component"]: d for d in build["resolvedDependencies"]}
    assert set(deps) >= {"openmpi", "ucx", "pmix", "nccl-tests", "gdrcopy"}
    assert deps["openmpi"]["digest"]["sha256"] == stack.load("debian-cuda").components["openmpi"].pin
    assert pred["runDetails"]["builder"] == {"id": "https://ci.example.invalid/runner/7",
                                             "version": {"imagekit": pred["runDetails"]["builder"]["version"]["imagekit"],
                                                         "engine": "docker 20.10"}}
    assert pred["runDetails"]["metadata"] == {"startedOn": "t0", "finishedOn": "t1"}
