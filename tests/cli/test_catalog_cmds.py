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
    assert [r["stack"] for r in rows] == ["debian-cuda", "debian-cuda12", "debian-mpi", "debian-pytorch",
                                          "nccl-tests", "nccl-tests-volta", "pytorch"]
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
    assert lines[2].startswith("debian-mpi ")
    assert "  nccl-tests-cu129-sbsa" in lines


def test_matrix_json():
    result = invoke("matrix", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert len(rows) == 8
    arm = next(r for r in rows if r["variant"] == "nccl-tests-cu129-sbsa")
    assert arm["platform"] == "linux/arm64" and arm["arch"] == "aarch64" and arm["offline"] is False
    # The platform CI builds for is the one `imagekit build` passes to docker.
    assert all(r["platform"] == build.PLATFORMS[r["arch"]] for r in rows)
    here = json.loads(invoke("matrix", "--json", "--buildable-here").stdout)
    assert [r["variant"] for r in here] == ["debian-cuda", "debian-cuda12", "debian-mpi", "debian-pytorch"]
    assert {r["platform"] for r in here} == {"linux/amd64"}
