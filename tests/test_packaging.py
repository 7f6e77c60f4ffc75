"""A wheel built from the repo works on its own: shipped stacks, the HPCCM recipe, an offline build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    """A clean venv (no access to this checkout) with only the built wheel installed."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(REPO)],
                   check=True)
    (wheel,) = (work / "dist").glob("imagekit-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
    subprocess.run([str(work / "venv/bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    str(wheel)], check=True)
    return work


def _run(work: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEKIT_STACKS")}
    return subprocess.run(list(args), cwd=work, env=env, capture_output=True, text=True)


def test_the_wheel_lists_and_renders_the_shipped_stacks(wheel_venv):
    listed = _run(wheel_venv, str(wheel_venv / "venv/bin/imagekit"), "stacks", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert {"debian-mpi", "debian-cuda", "debian-cuda12", "nccl-tests", "pytorch"} <= {r["stack"] for r in rows}
    assert {r["from"] for r in rows} == {"shipped"}
    assert all("site-packages" in r["file"] for r in rows), "stacks must come from the installed package"
    rendered = _run(wheel_venv, str(wheel_venv / "venv/bin/imagekit"), "render", "debian-mpi")
    assert rendered.returncode == 0 and "FROM imagekit/debian:bookworm AS devel" in rendered.stdout


def test_plain_hpccm_works_with_the_installed_recipe(wheel_venv):
    py = str(wheel_venv / "venv/bin/python")
    recipe = _run(wheel_venv, py, "-c", "import imagekit, os; print(os.path.join(os.path.dirname("
                                        "imagekit.__file__), 'recipes', 'stack.py'))").stdout.strip()
    out = _run(wheel_venv, str(wheel_venv / "venv/bin/hpccm"), "--recipe", recipe, "--userarg", "stack=debian-mpi")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == _run(wheel_venv, str(wheel_venv / "venv/bin/imagekit"), "render",
                                      "debian-mpi").stdout.strip()


@pytest.mark.engine
def test_the_wheel_builds_the_offline_stack(wheel_venv, base_image):
    out = _run(wheel_venv, str(wheel_venv / "venv/bin/imagekit"), "build", "debian-mpi", "--json",
               "--log-dir", str(wheel_venv / "logs"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)[0]["build"]["tags"][0] == "imagekit/debian-mpi:latest"
