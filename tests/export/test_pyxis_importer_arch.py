"""The Pyxis importer picks the node's architecture from an index, and refuses an image of another
architecture before Pyxis creates a container (the real registry and importer; under the real
Pyxis in test_pyxis_cluster.py).

How an aarch64 node is simulated on this x86_64 machine, two ways:

- in-process, :func:`imagekit.util.platforms.host_machine` (the importer's only source for the node's
  architecture, ``os.uname().machine``) is replaced to answer ``aarch64``;
- for real, the importer's code runs in an arm64 container (``imagekit/debian-mpi:latest-arm64``,
  its python3 under qemu-user-static), where ``uname -m`` is ``aarch64`` because QEMU emulates the
  syscall: nothing in imagekit is told anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.arch_images import make
from helpers.pyxis_calls import job_env as _env
from helpers.pyxis_calls import pyxis_get

from imagekit.util import platforms
from imagekit.engines import docker as engine
from imagekit.export import pyxis_importer
from imagekit.export.push import push_image, push_platforms

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pushed(registry, tmp_path_factory):
    """An amd64+arm64 index, an arm64-only index and a plain arm64 manifest; the image IDs."""
    tmp = tmp_path_factory.mktemp("importer-arch")
    amd, arm = "ik-arch-test/importer:amd64", "ik-arch-test/importer:arm64"
    ids = {"amd64": make(amd, "amd64", tmp, "importer"), "arm64": make(arm, "arm64", tmp, "importer")}
    push_platforms([amd, arm], f"{registry}/imagekit-test/importer-arch:1")
    push_platforms([arm], f"{registry}/imagekit-test/importer-armindex:1")
    push_image(arm, f"{registry}/imagekit-test/importer-armplain:1")
    yield {"both": f"docker://{registry}#imagekit-test/importer-arch:1",
           "arm-index": f"docker://{registry}#imagekit-test/importer-armindex:1",
           "arm-plain": f"docker://{registry}#imagekit-test/importer-armplain:1", **ids}
    docker = engine.docker_cli()
    tags = subprocess.run([docker, "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                          text=True).stdout.split()
    subprocess.run([docker, "rmi", *[t for t in tags if t.startswith(("ik-arch-test/importer",
                                                                      f"{registry}/imagekit-test/importer-"))]],
                   capture_output=True)


def test_this_x86_node_resolves_the_amd64_image_of_an_index(pushed, tmp_path):
    if os.uname().machine != "x86_64":
        pytest.skip("an x86_64 node's view")
    image_id, manifest = pyxis_importer.identify(pushed["both"], _env(tmp_path / "s", tmp_path / "r", 0))
    assert image_id == pushed["amd64"] and manifest


def test_a_node_that_reports_aarch64_gets_the_arm64_image(pushed, tmp_path, monkeypatch):
    monkeypatch.setattr(platforms, "host_machine", lambda: "aarch64")
    env = _env(tmp_path / "s", tmp_path / "r", 0)
    assert pyxis_importer.identify(pushed["both"], env)[0] == pushed["arm64"]
    assert pyxis_importer.identify(pushed["arm-plain"], env)[0] == pushed["arm64"], "a plain arm64 image runs there"


def test_an_image_of_the_other_architecture_is_refused_before_any_container(pushed, tmp_path):
    """Pyxis shows the importer's stderr and creates no container: the job fails with both
    architectures named, not with "exec format error" inside it. Nothing was converted."""
    if os.uname().machine != "x86_64":
        pytest.skip("an x86_64 node's view")
    store = tmp_path / "store"
    call = pyxis_get(pushed["arm-plain"], _env(store, tmp_path / "run", 0))
    assert (call.rc, call.path) == (2, "")
    assert "importer-armplain:1 is a linux/arm64 image, but this node is linux/amd64 (x86_64)" in call.log
    assert not [p for p in store.rglob("*") if p.is_file() and p.stat().st_size > 4096], "nothing converted"


def test_an_index_with_no_image_for_this_node_is_refused_naming_what_it_has(pushed, tmp_path):
    if os.uname().machine != "x86_64":
        pytest.skip("an x86_64 node's view")
    call = pyxis_get(pushed["arm-index"], _env(tmp_path / "store", tmp_path / "run", 0))
    assert (call.rc, call.path) == (2, "")
    assert "has no linux/amd64 image (it has: linux/arm64)" in call.log


def test_a_local_engine_image_of_the_other_architecture_is_refused_too(pushed, tmp_path):
    if os.uname().machine != "x86_64":
        pytest.skip("an x86_64 node's view")
    call = pyxis_get("dockerd://ik-arch-test/importer:arm64", _env(tmp_path / "store", tmp_path / "run", 0))
    assert call.rc == 2 and "dockerd://ik-arch-test/importer:arm64 is a linux/arm64 image" in call.log


@pytest.mark.heavy
def test_the_importer_in_an_arm64_process_picks_the_arm64_image(pushed, mpi_image_arm64):
    """Needs the emulated debian-mpi arm64 build (its python3). The importer's own code, from this
    checkout, runs under QEMU in an arm64 container on the host's network: uname says aarch64 and
    the index resolves to the arm64 image; the same call here resolves to the amd64 one."""
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    probe = ("import os, platform; from imagekit.export import pyxis_importer as p; "
             f"print(platform.machine(), p.identify({pushed['both']!r}, os.environ)[0])")
    out = subprocess.run([engine.docker_cli(), "run", "--rm", "--platform", "linux/arm64", "--network", "host",
                          "-v", f"{REPO / 'src'}:/ik/src:ro", "-v", f"{site}:/ik/site:ro",
                          "-e", "PYTHONPATH=/ik/src:/ik/site", "-e", "HOME=/tmp", "-e", "PYTHONDONTWRITEBYTECODE=1",
                          mpi_image_arm64, "python3", "-c", probe], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["aarch64", pushed["arm64"]]
