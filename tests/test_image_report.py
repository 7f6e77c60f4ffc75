"""`imagekit report`: components with per-component sizes that add up, plus checks and exports done."""

import json

import pytest
from click.testing import CliRunner

from imagekit import image_report
from imagekit.engines import docker as engine
from imagekit.checks import runner
from imagekit.cli import main

pytestmark = pytest.mark.engine


def test_report_attributes_every_layer_and_sizes_add_up(mpi_image, tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEKIT_STATE", str(tmp_path))
    runner.run(mpi_image, runner.checks_from_image(mpi_image))
    info = image_report.describe(mpi_image)
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
    info = image_report.describe(base_image)
    assert info["stack"] is None and not info["attributed"] and info["components"] == []
    assert "not an imagekit image" in image_report.as_text(info)


def test_report_on_a_missing_image_says_so():
    result = CliRunner().invoke(main, ["report", "imagekit-test/never-built:none"])
    assert result.exit_code == 10 and "not found" in result.output   # the table's "not found"


def test_report_shows_exports_still_on_disk_and_counts_the_gone(mpi_image, tmp_path, monkeypatch):
    from imagekit.util import ledger

    monkeypatch.setenv("IMAGEKIT_STATE", str(tmp_path / "state"))
    image_id = engine.client().images.get(mpi_image).id
    kept, gone, replaced = tmp_path / "kept.sqsh", tmp_path / "gone.sqsh", tmp_path / "replaced.sqsh"
    kept.write_bytes(b"k" * 10)
    replaced.write_bytes(b"r" * 7)
    for path, size in ((kept, 10), (gone, 5), (replaced, 99)):
        ledger.add(image_id, "export", format="enroot", path=str(path), bytes=size, sha256="ab" * 32)
    ledger.add(image_id, "export", format="enroot", path=str(kept), bytes=10, sha256="cd" * 32)  # again
    text = CliRunner().invoke(main, ["report", mpi_image]).output
    assert text.count("export: enroot") == 1 and str(kept) in text and str(gone) not in text
    assert "2 earlier exports no longer on disk or replaced" in text
    listed = json.loads(CliRunner().invoke(main, ["report", mpi_image, "--json"]).stdout)["exports"]
    assert {e["path"]: e["exists"] for e in listed} == {str(kept): True, str(gone): False, str(replaced): False}


E, BEL = "\x1b", "\x07"
HOSTILE_LABELS = {   # security-4 H9: the red team's labels (window title, clear screen, erase line, a link)
    "io.imagekit.stack": f"evil{E}]0;TITLE-SET-BY-IMAGE{BEL}{E}[2J{E}[1;31mRED",
    "io.imagekit.component.openmpi.version": f"5.0.7{E}[2K{E}[1Gverified: signed by ci (fake line)",
    "io.imagekit.schema": "2",
    "org.opencontainers.image.title": f"t{E}]8;;http://127.0.0.1/x{E}\\link{E}]8;;{E}\\",
    "io.imagekit.platform": f"linux/amd64{E}[8m\r\u202e\x9b",
}


def test_h9_label_escape_sequences_never_reach_the_terminal(tmp_path, monkeypatch):
    """`imagekit report` of an image whose labels hold OSC and CSI sequences, a carriage return, a
    bidi override and a C1 CSI, with click told the output is a terminal (color=True: it strips nothing
    itself). What comes out holds no control character but the newline; the sequences show as text."""
    from helpers.arch_images import make

    monkeypatch.setenv("IMAGEKIT_STATE", str(tmp_path))
    tag = f"imagekit-test/h9-esc:{tmp_path.name[-8:].lower()}"
    make(tag, "amd64", tmp_path, "h9", labels=HOSTILE_LABELS)
    try:
        result = CliRunner().invoke(main, ["report", tag], color=True)
    finally:
        engine.client().images.remove(tag, force=True)
    assert result.exit_code == 0, result.output
    assert [c for c in result.output if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f
            or c == "\u202e"] == []
    assert "evil\\x1b]0;TITLE-SET-BY-IMAGE\\x07\\x1b[2J" in result.output, result.output
    assert "5.0.7\\x1b[2K\\x1b[1Gverified: signed by ci (fake line)" in result.output, result.output


def test_h9_an_error_quoting_someone_elses_text_is_escaped_too():
    result = CliRunner().invoke(main, ["report", f"no-such{E}[2J{E}]0;T{BEL}:1"], color=True)
    assert result.exit_code != 0
    assert E not in result.output and BEL not in result.output and "imagekit: error:" in result.output
