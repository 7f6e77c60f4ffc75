"""Atomic outputs, free-space refusal, interruption and stream failures leave nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from imagekit.util import leases
from imagekit.util.errors import ImagekitError, UsageError
from imagekit.export import ExportRequest, export_image, output


def test_atomic_output_renames_only_on_success(tmp_path):
    target = tmp_path / "x.sqsh"
    with output.atomic_output(target) as tmp:
        tmp.write_bytes(b"data")
        assert not target.exists() and tmp.parent == tmp_path
    assert target.read_bytes() == b"data"
    with pytest.raises(KeyboardInterrupt):
        with output.atomic_output(tmp_path / "y.sqsh") as tmp:
            tmp.write_bytes(b"partial")
            raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.sqsh"]


def test_free_space_check_says_what_and_how_much(tmp_path):
    with pytest.raises(ImagekitError, match=r"not enough free space in .* need about .* free"):
        output.check_free_space(tmp_path, 1 << 60, "an image")
    output.check_free_space(tmp_path, 1, "an image")


def test_existing_output_is_refused(tmp_path):
    (tmp_path / "a.sqsh").write_text("keep me")
    with pytest.raises(UsageError, match="already exists"):
        output.prepare_target(tmp_path / "a.sqsh", force=False)
    with pytest.raises(UsageError, match="does not exist"):
        output.prepare_target(tmp_path / "nodir/a.sqsh", force=False)


@pytest.mark.engine
def test_free_space_refusal_before_any_write(odd_image, tmp_path, monkeypatch):
    monkeypatch.setattr(output, "free_bytes", lambda d: 1 << 20)
    with pytest.raises(ImagekitError, match="not enough free space"):
        export_image(odd_image, ExportRequest("enroot"), tmp_path / "x.sqsh")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.engine
def test_failing_squashfs_tool_leaves_nothing(odd_image, tmp_path):
    with pytest.raises(ImagekitError, match="sqfstar|mksquashfs"):
        export_image(odd_image, ExportRequest("enroot", squash_opts=["-b", "3K"]), tmp_path / "x.sqsh")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.engine
@pytest.mark.parametrize("fmt", ["enroot", "sif"])
def test_sigterm_mid_stream_leaves_no_partial_file(base_image, tmp_path, fmt):
    """Kill the export while the stream is flowing; no .sqsh/.sif and no temp file remain.
    A direct output (--no-store); tests/export/test_store.py kills exports into the store."""
    out = tmp_path / f"x.{fmt}"
    proc = subprocess.Popen([sys.executable, "-m", "imagekit", "export", base_image, "--to", fmt,
                             "--no-store", "-o", str(out), "--preset", "none" if fmt == "enroot" else "gzip"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    owner = leases.of(proc.pid)     # the owner label value its container carries
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:        # wait until the temp file is growing
        parts = [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
        if parts and parts[0].exists() and parts[0].stat().st_size > (1 << 20):
            break
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.02)
    else:
        pytest.fail("export never started writing")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert list(tmp_path.iterdir()) == []
    # this export's own container only: other runs may share the engine
    left = subprocess.run(["/usr/bin/docker", "ps", "-aq", "--filter", f"label={leases.LABEL}={owner}"],
                          capture_output=True, text=True).stdout.split()
    assert left == [], "export container left behind"


@pytest.mark.engine
def test_cli_export_json(odd_image, tmp_path):
    from imagekit.cli.export_cmds import export

    res = CliRunner().invoke(export, [odd_image, "--to", "enroot", "-o", str(tmp_path / "c.sqsh"),
                                      "--json", "-q"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["path"] == str(tmp_path / "c.sqsh") and doc["bytes"] == os.path.getsize(doc["path"])
    assert len(doc["sha256"]) == 64 and doc["seconds"] > 0 and doc["format"] == "enroot"
    from imagekit.export import squash

    assert doc["compression"] == squash.DEFAULT_PRESET       # the CLI's default preset
