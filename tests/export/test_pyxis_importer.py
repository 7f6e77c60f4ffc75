"""The Pyxis importer, driven exactly as Pyxis 0.24.0 drives it (tests/helpers/pyxis_calls.py): the
registry, the Docker engine and the store are real. The trust model's tests (who may publish what
a job starts) are in test_pyxis_importer_trust.py; under the real Pyxis in test_pyxis_cluster.py.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
from pathlib import Path

import pytest

from imagekit.export import stage
from helpers.pyxis_calls import is_squashfs as _is_squashfs
from helpers.pyxis_calls import job_env as _env
from helpers.pyxis_calls import pyxis_get, pyxis_release
from helpers.pyxis_calls import run as _run

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def pushed(odd_image, registry):
    """The odd image in the real registry, by tag; returns (docker://… URI, image ID)."""
    from imagekit.engines import docker as engine
    from imagekit.export.push import push_image

    push_image(odd_image, f"{registry}/imagekit-test/importer:1")
    return f"docker://{registry}#imagekit-test/importer:1", engine.inspect(odd_image).id


def _holds(store: Path) -> list[Path]:
    return sorted((store / "holds").iterdir())


def test_four_concurrent_gets_convert_once_then_hits_convert_nothing(pushed, tmp_path):
    uri, image_id = pushed
    store, runtime = tmp_path / "store", tmp_path / "run"
    envs = [_env(store, runtime, step) for step in range(4)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        calls = list(pool.map(lambda e: pyxis_get(uri, e), envs))
    assert [c.rc for c in calls] == [0] * 4, [c.log for c in calls]
    paths = {c.path for c in calls}
    assert len(paths) == 1, paths
    path = paths.pop()
    assert os.path.isabs(path) and _is_squashfs(path)
    assert image_id.split(":")[1] in path
    logs = "".join(c.log for c in calls)
    assert logs.count("converted and stored") == 1, logs
    assert len(_holds(store)) == 4

    again = pyxis_get(uri, _env(store, runtime, 9))
    assert again.rc == 0 and again.path == path
    assert "store hit" in again.log and "convert" not in again.log

    # release after `enroot create` and again at cleanup: both succeed, the holds go, the entry stays
    for env in [*envs, _env(store, runtime, 9)]:
        assert pyxis_release(env).rc == 0
        assert pyxis_release(env).rc == 0
    assert _holds(store) == []
    assert Path(path).is_file()


def test_held_path_survives_gc_until_release(pushed, tmp_path):
    """With use_squashfuse Pyxis starts from the returned path until task cleanup."""
    from imagekit.export.store import Store

    uri, _ = pushed
    store, runtime = tmp_path / "store", tmp_path / "run"
    env = _env(store, runtime, 0)
    call = pyxis_get(uri, env)
    assert call.rc == 0, call.log
    assert Store.open(store).gc(0) == []
    assert _is_squashfs(call.path)
    assert pyxis_release(env).rc == 0
    assert [e.path for e in Store.open(store).gc(0)] == [Path(call.path)]
    assert not Path(call.path).exists()
    assert pyxis_release(env).rc == 0


def test_dockerd_uri_is_served_from_the_local_engine(odd_image, tmp_path):
    env = _env(tmp_path / "store", tmp_path / "run", 0)
    call = pyxis_get(f"dockerd://{odd_image}", env)
    assert call.rc == 0, call.log
    assert _is_squashfs(call.path)
    listing = subprocess.run(["unsquashfs", "-cat", call.path, "etc/rc"], capture_output=True, text=True)
    assert "exec " in listing.stdout


def test_unknown_tag_fails_with_the_not_found_exit_code_and_no_path(registry, tmp_path):
    """A tag the registry does not have is "not found" (10), as everywhere in imagekit; 4 is a registry
    that cannot be reached or refuses."""
    env = _env(tmp_path / "store", tmp_path / "run", 0)
    call = pyxis_get(f"docker://{registry}#imagekit-test/nothing:here", env)
    assert call.rc == 10, call.log
    assert call.path == ""
    assert "imagekit-test/nothing" in call.log


@pytest.mark.parametrize("args, rc", [(["get"], 2), (["fetch", "x"], 2), (["release", "extra"], 2)])
def test_bad_usage_exits_2(args, rc, tmp_path):
    call = _run(args, _env(tmp_path / "store", tmp_path / "run", 0))
    assert call.rc == rc and call.path == "" and "usage:" in call.log


def test_outside_a_job_step_get_refuses_with_the_fix(pushed, tmp_path):
    uri, _ = pushed
    env = _env(tmp_path / "store", tmp_path / "run", 0)
    del env["SLURM_JOB_ID"]
    call = pyxis_get(uri, env)
    assert call.rc == 2 and call.path == ""
    assert "SLURM_JOB_ID" in call.log


def test_a_pushed_artifact_is_pulled_into_the_store_not_converted(odd_image, registry, tmp_path):
    """CI pushed the .sqsh beside the image: the node pulls it (verified), converts nothing."""
    from imagekit.export.artifacts import ArtifactPlan, push_with_artifacts

    push_with_artifacts(odd_image, f"{registry}/imagekit-test/importer-art:1",
                        ArtifactPlan.of(["enroot"], {"enroot": "fast"}, workdir=tmp_path))
    store = tmp_path / "store"
    envs = [_env(store, tmp_path / "run", step, IMAGEKIT_TRUSTED_ARTIFACTS=f"{registry}/imagekit-test/*")
            for step in range(2)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        calls = list(pool.map(lambda e: pyxis_get(f"docker://{registry}#imagekit-test/importer-art:1", e),
                              envs))
    assert [c.rc for c in calls] == [0, 0], [c.log for c in calls]
    logs = "".join(c.log for c in calls)
    assert "converted" not in logs
    assert logs.count("pulling the pushed enroot artifact") == 1, logs
    assert "/fast-" in calls[0].path and _is_squashfs(calls[0].path)


def test_wrong_credentials_exit_7_and_never_show_the_password(odd_image, tmp_path):
    """Enroot's credentials file (netrc) is what the importer reads, as ``enroot import`` does."""
    from helpers.local_registry import htpasswd_config, running_registry

    secret = "s3cret-Pa55"
    root = tmp_path / "auth-registry"
    with running_registry(root, extra_config=htpasswd_config(root, {"alice": "right-one"})) as addr:
        config = tmp_path / "enroot"
        config.mkdir()
        (config / ".credentials").write_text(f"machine 127.0.0.1 login alice password {secret}\n")
        (config / ".credentials").chmod(0o600)
        env = _env(tmp_path / "store", tmp_path / "run", 0, ENROOT_CONFIG_PATH=str(config),
                   DOCKER_CONFIG=str(tmp_path / "docker"))
        call = pyxis_get(f"docker://{addr}#imagekit-test/private:1", env)
    assert call.rc == 7, call.log
    assert call.path == ""
    assert secret not in call.log and "alice" in call.log


def test_a_failure_is_one_line_with_the_whole_reason_and_its_fix(tmp_path):
    """PXS3-5: Pyxis prints the importer's log line by line under its own tag; the README promises one
    ``error:`` line. The OS's reason comes through whole (a port nothing listens on)."""
    from helpers.local_registry import free_port

    port = free_port()
    call = pyxis_get(f"docker://127.0.0.1:{port}#imagekit-test/nothing:1", _env(tmp_path / "store", tmp_path / "run", 0))
    assert call.rc == 4 and call.path == ""
    lines = [line for line in call.log.splitlines() if line.strip()]
    assert lines == [f"imagekit-pyxis-importer on {stage.host()}: error: cannot reach 127.0.0.1:{port}: [Errno 111] Connection refused "
                     f"(fix: is a registry listening at http://127.0.0.1:{port}? (plain HTTP: 127.0.0.1 is a loopback "
                     "address))"], call.log
