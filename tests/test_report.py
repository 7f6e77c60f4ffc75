"""`imagekit report`: components with per-component sizes that add up, plus checks and exports done."""

import json

import pytest
from click.testing import CliRunner

from imagekit import check, engine, report
from imagekit.cli import main

pytestmark = pytest.mark.engine


def test_report_attributes_every_layer_and_sizes_add_up(mpi_image, tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEKIT_STATE", str(tmp_path))
    check.run(mpi_image, check.checks_from_image(mpi_image))
    info = report.describe(mpi_image)
    assert info["stack"] == "debian-mpi" and info["attributed"]
    by_name = {c["name"]: c for c in info["components"]}
    assert by_name["nccl"]["bytes"] > 200_000_000  # the wheel's libnccl.so.2
    assert by_name["openmpi"]["version"] == "4.1.4" and by_name["openmpi"]["source"] == "distro"
    total = info["base_bytes"] + sum(c["bytes"] for c in info["components"])
    assert abs(total - info["bytes"]) < 1_000_000, "per-component sizes must add up to the image"
    assert info["checks"][-1]["failed"] == 0 and info["checks"][-1]["passed"] >= 20
    as_json = json.loads(CliRunner().invoke(main, ["report", mpi_image, "--json"]).stdout)
    assert as_json["id"] == engine.client().images.get(mpi_image).id
    text = CliRunner().invoke(main, ["report", mpi_image]).output
    assert "nccl" in text and "last check:" in text


def test_report_on_a_foreign_image_lists_layers_without_guessing(base_image, tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEKIT_STATE", str(tmp_path))
    info = report.describe(base_image)
    assert info["stack"] is None and not info["attributed"] and info["components"] == []
    assert "not an imagekit image" in report.as_text(info)


def test_report_on_a_missing_image_says_so():
    result = CliRunner().invoke(main, ["report", "imagekit-test/never-built:none"])
    assert result.exit_code == 3 and "not found" in result.output
