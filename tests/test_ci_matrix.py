"""The CI matrix (imagekit.ci_matrix): only the stacks a site names, only its platforms, a runner per row,
validation per row, and a stack file every runner's checkout resolves."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from imagekit import ci_matrix
from imagekit.util.errors import ImagekitError
from imagekit.util.settings import Site

SITE_STACK = "name: {name}\nbase: {{image: imagekit/debian:bookworm, distro: debian12, arch: [x86_64, aarch64]}}\n"


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.delenv("IMAGEKIT_SITE", raising=False)
    (tmp_path / "site").mkdir()
    for name in ("ours", "theirs"):
        (tmp_path / "site" / f"{name}.yaml").write_text(SITE_STACK.format(name=name))
    monkeypatch.chdir(tmp_path)
    return Site.from_env(stack_dirs=["site"])


def test_site_only_and_platforms_keep_the_sites_rows(site):
    rows = ci_matrix.rows(ci_matrix.MatrixRequest(site_only=True, platforms=("linux/amd64",), site=site))
    assert [(r["id"], r["file"], r["runner"]) for r in rows] == [("ours", "site/ours.yaml", ["x86_64"]),
                                                                 ("theirs", "site/theirs.yaml", ["x86_64"])]


def test_named_stacks_runners_and_systems(site):
    request = ci_matrix.MatrixRequest(stacks=("ours",), runners=("x86_64=self-hosted,x64 arm64=self-hosted,a64",),
                                      validate=("ours-arm64=gb200-nvl72",), site=site)
    rows = {r["id"]: r for r in ci_matrix.rows(request)}
    assert set(rows) == {"ours", "ours-arm64"}
    assert rows["ours"]["runner"] == ["self-hosted", "x64"] and rows["ours-arm64"]["runner"] == ["self-hosted", "a64"]
    assert (rows["ours"]["system"], rows["ours-arm64"]["system"]) == ("", "gb200-nvl72")
    # the leg runs on its arch's GPU runners that also carry its model's label (J7: its own hardware)
    assert rows["ours-arm64"]["gpu_runner"] == ["gpu", "aarch64", "gb200-nvl72"]


@pytest.mark.parametrize("field, value, says", [
    ("validate", ("nope=dgx-h100",), "no matrix row is called 'nope'"),
    ("validate", ("ours",), "no system model lists 'ours' in its stacks"),
    ("validate", ("ours=",), "is not NAME=VALUE"),
    ("runners", ("sparc=x",), "not an architecture imagekit builds"),
    ("platforms", ("linux/ppc64le",), "imagekit builds linux images for"),
])
def test_what_a_site_mistypes_is_one_error(site, field, value, says):
    with pytest.raises(ImagekitError, match=says) as info:
        ci_matrix.rows(ci_matrix.MatrixRequest(stacks=("ours",), site=site, **{field: value}))
    assert info.value.exit_code == 2


def test_a_shipped_stack_outside_the_checkout_is_named_not_pathed(tmp_path, monkeypatch):
    """Review 4 Task 6: installed with `pip install .`, the shipped stacks' rows carried the matrix job's own
    site-packages path, which an arm64 runner does not have. Outside the working directory, a row names the
    stack (the search path finds the same file on every runner)."""
    monkeypatch.chdir(tmp_path)
    rows = json.loads(subprocess.run([sys.executable, "-m", "imagekit", "matrix", "debian-mpi", "--json"],
                                     capture_output=True, text=True, check=True,
                                     env={**os.environ, "IMAGEKIT_SITE": ""}).stdout)
    assert {r["file"] for r in rows} == {"debian-mpi"} and {r["arch"] for r in rows} == {"x86_64", "aarch64"}


def test_the_environment_carries_a_sites_inputs(site, tmp_path):
    """How the templates hand their inputs over: each option's variable."""
    env = {**os.environ, "IMAGEKIT_STACKS_PATH": "site", "IMAGEKIT_SITE_ONLY": "true", "IMAGEKIT_SITE": "",
           "IMAGEKIT_PLATFORMS": "linux/arm64", "IMAGEKIT_RUNNERS": "aarch64=arm-builder",
           "IMAGEKIT_VALIDATE": "theirs=dgx-gh200"}
    rows = json.loads(subprocess.run([sys.executable, "-m", "imagekit", "matrix", "--json"], capture_output=True,
                                     text=True, check=True, cwd=tmp_path, env=env).stdout)
    assert [(r["id"], r["runner"], r["system"]) for r in rows] == [("ours-arm64", ["arm-builder"], ""),
                                                                   ("theirs-arm64", ["arm-builder"], "dgx-gh200")]
