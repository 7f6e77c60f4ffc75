"""The catalog commands (stacks, matrix), through the real click group (CliRunner on imagekit.cli.main)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from imagekit import build, cli


def invoke(*args: str):
    result = CliRunner().invoke(cli.main, list(args), prog_name="imagekit")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_stacks_json():
    result = invoke("stacks", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert [r["stack"] for r in rows] == ["debian-cuda", "debian-cuda12", "debian-grace", "debian-mpi",
                                          "debian-pytorch", "grace-pytorch", "nccl-tests", "nccl-tests-volta", "pytorch"]
    for row in rows:
        assert set(row) == {"stack", "file", "from", "description", "variants"}
        assert Path(row["file"]).is_file() and row["description"]
    by = {r["stack"]: r for r in rows}
    assert by["debian-mpi"]["variants"] == []
    assert by["nccl-tests"]["variants"] == ["nccl-tests-cu129-x86_64", "nccl-tests-cu129-sbsa"]


def test_stacks_text():
    result = invoke("stacks")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("debian-cuda ") and lines[1].startswith("debian-cuda12 ")
    assert lines[2].startswith("debian-grace ") and lines[3].startswith("debian-mpi ")
    assert "  nccl-tests-cu129-sbsa" in lines


def test_matrix_json():
    result = invoke("matrix", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    # One row per variant and arch: debian-cuda, debian-mpi and debian-pytorch offer both.
    assert [r["id"] for r in rows] == [
        "debian-cuda", "debian-cuda-arm64", "debian-cuda12", "debian-grace", "debian-mpi", "debian-mpi-arm64",
        "debian-pytorch",
        "debian-pytorch-arm64", "grace-pytorch", "nccl-tests-cu129-x86_64", "nccl-tests-cu129-sbsa", "nccl-tests-volta",
        "pytorch"]
    arm = next(r for r in rows if r["variant"] == "nccl-tests-cu129-sbsa")
    assert arm["platform"] == "linux/arm64" and arm["arch"] == "aarch64" and arm["offline"] is False
    mpi = next(r for r in rows if r["id"] == "debian-mpi-arm64")
    assert (mpi["variant"], mpi["image"], mpi["suffix"]) == ("debian-mpi", "imagekit/debian-mpi:latest-arm64", "-arm64")
    # A variant of several arches is pushed per arch (TAG-amd64, TAG-arm64) and joined by an index.
    assert {(r["id"], r["push_suffix"]) for r in rows if r["index"]} >= {("debian-mpi", "-amd64"),
                                                                       ("debian-mpi-arm64", "-arm64")}
    assert arm["index"] is False and arm["push_suffix"] == "", "a single-arch variant keeps its tag"
    # The platform CI builds for is the one `imagekit build` passes to docker.
    assert all(r["platform"] == build.PLATFORMS[r["arch"]] for r in rows)
    here = json.loads(invoke("matrix", "--json", "--buildable-here").stdout)
    assert [r["variant"] for r in here] == ["debian-cuda", "debian-cuda12", "debian-mpi", "debian-pytorch"]
    assert {r["platform"] for r in here} == {"linux/amd64"}


def test_one_broken_site_stack_does_not_stop_the_others(tmp_path, monkeypatch):
    """Review 3 H11: a site directory with a stack that fails its own rules still lists, renders and finds
    every other stack; the broken one is named with its error where it is listed."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "broken.yaml").write_text("name: broken\nbase: {image: imagekit/debian:bookworm, distro: debian12}\n"
                                      "components:\n  cuda: {source: pypi, version: '13.2.2', arch_list: ['70']}\n")
    (site / "good.yaml").write_text("name: good\nbase: {image: imagekit/debian:bookworm, distro: debian12}\n"
                                    "components:\n  sshd: {}\n")
    monkeypatch.setenv("IMAGEKIT_STACKS_PATH", str(site))
    listed = invoke("stacks", "--json")
    assert listed.exit_code == 0, listed.output
    rows = {r["stack"]: r for r in json.loads(listed.stdout)}
    assert "CUDA 13.0 dropped Volta" in rows["broken"]["error"] and "good" in rows and "debian-mpi" in rows
    assert invoke("render", "good").exit_code == 0
    assert invoke("render", "debian-mpi").exit_code == 0
    missing = invoke("render", "no-such-stack")
    assert missing.exit_code == 2 and "broken.yaml" in missing.output
