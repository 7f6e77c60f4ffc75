"""Shared test tiers.

Tests marked ``engine`` need a real Docker engine. Locally they skip when no
engine answers; in CI (``CI`` set) a missing engine is a failure, never a skip.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.needs import need  # noqa: E402

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
# Which tests are heavy, and the record a passing heavy run leaves for CI (scripts/heavy_tier.py).
pytest_plugins = ["helpers.heavy_plugin", "helpers.tmp_cleanup_plugin"]


@functools.lru_cache(maxsize=1)
def engine_problem() -> str | None:
    try:
        from imagekit.engines import docker as engine

        engine.client()
    except Exception as exc:  # EngineError or an import problem: report it either way
        return str(exc)
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("engine") is None:
        return
    problem = engine_problem()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI needs a Docker engine and none answers: {problem}", pytrace=False)
    pytest.skip(f"no Docker engine: {problem}")


# The stand-in mirror's own checksums: its tarballs are not upstream's files (see the file's header).
SITE_PINS = Path(__file__).resolve().parent / "data" / "site-mirror-pins.yaml"
# Set at import, so the stacks that tests load (and the imagekit processes they start) take the
# mirror's files, as CI's site would; a test of upstream's own pins unsets it.
os.environ.setdefault("IMAGEKIT_SITE", str(SITE_PINS))


@pytest.fixture(scope="session", autouse=True)
def _session_export_store(tmp_path_factory):
    """Session-scoped fixtures that export (built before any per-test store) use a store of the
    session's own, never the user's cache, whose entries older code may have written."""
    old = os.environ.get("IMAGEKIT_STORE")
    os.environ["IMAGEKIT_STORE"] = str(tmp_path_factory.mktemp("session-store"))
    yield
    if old is None:
        os.environ.pop("IMAGEKIT_STORE", None)
    else:
        os.environ["IMAGEKIT_STORE"] = old


@pytest.fixture(autouse=True)
def _own_export_store(tmp_path_factory, monkeypatch):
    """Each test gets an empty export store of its own (never the user's cache, never another
    test's entries), also for the imagekit processes it starts."""
    monkeypatch.setenv("IMAGEKIT_STORE", str(tmp_path_factory.mktemp("store")))


@pytest.fixture(scope="session")
def base_image() -> str:
    """The locally bootstrapped Debian base (``imagekit base debian:bookworm``)."""
    from imagekit import base_image as base

    return base.ensure(base.BaseRequest("debian:bookworm"), log=lambda *_: None)


@pytest.fixture(scope="session")
def base_image_arm64() -> str:
    """The arm64 Debian base (``imagekit base debian:bookworm --arch arm64``: mmdebstrap or
    debootstrap through qemu-user-static, about 6 minutes cold on 2 cores), tagged apart from the
    amd64 one: ``imagekit/debian:bookworm-arm64``."""
    from imagekit import base_image as base

    return base.ensure(base.BaseRequest("debian:bookworm", arch="arm64"), log=lambda *_: None)


@pytest.fixture(scope="session")
def mpi_image_arm64(base_image_arm64) -> str:
    """debian-mpi built for linux/arm64 under emulation (``imagekit/debian-mpi:latest-arm64``); its
    apt steps run through QEMU, the packages come from the apt cache mount once downloaded."""
    from imagekit import build, stack

    logs = os.environ.get("IMAGEKIT_TEST_LOGS", "build/logs")
    result = build.build(stack.load("debian-mpi", platform="linux/arm64"), build.BuildRequest(log_dir=logs))
    return result.tags[0]


@pytest.fixture(scope="session")
def mpi_image(base_image) -> str:
    """The offline stack's runtime image, built for real (cached layers make reruns fast)."""
    from imagekit import build, stack

    logs = os.environ.get("IMAGEKIT_TEST_LOGS", "build/logs")
    result = build.build(stack.load("debian-mpi"), build.BuildRequest(log_dir=logs))
    return result.tags[0]


def _runtime_and_devel(name: str, mirror) -> tuple[str, str]:
    """Build a mirror stack's runtime and devel targets for real; the (runtime, devel) tags."""
    from imagekit import build, stack

    s = stack.load(name, mirror=str(mirror))
    logs = os.environ.get("IMAGEKIT_TEST_LOGS", "build/logs")
    runtime = build.build(s, build.BuildRequest(log_dir=logs))
    devel = build.build(s, build.BuildRequest(target="devel", log_dir=logs))
    return runtime.tags[0], devel.tags[0]


@pytest.fixture(scope="session")
def cuda_images(base_image, site_mirror) -> tuple[str, str]:
    """The offline CUDA stack's (runtime, devel) tags, built for real from the site mirror: the
    source builds are long on a cold cache, then fully cached."""
    return _runtime_and_devel("debian-cuda", site_mirror)


@pytest.fixture(scope="session")
def trixie_base() -> str:
    """Debian 13 with non-free (``imagekit base debian:trixie --components main,contrib,non-free``):
    the CUDA 12 stack's toolkit is there."""
    from imagekit import base_image as base

    return base.ensure(base.BaseRequest("debian:trixie", components=("main", "contrib", "non-free")),
                       log=lambda *_: None)


@pytest.fixture(scope="session")
def cuda12_images(trixie_base, site_mirror) -> tuple[str, str]:
    """The offline CUDA 12 stack's (runtime, devel) tags (debian-cuda12: R535+ drivers), built for real
    from the site mirror and wheels: long on a cold cache, then fully cached."""
    return _runtime_and_devel("debian-cuda12", site_mirror)


@pytest.fixture(scope="session")
def pytorch_images(cuda_images, site_mirror) -> tuple[str, str]:
    """The framework stack's (runtime, devel) tags: PyPI's torch on debian-cuda, built for real. It
    reuses every debian-cuda layer (so it needs ``cuda_images`` first); torch's ~3 GB of wheels go
    through the pip cache mount, downloaded once per machine."""
    return _runtime_and_devel("debian-pytorch", site_mirror)


@pytest.fixture
def write_stack(tmp_path):
    """Write a small stack file made by the test; returns its path."""
    def write(text: str, name: str = "stack.yaml"):
        path = tmp_path / name
        path.write_text(text)
        return path
    return write


@pytest.fixture(scope="session")
def site_mirror():
    """The stand-in site mirror of upstream release tarballs (../shared/mirror beside the checkout).

    Used in place, never copied. CI always has it; elsewhere set IMAGEKIT_TEST_MIRROR.
    """
    from pathlib import Path

    path = Path(os.environ.get("IMAGEKIT_TEST_MIRROR")
                or Path(__file__).resolve().parents[2] / "shared" / "mirror")
    if not (path / "SHA256SUMS").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the site mirror at {path} (../shared/mirror)", pytrace=False)
        pytest.skip(f"no site mirror at {path}")
    return path


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A real local registry (``127.0.0.1:PORT``), one per test module."""
    from helpers.local_registry import RegistryNotRunning, running_registry

    try:
        with running_registry(tmp_path_factory.mktemp("registry")) as addr:
            yield addr
    except RegistryNotRunning as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def shellcheck():
    """``shellcheck(path_or_text, shell='bash')`` asserts the script is clean."""
    need(None if shutil.which("shellcheck") else "shellcheck is not installed (apt-get install shellcheck)")

    def check(script, shell: str = "bash") -> None:
        if isinstance(script, Path):
            proc = subprocess.run(["shellcheck", "-s", shell, str(script)], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        else:
            proc = subprocess.run(["shellcheck", "-s", shell, "-"], input=script, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        assert proc.returncode == 0, proc.stdout

    return check


@pytest.fixture(scope="session")
def cluster():
    """The real single-node cluster of ``scripts/cluster.py``: munge, slurmctld and slurmd with
    Pyxis (``scripts/setup-cluster.sh`` installs Enroot, Pyxis and Apptainer). Held while the
    session runs and stopped by its pid files by the last holder; a run killed before that is
    cleaned up by the next ``up``."""
    import cluster as cluster_mod

    need(cluster_mod.missing())
    c = cluster_mod.Cluster().hold()
    try:
        yield c
    finally:
        c.release()


@pytest.fixture(scope="session")
def multinode():
    """The real multi-node cluster of ``scripts/multinode.py``: 8 Slurm nodes in namespaces, each with
    its own slurmd, node-local disk and counting client of one shared file system; Pyxis with
    ``use_squashfuse=1``; Slurm's TreeWidth 2, so that step launches are forwarded from node to node
    (sbcast's own tree is its --fanout: the tests set SBCAST_FANOUT=2). Held while
    the session runs and stopped by its pid files by the last holder (``down``: nothing left)."""
    import multinode as multinode_mod

    need(multinode_mod.missing())
    c = multinode_mod.MultiCluster(nodes=8, tree_width=2).hold(squashfuse=True)
    try:
        yield c
    finally:
        c.release()


class TestUser:
    """The unprivileged job user ``scripts/setup-cluster.sh`` adds: runs commands as that user."""

    def __init__(self, name: str) -> None:
        import pwd

        entry = pwd.getpwnam(name)
        self.name, self.uid, self.gid, self.home = name, entry.pw_uid, entry.pw_gid, entry.pw_dir

    def argv(self, argv: list[str], env: dict[str, str] | None = None) -> list[str]:
        """``argv`` run as the user, with ``env``'s SLURM_CONF (and the names given) carried over."""
        extra = [f"{k}={v}" for k, v in (env or {}).items()]
        return ["runuser", "-u", self.name, "--", "env", f"HOME={self.home}", *extra, *argv]

    def run(self, argv: list[str], env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.STDOUT)
        kw.setdefault("text", True)
        return subprocess.run(self.argv(argv, env), cwd=kw.pop("cwd", "/tmp"), **kw)


@pytest.fixture(scope="session")
def test_user() -> TestUser:
    import pwd

    name = os.environ.get("IMAGEKIT_TEST_USER", "imagekit-user")
    try:
        pwd.getpwnam(name)
    except KeyError:
        need(f"the unprivileged test user {name!r} does not exist (bash scripts/setup-cluster.sh)")
    return TestUser(name)


@pytest.fixture
def user_dir(tmp_path_factory, test_user) -> Path:
    """A directory the test user may read and write (pytest's own tmp_path is root's, mode 700)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="imagekit-test-", dir="/var/tmp"))
    os.chown(path, test_user.uid, test_user.gid)
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
