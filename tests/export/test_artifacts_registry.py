"""Artifacts beside an image in the real local registry (Debian's docker-registry, no referrers API).

The subject is a tiny image pushed by imagekit's client (no engine); the files are arbitrary
bytes. The end-to-end run with real exports of a real image is in test_artifacts_engine.py.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit.util.errors import ArtifactMissing, IntegrityError, RegistryError
from imagekit.export import artifacts as art
from imagekit.registry import OCI_INDEX, OCI_MANIFEST, RegistryClient, parse, referrers_tag, sha256_digest
from helpers.local_registry import blob_path, media_type_gate, push_test_image, referrers_api, running_registry


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("artifact-registry")
    with running_registry(root) as addr:
        yield addr, root


@pytest.fixture
def env(tmp_path, monkeypatch):
    values = {"HOME": str(tmp_path), "ENROOT_CONFIG_PATH": str(tmp_path / "enroot"),
              "DOCKER_CONFIG": str(tmp_path / "docker")}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def raw(addr: str, path: str, accept: str = OCI_MANIFEST):
    """GET without imagekit: (bytes, headers)."""
    req = urllib.request.Request(f"http://{addr}{path}", headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read(), resp.headers


def exported(tmp_path: Path, fmt: str, preset: str, content: bytes) -> art.ExportedFile:
    path = tmp_path / f"{fmt}-{preset}{art.kind(fmt).suffix}"
    path.write_bytes(content)
    return art.ExportedFile(format=fmt, path=path, preset=preset, tool="sqfstar",
                            options=("-comp", "zstd") if fmt == "enroot" else ())


def image(addr: str, repo: str, env) -> tuple[RegistryClient, object]:
    client = RegistryClient(addr, env=env)
    push_test_image(client, repo, "1", payload=repo.encode())
    return client, client.resolve(parse(f"{addr}#{repo}:1"))


def test_two_artifacts_listed_by_the_fallback_tag_and_pulled_back(server, env, tmp_path):
    addr, _ = server
    client, subject = image(addr, "t/both", env)
    sqsh = exported(tmp_path, "enroot", "shared-fs", b"hsqs" + b"\0squash" * 5000)
    sif = exported(tmp_path, "sif", "gzip", b"SIF_MAGIC" + b"\1sif" * 7000)
    pushed = [art.push_artifact(client, "t/both", subject, f) for f in (sqsh, sif)]
    tag = referrers_tag(subject.digest)
    assert [p.listed_by for p in pushed] == [tag, tag] and all(p.uploaded for p in pushed)

    # The referrers index, read raw: an OCI index listing both, with artifactType and annotations.
    body, headers = raw(addr, f"/v2/t/both/manifests/{tag}", OCI_INDEX)
    index = json.loads(body)
    assert index["mediaType"] == OCI_INDEX and headers["Content-Type"] == OCI_INDEX
    assert [m["digest"] for m in index["manifests"]] == [p.digest for p in pushed]
    assert [m["artifactType"] for m in index["manifests"]] == [art.ENROOT_ARTIFACT_TYPE, art.SIF_CONFIG]
    for entry, file in zip(index["manifests"], (sqsh, sif)):
        notes = entry["annotations"]
        assert notes[art.A_FORMAT] == file.format and notes[art.A_PRESET] == file.preset
        assert notes[art.A_SHA256] == "sha256:" + hashlib.sha256(file.path.read_bytes()).hexdigest()
        assert notes[art.A_CONFIG] == subject.config_digest and notes[art.A_VERSION]
        # Each artifact manifest: subject = the image, one layer = the file.
        manifest = json.loads(raw(addr, f"/v2/t/both/manifests/{entry['digest']}")[0])
        assert manifest["subject"] == {"mediaType": OCI_MANIFEST, "digest": subject.digest, "size": subject.size}
        assert manifest["layers"][0]["digest"] == notes[art.A_SHA256]
        assert manifest["annotations"] == notes and entry["size"] == len(raw(addr, f"/v2/t/both/manifests/"
                                                                                  f"{entry['digest']}")[0])
    sif_manifest = json.loads(raw(addr, f"/v2/t/both/manifests/{pushed[1].digest}")[0])
    assert sif_manifest["config"]["mediaType"] == "application/vnd.sylabs.sif.config.v1+json"
    assert sif_manifest["layers"][0]["mediaType"] == "application/vnd.sylabs.sif.layer.v1.sif"
    assert manifest["annotations"][art.A_OPTIONS] == ""
    enroot_manifest = json.loads(raw(addr, f"/v2/t/both/manifests/{pushed[0].digest}")[0])
    assert enroot_manifest["annotations"][art.A_OPTIONS] == "-comp zstd"

    # Pull each back, byte-identical; the SIF keeps Apptainer's executable mode.
    for file in (sqsh, sif):
        out = tmp_path / f"pulled{art.kind(file.format).suffix}"
        result = art.pull_artifact(f"docker://{addr}#t/both:1", art.ArtifactPull(file.format), out)
        assert out.read_bytes() == file.path.read_bytes()
        assert result.subject == subject.digest and result.preset == file.preset
        assert (out.stat().st_mode & 0o777) == (0o755 if file.format == "sif" else 0o644)


def test_repush_is_idempotent_and_keeps_other_referrers(server, env, tmp_path):
    addr, _ = server
    client, subject = image(addr, "t/keep", env)
    tag = referrers_tag(subject.digest)
    # Someone else's referrer first (a signature-like artifact), with a field imagekit does not know.
    other = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": "application/vnd.example.sig",
                        "config": {"mediaType": "application/vnd.oci.empty.v1+json",
                                   "digest": sha256_digest(b"{}"), "size": 2},
                        "layers": [{"mediaType": "application/vnd.oci.empty.v1+json",
                                    "digest": sha256_digest(b"{}"), "size": 2}],
                        "subject": subject.descriptor()}).encode()
    client.upload_blob("t/keep", b"{}", sha256_digest(b"{}"), 2)
    other_digest, _ = client.put_manifest("t/keep", sha256_digest(other), other, OCI_MANIFEST)
    foreign = {"schemaVersion": 2, "mediaType": OCI_INDEX, "annotations": {"org.example.note": "kept"},
               "manifests": [{"mediaType": OCI_MANIFEST, "digest": other_digest, "size": len(other),
                              "artifactType": "application/vnd.example.sig"}]}
    client.put_manifest("t/keep", tag, json.dumps(foreign).encode(), OCI_INDEX)

    file = exported(tmp_path, "enroot", "enroot", b"squash" * 999)
    first = art.push_artifact(client, "t/keep", subject, file)
    index_before, _ = raw(addr, f"/v2/t/keep/manifests/{tag}", OCI_INDEX)
    again = art.push_artifact(client, "t/keep", subject, file)
    index_after, _ = raw(addr, f"/v2/t/keep/manifests/{tag}", OCI_INDEX)
    assert again.digest == first.digest and not again.uploaded
    assert index_after == index_before
    doc = json.loads(index_after)
    assert [m["digest"] for m in doc["manifests"]] == [other_digest, first.digest]
    assert doc["annotations"] == {"org.example.note": "kept"}

    # A second preset of the same format is another referrer; --preset picks it, else the newest.
    second = art.push_artifact(client, "t/keep", subject, exported(tmp_path, "enroot", "none", b"raw" * 999))
    assert [m["digest"] for m in json.loads(raw(addr, f"/v2/t/keep/manifests/{tag}", OCI_INDEX)[0])["manifests"]] \
        == [other_digest, first.digest, second.digest]
    wanted = art.ArtifactPull("enroot", preset="enroot")
    assert art.pull_artifact(f"{addr}#t/keep:1", wanted, tmp_path / "a.sqsh").artifact == first.digest
    assert art.pull_artifact(f"{addr}#t/keep:1", art.ArtifactPull("enroot"), tmp_path / "b.sqsh").artifact == second.digest


def test_a_tag_that_is_not_a_referrers_index_is_not_overwritten(server, env, tmp_path):
    addr, _ = server
    client, subject = image(addr, "t/clash", env)
    # Put an image manifest under the referrers tag name.
    manifest = client.get_manifest("t/clash", subject.digest)
    client.put_manifest("t/clash", referrers_tag(subject.digest), manifest.body, manifest.media_type)
    with pytest.raises(RegistryError, match="not a referrers index; refusing to overwrite it"):
        art.push_artifact(client, "t/clash", subject, exported(tmp_path, "sif", "gzip", b"sif" * 10))
    assert raw(addr, f"/v2/t/clash/manifests/{referrers_tag(subject.digest)}")[0] == manifest.body


def test_no_artifact_is_exit_5_with_how_to_make_one(server, env, tmp_path):
    from imagekit.cli import main

    addr, _ = server
    client, subject = image(addr, "t/none", env)
    art.push_artifact(client, "t/none", subject, exported(tmp_path, "sif", "zstd", b"sif" * 10))
    out = tmp_path / "x.sqsh"
    res = CliRunner().invoke(main, ["pull", f"{addr}#t/none:1", "--to", "enroot", "-o", str(out)])
    assert res.exit_code == 5, res.output
    assert f"no enroot artifact was pushed for {addr}/t/none:1 ({subject.digest}); it has: sif (zstd)" in res.output
    assert f"imagekit push IMAGE --to {addr}/t/none:1 --with enroot" in res.output
    assert list(tmp_path.glob("*x.sqsh*")) == []
    with pytest.raises(ArtifactMissing, match=r"no sif \(preset gzip\) artifact"):
        art.pull_artifact(f"{addr}#t/none:1", art.ArtifactPull("sif", preset="gzip"), tmp_path / "x.sif")


def test_a_corrupt_blob_is_exit_6_and_leaves_nothing(server, env, tmp_path):
    from imagekit.cli import main

    addr, root = server
    client, subject = image(addr, "t/corrupt", env)
    file = exported(tmp_path, "enroot", "enroot", b"good squashfs bytes " * 5000)
    art.push_artifact(client, "t/corrupt", subject, file)
    stored = blob_path(root, "sha256:" + hashlib.sha256(file.path.read_bytes()).hexdigest())
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF           # one flipped byte, same size
    stored.write_bytes(bytes(data))
    out = tmp_path / "out" / "img.sqsh"
    out.parent.mkdir()
    res = CliRunner().invoke(main, ["pull", f"{addr}#t/corrupt:1", "--to", "enroot", "-o", str(out), "--json"])
    assert res.exit_code == 6, res.output
    assert "arrived as sha256:" in res.output and "nothing was kept" in res.output
    assert list(out.parent.iterdir()) == []         # no output, no .part file
    with pytest.raises(IntegrityError):
        art.pull_artifact(f"{addr}#t/corrupt:1", art.ArtifactPull("enroot"), out)


def test_a_registry_with_the_referrers_api_lists_them_itself(server, env, tmp_path):
    """Where the registry answers OCI-Subject, the artifacts are listed by its referrers API and no
    fallback tag is written; pull (and so the importer) finds them through the API. The API is a
    stand-in (local_registry.referrers_api) in front of the real registry: see its docstring."""
    addr, _ = server
    with referrers_api(addr) as (api, listed):
        client, subject = image(api, "t/api", env)
        sqsh = exported(tmp_path, "enroot", "fast", b"hsqs" + b"\0api" * 4000)
        sif = exported(tmp_path, "sif", "gzip", b"SIF_MAGIC" + b"\2api" * 4000)
        pushed = [art.push_artifact(client, "t/api", subject, f) for f in (sqsh, sif)]
        assert [p.listed_by for p in pushed] == ["api", "api"]
        assert [d["digest"] for d in listed[("t/api", subject.digest)]] == [p.digest for p in pushed]
        with pytest.raises(urllib.error.HTTPError) as no_tag:
            raw(addr, f"/v2/t/api/manifests/{referrers_tag(subject.digest)}", OCI_INDEX)
        assert no_tag.value.code == 404, "the fallback tag is written only without the API"

        entries, source = client.referrers("t/api", subject.digest, art.SIF_CONFIG)
        assert source == "api" and [e["digest"] for e in entries] == [pushed[1].digest]
        for file in (sqsh, sif):
            out = tmp_path / f"api{art.kind(file.format).suffix}"
            result = art.pull_artifact(f"docker://{api}#t/api:1", art.ArtifactPull(file.format), out)
            assert out.read_bytes() == file.path.read_bytes() and result.subject == subject.digest

        again = art.push_artifact(client, "t/api", subject, sqsh)
        assert again.digest == pushed[0].digest and again.listed_by == "api"
        assert len(listed[("t/api", subject.digest)]) == 2
    # Straight to the registry (no API, no fallback tag), there is nothing to find.
    with pytest.raises(ArtifactMissing):
        art.pull_artifact(f"docker://{addr}#t/api:1", art.ArtifactPull("enroot"), tmp_path / "none.sqsh")


def test_a_registry_that_refuses_the_media_type_is_exit_4_and_nothing_is_listed(server, env, tmp_path):
    addr, _ = server
    with media_type_gate(addr, {"application/vnd.oci.image.config.v1+json", art.SIF_CONFIG}) as gate:
        client, subject = image(gate, "t/refused", env)
        # The SIF type is allowed and goes through; the Enroot type is refused.
        sif = art.push_artifact(client, "t/refused", subject, exported(tmp_path, "sif", "gzip", b"sif" * 100))
        index_before, _ = raw(addr, f"/v2/t/refused/manifests/{referrers_tag(subject.digest)}", OCI_INDEX)
        file = exported(tmp_path, "enroot", "enroot", b"squash" * 100)
        with pytest.raises(RegistryError) as info:
            art.push_artifact(client, "t/refused", subject, file)
    text = str(info.value)
    assert info.value.exit_code == 4
    assert f"refused the enroot artifact manifest (artifactType {art.ENROOT_ARTIFACT_TYPE}" in text
    assert "MANIFEST_INVALID" in text and "nothing was listed as a referrer" in text
    # The real registry behind the gate lists only the SIF, and has no Enroot artifact manifest.
    index_after, _ = raw(addr, f"/v2/t/refused/manifests/{referrers_tag(subject.digest)}", OCI_INDEX)
    assert index_after == index_before
    assert [m["digest"] for m in json.loads(index_after)["manifests"]] == [sif.digest]
    body = art.artifact_manifest(art.ExportedFile("enroot", file.path, "enroot", "sqfstar", ("-comp", "zstd"),
                                                  file.sha256, file.size), subject)
    with pytest.raises(urllib.error.HTTPError) as missing:
        raw(addr, f"/v2/t/refused/manifests/{sha256_digest(body)}")
    assert missing.value.code == 404


def test_presets_and_formats_options():
    assert art.parse_formats("enroot, sif,enroot") == ["enroot", "sif"]
    assert art.parse_presets(("enroot=shared-fs",), ["enroot", "sif"]) == {"enroot": "shared-fs", "sif": "gzip-6"}
    assert art.parse_presets(("zstd",), ["sif"]) == {"sif": "zstd"}
    from imagekit.util.errors import UsageError

    with pytest.raises(UsageError, match="unknown artifact format 'docker'"):
        art.parse_formats("enroot,docker")
    with pytest.raises(UsageError, match="'sif' is not among --with enroot"):
        art.parse_presets(("sif=zstd",), ["enroot"])
