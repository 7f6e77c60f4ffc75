"""The engine's API on its unix socket: an image's document, and ``docker export`` of a throwaway
container streamed straight from the socket, against the ``docker`` package and the CLI."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import uuid

import pytest

from imagekit.util import leases
from imagekit.engines import docker as engine
from imagekit.engines import docker_socket
from imagekit.engines.image import ImageMissing
from imagekit.util.errors import EngineError


def test_only_a_local_unix_socket_is_spoken_to():
    assert docker_socket.socket_path({}) == "/var/run/docker.sock"
    assert docker_socket.socket_path({"DOCKER_HOST": "unix:///run/user/1/docker.sock"}) == "/run/user/1/docker.sock"
    assert docker_socket.socket_path({"DOCKER_HOST": "tcp://10.0.0.1:2376"}) is None
    assert docker_socket.socket_path({"DOCKER_HOST": "ssh://builder"}) is None
    assert docker_socket.socket_path({"DOCKER_TLS_VERIFY": "1"}) is None


def test_paths_quote_everything_but_a_references_own_separators():
    assert docker_socket.path("images", "reg:5000/a/b:1@sha256:ab", "json") == "/images/reg:5000/a/b:1@sha256:ab/json"
    assert docker_socket.path("images", "a b?#", "json") == "/images/a%20b%3F%23/json"
    assert docker_socket.path("containers", "x", v=1, force=1) == "/containers/x?v=1&force=1"


def test_no_engine_on_the_socket_is_the_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    with pytest.raises(EngineError, match="no Docker engine answers"):
        with engine.exported("anything"):
            pass


def test_another_engine_address_leaves_the_export_to_the_cli(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    with engine.exported("anything") as body:
        assert body is None


def _owned_containers() -> set[str]:
    """This process's containers (the engine is shared: other owners' come and go meanwhile)."""
    flt = json.dumps({"label": [f"{leases.LABEL}={leases.me()}"]})
    listed = docker_socket.json_call(docker_socket.socket_path(), "GET",
                                     docker_socket.path("containers", "json", all=1, filters=flt))
    return {c["Id"] for c in listed}


@pytest.mark.engine
def test_the_image_document_is_the_packages(base_image):
    assert engine.image_attrs(base_image) == engine.inspect(base_image).attrs
    with pytest.raises(ImageMissing):
        engine.image_attrs(f"imagekit-test/no-such-image:{uuid.uuid4().hex[:8]}")


@pytest.mark.engine
def test_the_stream_is_what_the_cli_exports(base_image, tmp_path):
    with engine.exported(base_image) as body:
        assert len(_owned_containers()) == 1
        socket_names = [m.name for m in tarfile.open(fileobj=body, mode="r|")]
    assert _owned_containers() == set()            # the throwaway went with the stream
    with engine.throwaway(base_image, purpose="test") as cid:
        out = subprocess.run([engine.docker_cli(), "export", cid], capture_output=True, check=True).stdout
    cli_names = [m.name for m in tarfile.open(fileobj=io.BytesIO(out), mode="r")]
    assert socket_names == cli_names and "etc/os-release" in socket_names


@pytest.mark.engine
def test_the_container_goes_when_the_reader_stops_early(base_image):
    with pytest.raises(KeyboardInterrupt):
        with engine.exported(base_image) as body:
            body.read(4096)
            raise KeyboardInterrupt
    assert _owned_containers() == set()


@pytest.mark.engine
def test_a_missing_image_is_not_found_and_leaves_nothing():
    with pytest.raises(ImageMissing):
        with engine.exported(f"imagekit-test/no-such-image:{uuid.uuid4().hex[:8]}"):
            pass
    assert _owned_containers() == set()


@pytest.mark.engine
def test_a_dead_owners_container_is_swept_before_an_export(base_image):
    dead = f"{leases.where()}+999999+1"      # this namespace, no such process
    made = subprocess.run([engine.docker_cli(), "create", "--label", f"{leases.LABEL}={dead}", base_image, "true"],
                          capture_output=True, text=True, check=True).stdout.strip()
    try:
        assert not leases.alive(dead)
        with engine.exported(base_image) as body:
            body.read(512)
        flt = json.dumps({"id": [made]})
        assert docker_socket.json_call(docker_socket.socket_path(), "GET",
                                       docker_socket.path("containers", "json", all=1, filters=flt)) == []
    finally:
        subprocess.run([engine.docker_cli(), "rm", "-f", made], capture_output=True)
