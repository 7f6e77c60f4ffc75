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
                                          "debian-pytorch", "grace-pytorch", "nccl-tests", "pytorch"]
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
        "debian-pytorch-arm64", "grace-pytorch", "nccl-tests-cu129-x86_64", "nccl-tests-cu129-sbsa", "pytorch"]
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
