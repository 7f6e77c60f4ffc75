"""A failed `docker push`: the exit-code table's kind, and no tag left behind (no engine needed: a
stand-in docker CLI prints what the real one does; tests/export/test_push.py pushes for real)."""

from __future__ import annotations

import json
import sys

import pytest

from imagekit.engines import docker as engine
from imagekit.util.errors import CredentialsError, EngineError, RegistryError
from imagekit.export import push

REF = "registry.example:5000/hpc/mpi:1"


@pytest.mark.parametrize(("output", "kind", "code", "hint"), [
    ("Get \"https://registry.example:5000/v2/\": dial tcp 10.0.0.9:5000: connect: connection refused",
     RegistryError, 4, "is a registry listening on registry.example:5000?"),
    ("Get \"https://registry.example:5000/v2/\": dial tcp: lookup registry.example: no such host",
     RegistryError, 4, "is a registry listening"),
    ("Get \"https://registry.example:5000/v2/\": http: server gave HTTP response to HTTPS client",
     RegistryError, 4, "insecure-registries"),
    ("unauthorized: authentication required", CredentialsError, 7, "docker login registry.example:5000"),
    ("denied: requested access to the resource is denied", CredentialsError, 7, "docker login"),
    ("no basic auth credentials", CredentialsError, 7, "docker login"),
    ("received unexpected HTTP status: 500 Internal Server Error", RegistryError, 4, "refused the push"),
    ("write /var/lib/docker/tmp/x: no space left on device", EngineError, 3, None),
])
def test_a_failed_push_is_of_its_kind_in_the_exit_code_table(output, kind, code, hint):
    lines = ["The push refers to repository [registry.example:5000/hpc/mpi]",
             "5f70bf18a086: Preparing", output]
    err = push._push_failed(REF, "registry.example:5000", "\n".join(lines), lines[-1])
    assert type(err) is kind and err.exit_code == code
    assert err.message == f"docker push {REF} failed: {output}"
    assert (hint is None and err.hint is None) or hint in err.hint


FAKE_DOCKER = """\
import json, sys
with open({calls!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "push":
    print("The push refers to repository [registry.example:5000/hpc/mpi]")
    print("unauthorized: authentication required")
    sys.exit(1)
"""


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    script = tmp_path / "docker"
    script.write_text(f"#!{sys.executable}\n" + FAKE_DOCKER.format(calls=str(calls)))
    script.chmod(0o755)
    monkeypatch.setattr(engine, "docker_cli", lambda: str(script))
    return lambda: [json.loads(line) for line in calls.read_text().splitlines()]


def test_a_failed_push_removes_the_tag_it_made(fake_docker, monkeypatch):
    monkeypatch.setattr(engine, "image_id", lambda ref: (_ for _ in ()).throw(engine.ImageMissing(ref)))
    monkeypatch.setattr(engine, "image_attrs", lambda ref: {"RepoTags": ["site/mpi:1", REF]})
    with pytest.raises(CredentialsError):
        push.push_image("site/mpi:1", REF)
    assert fake_docker() == [["tag", "site/mpi:1", REF], ["push", REF],
                             ["image", "rm", "--no-prune", REF]]


def test_a_failed_push_moves_a_tag_back_to_the_image_it_named(fake_docker, monkeypatch):
    monkeypatch.setattr(engine, "image_id", lambda ref: "sha256:" + "0" * 64)
    with pytest.raises(CredentialsError):
        push.push_image("site/mpi:2", REF)
    assert fake_docker()[-1] == ["tag", "sha256:" + "0" * 64, REF]


def test_an_image_s_only_name_is_never_untagged(fake_docker, monkeypatch):
    """Untagging an image's last name deletes the image: the tag stays rather than the image going."""
    monkeypatch.setattr(engine, "image_id", lambda ref: (_ for _ in ()).throw(engine.ImageMissing(ref)))
    monkeypatch.setattr(engine, "image_attrs", lambda ref: {"RepoTags": [REF]})
    with pytest.raises(CredentialsError):
        push.push_image("sha256:" + "1" * 64, REF)
    assert fake_docker() == [["tag", "sha256:" + "1" * 64, REF], ["push", REF]]


def test_pushing_an_image_under_its_own_name_tags_and_untags_nothing(fake_docker):
    with pytest.raises(CredentialsError):
        push.push_image(REF)
    assert fake_docker() == [["push", REF]]
