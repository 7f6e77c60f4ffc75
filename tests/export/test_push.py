"""Push to a real registry (Debian's docker-registry on 127.0.0.1:<free port>)."""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest
from click.testing import CliRunner

from imagekit.util.errors import UsageError
from imagekit.export.push import push_image, split_reference

MANIFEST_TYPES = ", ".join(["application/vnd.docker.distribution.manifest.v2+json",
                            "application/vnd.oci.image.manifest.v1+json"])


def test_reference_parsing_and_pyxis_form():
    assert split_reference("127.0.0.1:5000/hpc/mpi:1.0") == ("127.0.0.1:5000", "hpc/mpi", "1.0")
    assert split_reference("localhost/x") == ("localhost", "x", "latest")
    with pytest.raises(UsageError, match="does not name a registry"):
        split_reference("imagekit/debian:bookworm")
    with pytest.raises(UsageError, match="bad repository name"):
        split_reference("127.0.0.1:5000/Upper:1")


def _registry_digest(addr: str, repo: str, tag: str) -> str:
    req = urllib.request.Request(f"http://{addr}/v2/{repo}/manifests/{tag}",
                                 headers={"Accept": MANIFEST_TYPES}, method="HEAD")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers["Docker-Content-Digest"]


@pytest.mark.engine
def test_push_reports_the_registry_digest_and_pulls_back(odd_image, registry, docker_bin):
    result = push_image(odd_image, f"{registry}/imagekit-test/odd:1")
    assert result.digest == _registry_digest(registry, "imagekit-test/odd", "1")
    assert result.pyxis == f"{registry}#imagekit-test/odd:1"
    assert result.pinned == f"{registry}/imagekit-test/odd@{result.digest}"
    # Pull back by digest after dropping the local tag: same image ID as the source.
    subprocess.run([docker_bin, "rmi", result.reference], check=True, capture_output=True)
    subprocess.run([docker_bin, "pull", result.pinned], check=True, capture_output=True)
    ids = subprocess.run([docker_bin, "image", "inspect", "-f", "{{.Id}}", result.pinned, odd_image],
                         capture_output=True, text=True, check=True).stdout.split()
    assert ids[0] == ids[1]


@pytest.mark.engine
def test_cli_push_json(odd_image, registry):
    from imagekit.cli.push_cmds import push

    res = CliRunner().invoke(push, [odd_image, "--to", f"{registry}/imagekit-test/cli:v2", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["digest"] == _registry_digest(registry, "imagekit-test/cli", "v2")
    assert doc["pyxis"] == f"{registry}#imagekit-test/cli:v2"


@pytest.mark.engine
def test_a_registry_leaves_no_engine_tag_under_its_address(odd_image, docker_bin, tmp_path):
    """A push tags the image ``127.0.0.1:PORT/…`` and a pull by digest adds a digest reference;
    once the registry is gone (the ``registry`` fixture's teardown) none of them is left, and the
    image keeps its own tag."""
    from helpers.local_registry import engine_refs, running_registry

    with running_registry(tmp_path / "registry") as addr:
        result = push_image(odd_image, f"{addr}/imagekit-test/leftover:1")
        subprocess.run([docker_bin, "pull", result.pinned], check=True, capture_output=True)
        assert set(engine_refs(addr)) == {result.reference, result.pinned}
    assert engine_refs(addr) == []
    assert subprocess.run([docker_bin, "image", "inspect", odd_image], capture_output=True).returncode == 0


def test_a_quiet_push_says_how_far_it_is():
    """docker push prints nothing while a big layer goes up (off a terminal): every 5 s of that, one line."""
    from imagekit.export import push as push_mod

    said: list[str] = []
    pace = push_mod._PushPace("reg:5000/hpc/mpi:1", said.append)
    for line in ("The push refers to repository [reg:5000/hpc/mpi]", "0123456789ab: Preparing",
                 "89abcdef0123: Preparing", "0123456789ab: Pushed", "89abcdef0123: Pushing"):
        pace.line(line)
    pace.tick(pace.last + 2)
    pace.tick(pace.last + 6)
    assert said[-1] == f"pushing reg:5000/hpc/mpi:1: 1 of 2 layers up ({pace.last - pace.started:.0f} s)"
    assert len(said) == 6
