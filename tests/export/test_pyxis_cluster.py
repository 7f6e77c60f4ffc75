"""The Pyxis importer under the real Pyxis (``importer=`` in plugstack.conf), as root and as a user.

The session's single-node cluster (tests/conftest.py ``cluster``: Slurm 22.05, Pyxis 0.24.0,
Enroot 4.1.2) runs ``srun --container-image=REGISTRY#REPO:TAG`` against the real local registry;
Pyxis execs the site's importer wrapper (README "The Pyxis importer") as the job's user with
the job's environment, and the container starts for real and runs a command. The site's
shared store is published by root (its CI) and read by everyone; ``imagekit-user`` is not a
publisher, has no Docker engine it may use, and converts straight from the registry into a store
of its own. Each test sets ``importer=`` and puts Pyxis's line back in a finally.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.arch_images import make
from click.testing import CliRunner
from helpers.users import TEAM

from imagekit.cli import main
from imagekit.export.store import Store

pytestmark = [pytest.mark.engine, pytest.mark.slurm]


@dataclass
class Site:
    dir: Path
    shared: Path
    log: Path
    registry: str
    user_uid: int

    def cache(self, user) -> Path:
        return self.dir / ("cache-user" if user else "cache-root")

    def own_store(self, user) -> Path:
        return self.cache(user) / "imagekit" / "store"

    def said(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


@pytest.fixture
def site(cluster, other_python, registry, test_user):
    directory = Path(tempfile.mkdtemp(prefix="imagekit-pyxis-", dir="/var/tmp"))
    os.chmod(directory, 0o755)
    shared = directory / "shared"
    res = CliRunner().invoke(main, ["store", "--store", str(shared), "init", "--shared", "--group", str(TEAM)])
    assert res.exit_code == 0, res.output
    log = directory / "importer.log"
    log.touch()
    log.chmod(0o666)
    (directory / "cache-root").mkdir(mode=0o700)
    (directory / "cache-user").mkdir(mode=0o700)
    os.chown(directory / "cache-user", test_user.uid, test_user.gid)
    wrapper = other_python.importer(directory, {"IMAGEKIT_SHARED_STORE": str(shared),
                                                "IMAGEKIT_TRUSTED_ARTIFACTS": f"{registry}/imagekit-test/*"}, log)
    cluster.pyxis(importer=str(wrapper))
    try:
        yield Site(directory, shared, log, registry, test_user.uid)
    finally:
        cluster.pyxis()
        shutil.rmtree(directory, ignore_errors=True)


def srun(cluster, site: Site, user, image: str, command: list[str], timeout: int = 600):
    """``srun --container-image=IMAGE COMMAND`` as root (``user`` None) or the test user, with a job
    environment of its own (HOME, a cache directory of this test for the user's own store)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "SLURM_CONF": str(cluster.conf),
           "HOME": user.home if user else "/root", "XDG_CACHE_HOME": str(site.cache(user))}
    argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), "srun", f"--container-image={image}", *command]
    if user is None:
        return subprocess.run(argv, cwd="/tmp", capture_output=True, text=True, timeout=timeout)
    return user.run(argv, timeout=timeout, stderr=subprocess.PIPE)


def entries(store: Path) -> list:
    return Store.open(store, create=False).entries() if store.exists() else []


def test_cold_from_a_trusted_artifact_then_verified_hits_for_root_and_a_user(cluster, site, odd_image,
                                                                             test_user, tmp_path):
    """CI pushed the .sqsh beside the image: root's first job pulls it into the shared store (checked);
    the user's job and root's next one start from it, verified, converting nothing."""
    from imagekit.export.artifacts import ArtifactPlan, push_with_artifacts

    push_with_artifacts(odd_image, f"{site.registry}/imagekit-test/pyxis-art:1",
                        ArtifactPlan.of(["enroot"], {"enroot": "fast"}, workdir=tmp_path))
    image = f"{site.registry}#imagekit-test/pyxis-art:1"
    for user, step in ((None, "root cold"), (test_user, "user warm"), (None, "root warm")):
        before = len(site.said())
        proc = srun(cluster, site, user, image, ["cat", "/opt/data/file.txt"])
        said = site.said()[before:]
        assert proc.returncode == 0 and proc.stdout == "payload\n", f"{step}: {proc.stdout}{proc.stderr}{said}"
        if step == "root cold":
            assert "pulling the pushed enroot artifact" in said, said
        else:
            assert "store hit" in said and "from a pushed artifact, verified" in said, said
            assert "pulling" not in said and "convert" not in said, said
    (entry,) = entries(site.shared)
    assert entry.options == ("source=artifact",)
    assert entries(site.own_store(test_user)) == [] and entries(site.own_store(None)) == []
    assert list((site.shared / "holds").iterdir()) == [], "Pyxis released every hold"


