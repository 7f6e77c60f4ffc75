"""The engine gateway against the real engine: inspect, throwaway containers, removing by label."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from imagekit.util import leases
from imagekit.engines import docker as engine
from imagekit.util.errors import EngineError
from helpers.slow_engine import SlowEngine

pytestmark = pytest.mark.engine

TAG = "imagekit-test/engine:latest"


def _container(cid: str):
    """The container, or None when the engine no longer has it."""
    found = engine.client().containers.list(all=True, filters={"id": cid})
    return found[0] if found else None


@pytest.fixture(scope="module")
def small_image(base_image):
    """The base with one label and an ENV: small, built once, removed afterwards."""
    dockerfile = f"FROM {base_image}\nLABEL io.imagekit.test.engine=yes\nENV IMAGEKIT_TEST_ENGINE=1\n"
    subprocess.run([engine.docker_cli(), "build", "-q", "-t", TAG, "-"], input=dockerfile, text=True,
                   check=True, capture_output=True)
    yield TAG
    subprocess.run([engine.docker_cli(), "rmi", TAG], capture_output=True)


def test_inspect_gives_id_labels_size_config_and_history(small_image, base_image):
    image = engine.inspect(small_image)
    assert image.id.startswith("sha256:") and image.id == engine.client().images.get(small_image).id
    assert image.labels["io.imagekit.test.engine"] == "yes"
    assert "IMAGEKIT_TEST_ENGINE=1" in image.config["Env"]
    assert image.size > 0 and image.size == image.attrs["Size"]
    assert len(image.history()) > len(engine.inspect(base_image).history())
    assert engine.inspect(image.id).id == image.id
    assert engine.image_labels(small_image) == image.labels and engine.image_exists(small_image)


def test_a_missing_image_gives_the_one_message_with_the_fix():
    missing = f"imagekit-test/missing-{uuid.uuid4().hex[:8]}:1"
    for ask in (engine.inspect, engine.image_labels):
        with pytest.raises(EngineError) as err:
            ask(missing)
        assert isinstance(err.value, engine.ImageMissing) and err.value.exit_code == 10   # "not found"
        assert err.value.message == f"image {missing!r} not found in the local engine"
        assert "imagekit build STACK" in err.value.hint
    assert engine.image_exists(missing) is False


def test_throwaway_is_removed_on_normal_exit(small_image):
    with engine.throwaway(small_image) as cid:
        assert _container(cid) is not None
    assert _container(cid) is None


def test_throwaway_is_removed_when_the_body_raises(small_image):
    with pytest.raises(RuntimeError, match="the body failed"):
        with engine.throwaway(small_image, idle=True) as cid:
            assert _container(cid).status == "running"
            raise RuntimeError("the body failed")
    assert _container(cid) is None


def test_throwaway_carries_the_owner_label(small_image):
    with engine.throwaway(small_image, idle=True) as cid:
        assert _container(cid).labels[leases.LABEL] == leases.me()
        ran = subprocess.run([engine.docker_cli(), "exec", cid, "sh", "-c", "echo $IMAGEKIT_TEST_ENGINE"],
                             capture_output=True, text=True)
        assert ran.stdout.strip() == "1"


def test_a_throwaway_that_cannot_be_created_is_an_engine_error():
    missing = f"imagekit-test/missing-{uuid.uuid4().hex[:8]}:1"
    with pytest.raises(EngineError, match=f"cannot create a container of {missing}"):
        with engine.throwaway(missing, options=["--pull", "never"]):
            pytest.fail("the body ran")


def test_run_once_gives_exit_code_and_output_and_leaves_nothing(small_image):
    mine = lambda: [c.id for c in engine.client().containers.list(  # noqa: E731
        all=True, filters={"label": f"{leases.LABEL}={leases.me()}"}, sparse=True)]
    before = mine()
    done = engine.run_once(small_image, ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    assert mine() == before


def test_remove_labelled_removes_containers_and_networks_with_that_value_and_nothing_else(small_image):
    client = engine.client()
    key = f"io.imagekit.test.{uuid.uuid4().hex[:8]}"
    containers, networks = [], []

    def container(**labels):  # owner-labelled too: a killed test run's leftovers are swept
        containers.append(client.containers.create(small_image, labels={**labels, **leases.labels()}))
        return containers[-1].id

    def network(**labels):
        networks.append(client.networks.create(f"imagekit-test-{uuid.uuid4().hex[:8]}",
                                               labels={**labels, **leases.labels()}))
        return networks[-1].id

    try:
        gone = {container(**{key: "a"}), container(**{key: "a"}), network(**{key: "a"})}
        unlabelled = container(other="a")
        kept = {container(**{key: "b"}), container(**{key: "ab"}), unlabelled, network(**{key: "b"})}

        def present():
            # Only this process's (its owner label), and of those only this test's: the engine may hold
            # other runs' containers, some being removed meanwhile (sparse: no inspect that fails for them).
            mine = {"label": f"{leases.LABEL}={leases.me()}"}
            return ({c.id for c in client.containers.list(all=True, filters=mine, sparse=True)}
                    | {n.id for n in client.networks.list(filters=mine)}) & (gone | kept)

        assert present() == gone | kept
        assert engine.remove_labelled(key, "a") == 3
        assert present() == kept
        assert engine.remove_labelled(key, "a") == 0
        assert engine.remove_labelled(key) == 3        # any value of the label: b, ab and b's network
        assert present() == {unlabelled}
    finally:
        for obj in containers:
            subprocess.run([engine.docker_cli(), "rm", "-f", obj.id], capture_output=True)
        for obj in networks:
            subprocess.run([engine.docker_cli(), "network", "rm", obj.id], capture_output=True)


def test_remove_labelled_with_a_timeout_ends_and_names_what_a_stuck_engine_left(small_image, monkeypatch):
    """A launcher's Ctrl-C must end however slow the engine: the engine here never answers a removal."""
    client = engine.client()
    key = f"io.imagekit.test.{uuid.uuid4().hex[:8]}"
    made = [client.containers.create(small_image, labels={key: "a", **leases.labels()}) for _ in range(2)]
    try:
        with SlowEngine() as slow, monkeypatch.context() as env:
            slow.hold_deletes()
            env.setenv("DOCKER_HOST", slow.docker_host)
            with pytest.raises(engine.Unfinished) as err:
                engine.remove_labelled(key, "a", timeout=3)
        assert slow.deletes.is_set()
        assert sorted(err.value.pending) == sorted(f"container {c.name}" for c in made)
        assert err.value.unlisted == ["networks"] and f"{key}=a within 3 s" in err.value.message
    finally:
        assert engine.remove_labelled(key, "a") == 2    # the real engine, unhurried
