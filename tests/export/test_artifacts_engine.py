"""End to end with the engine: `imagekit push --with enroot,sif` of a real image to the real local
registry (no referrers API), checked with raw HTTP, then `imagekit pull` of each export."""

from __future__ import annotations

import hashlib
import json
import subprocess
import urllib.request

import pytest
from click.testing import CliRunner

from imagekit.registry import OCI_INDEX, OCI_MANIFEST, referrers_tag

pytestmark = pytest.mark.engine


def raw_json(addr: str, path: str, accept: str) -> tuple[dict, bytes]:
    req = urllib.request.Request(f"http://{addr}{path}", headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = resp.read()
    return json.loads(body), body


def test_push_with_exports_then_pull_each_back(odd_image, registry, docker_bin, tmp_path, monkeypatch):
    from imagekit.engines import docker as engine
    from imagekit.cli import main

    monkeypatch.setenv("ENROOT_CONFIG_PATH", str(tmp_path / "no-credentials"))
    target = f"{registry}/imagekit-test/artifacts:1"
    res = CliRunner().invoke(main, ["push", odd_image, "--to", target, "--with", "enroot,sif",
                                    "--preset", "sif=zstd", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    arts = {a["format"]: a for a in doc["artifacts"]}
    assert set(arts) == {"enroot", "sif"} and arts["sif"]["preset"] == "zstd" and arts["enroot"]["preset"] == "fast"
    tag = referrers_tag(doc["digest"])
    assert all(a["listed_by"] == tag and a["uploaded"] for a in arts.values())
    assert "exporting" in res.stderr and "uploading enroot" in res.stderr   # progress on stderr

    # The image manifest's config digest is the engine's image ID.
    image_manifest, _ = raw_json(registry, f"/v2/imagekit-test/artifacts/manifests/{doc['digest']}",
                                 "application/vnd.docker.distribution.manifest.v2+json, " + OCI_MANIFEST)
    assert image_manifest["config"]["digest"] == engine.inspect(odd_image).id

    # The fallback tag lists both; each artifact's subject is the image.
    index, index_body = raw_json(registry, f"/v2/imagekit-test/artifacts/manifests/{tag}", OCI_INDEX)
    assert sorted(m["digest"] for m in index["manifests"]) == sorted(a["digest"] for a in arts.values())
    for entry in index["manifests"]:
        manifest, _ = raw_json(registry, f"/v2/imagekit-test/artifacts/manifests/{entry['digest']}", OCI_MANIFEST)
        assert manifest["subject"]["digest"] == doc["digest"]
        notes = manifest["annotations"]
        assert notes["io.imagekit.image.config"] == engine.inspect(odd_image).id
        assert notes["io.imagekit.export.tool"] in ("sqfstar", "mksquashfs", "tar2sqfs")
        assert notes["io.imagekit.export.squash-options"]       # the preset's options for that tool

    # Pull each back: the bytes that were pushed (same sha256), a real squashfs / SIF.
    for fmt, suffix in (("enroot", ".sqsh"), ("sif", ".sif")):
        out = tmp_path / f"pulled{suffix}"
        res = CliRunner().invoke(main, ["pull", f"docker://{registry}#imagekit-test/artifacts:1", "--to", fmt,
                                        "-o", str(out), "--json"])
        assert res.exit_code == 0, res.output
        pulled = json.loads(res.stdout)
        sha = hashlib.sha256(out.read_bytes()).hexdigest()
        assert f"sha256:{sha}" == arts[fmt]["file_sha256"] == f"sha256:{pulled['sha256']}"
        assert pulled["artifact"] == arts[fmt]["digest"] and pulled["subject"] == doc["digest"]
    listing = subprocess.run(["unsquashfs", "-l", str(tmp_path / "pulled.sqsh")], capture_output=True, text=True)
    assert listing.returncode == 0 and "squashfs-root/etc/rc" in listing.stdout
    sif = tmp_path / "pulled.sif"
    assert sif.read_bytes()[32:41] == b"SIF_MAGIC" and sif.stat().st_mode & 0o777 == 0o755

    # Pushing again exports and uploads nothing, and leaves the index byte for byte.
    res = CliRunner().invoke(main, ["push", odd_image, "--to", target, "--with", "sif,enroot",
                                    "--preset", "sif=zstd", "--json"])
    assert res.exit_code == 0, res.output
    again = json.loads(res.stdout)
    assert again["digest"] == doc["digest"]
    assert {a["format"]: (a["digest"], a["listed_by"]) for a in again["artifacts"]} == \
        {f: (a["digest"], "existing") for f, a in arts.items()}
    assert "exporting" not in res.stderr
    assert raw_json(registry, f"/v2/imagekit-test/artifacts/manifests/{tag}", OCI_INDEX)[1] == index_body
    # As a person reads it: each export's file sha256 (what `sha256sum` says of the pulled file), then its
    # artifact manifest's digest, named as such (review 4: only the artifact's digest was printed).
    res = CliRunner().invoke(main, ["push", odd_image, "--to", target, "--with", "sif,enroot",
                                    "--preset", "sif=zstd"])
    assert res.exit_code == 0, res.output
    for fmt, suffix in (("enroot", ".sqsh"), ("sif", ".sif")):
        sha = hashlib.sha256((tmp_path / f"pulled{suffix}").read_bytes()).hexdigest()
        assert f"{fmt:<8} file sha256:{sha}" in res.stdout, res.stdout
        assert f"artifact {arts[fmt]['digest']}" in res.stdout