def test_without_an_artifact_each_store_converts_once_and_the_user_never_publishes(cluster, site, base_image,
                                                                                   test_user):
    """No artifact: two concurrent steps of the user convert once, straight from the registry (the user
    may not use the Docker engine), into the user's own store; root's job converts with the engine into
    the shared store; the user's next job starts from the shared store."""
    from imagekit.export.push import push_image

    push_image(base_image, f"{site.registry}/imagekit-test/pyxis-plain:1")
    image = f"{site.registry}#imagekit-test/pyxis-plain:1"
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda _: srun(cluster, site, test_user, image, ["cat", "/etc/debian_version"]),
                              range(2)))
    said = site.said()
    assert [p.returncode for p in procs] == [0, 0], [p.stdout + p.stderr for p in procs] + [said]
    assert all(p.stdout.strip().startswith("12") for p in procs), [p.stdout for p in procs]
    assert said.count("converting with") == 1 and said.count("converted and stored") == 1, said
    assert "straight from the registry" in said
    (mine,) = entries(site.own_store(test_user))
    assert mine.options == () and os.stat(mine.path).st_uid == site.user_uid
    assert entries(site.shared) == [], "a user outside the publishers never writes the shared store"

    before = len(said)
    proc = srun(cluster, site, None, image, ["cat", "/etc/debian_version"])
    said = site.said()[before:]
    assert proc.returncode == 0 and proc.stdout.strip().startswith("12"), proc.stdout + proc.stderr + said
    assert "into the Docker engine" in said and "converted and stored" in said, said
    (published,) = entries(site.shared)
    assert published.options == () and os.stat(published.path).st_uid == 0

    before = len(site.said())
    proc = srun(cluster, site, test_user, image, ["cat", "/etc/debian_version"])
    said = site.said()[before:]
    assert proc.returncode == 0, proc.stdout + proc.stderr + said
    assert f"store hit: {published.path}" in said and "convert" not in said, said
    assert list((site.shared / "holds").iterdir()) == []


def test_one_reference_starts_the_nodes_own_architecture(cluster, site, base_image, tmp_path):
    """One OCI index holds the amd64 Debian base and an arm64 image (a one-layer stand-in whose
    config says arm64: tests/helpers/arch_images.py). `srun --container-image=REGISTRY#REPO:TAG` on
    this x86_64 node starts the amd64 one; a reference to the arm64 image alone fails before any
    container starts, with both architectures named in the job's error instead of "exec format
    error" inside it."""
    from imagekit.engines import docker as engine
    from imagekit.export.push import push_image, push_platforms

    arm = "ik-arch-test/pyxis:arm64"
    make(arm, "arm64", tmp_path, "pyxis")
    try:
        pushed = push_platforms([base_image, arm], f"{site.registry}/imagekit-test/pyxis-multi:1")
        image = f"{site.registry}#imagekit-test/pyxis-multi:1"
        before = len(site.said())
        proc = srun(cluster, site, None, image, ["sh", "-c", "uname -m; cat /etc/debian_version"])
        said = site.said()[before:]
        assert proc.returncode == 0, proc.stdout + proc.stderr + said
        assert proc.stdout.split()[0] == "x86_64" and proc.stdout.split()[1].startswith("12")
        amd64 = next(p for p in pushed.platforms if p.platform == "linux/amd64")
        assert f"manifest {amd64.digest[:19]}" in said, said

        push_image(arm, f"{site.registry}/imagekit-test/pyxis-armonly:1")
        proc = srun(cluster, site, None, f"{site.registry}#imagekit-test/pyxis-armonly:1", ["true"])
        assert proc.returncode != 0
        assert "is a linux/arm64 image, but this node is linux/amd64 (x86_64)" in proc.stderr + site.said()
    finally:
        subprocess.run([engine.docker_cli(), "rmi", arm, f"{site.registry}/imagekit-test/pyxis-armonly:1",
                        f"{site.registry}/imagekit-test/pyxis-multi:1-amd64",
                        f"{site.registry}/imagekit-test/pyxis-multi:1-arm64"], capture_output=True)
