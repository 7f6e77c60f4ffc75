"""Shared test tiers.

Tests marked ``engine`` need a real Docker engine. Locally they skip when no
engine answers; in CI (``CI`` set) a missing engine is a failure, never a skip.
"""

from __future__ import annotations

import functools
import os

import pytest


@functools.lru_cache(maxsize=1)
def engine_problem() -> str | None:
    try:
        from imagekit import engine

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

    return base.ensure("debian:bookworm", log=lambda *_: None)


@pytest.fixture(scope="session")
def mpi_image(base_image) -> str:
    """The offline stack's runtime image, built for real (cached layers make reruns fast)."""
    from imagekit import build, stack

    result = build.build(stack.load("debian-mpi"), log_dir=os.environ.get("IMAGEKIT_TEST_LOGS", "build/logs"))
    return result.tags[0]


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
    from local_registry import RegistryNotRunning, running_registry

    try:
        with running_registry(tmp_path_factory.mktemp("registry")) as addr:
            yield addr
    except RegistryNotRunning as exc:
        pytest.fail(str(exc))
