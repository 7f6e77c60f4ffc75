"""``imagekit launch``'s CLI glue: what `--validate` prints."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validate"))

from imagekit.cli import launch_cmds  # noqa: E402
from validate_gen import Spec, nccl_tests_output  # noqa: E402


def test_validate_prints_with_the_baselines_small_size_and_saturation(tmp_path, capsys):
    """The verdict already used a baseline's small_size and saturation_fraction; the printed summary
    must describe the same sizes (it used the command-line defaults)."""
    run_text, _ = nccl_tests_output(Spec(style="new", hosts=("node-a", "node-b"), check=False))
    baseline = tmp_path / "base.yaml"
    baseline.write_text("small_size: 64K\nsaturation_fraction: 0.5\n")

    def run(stdout) -> int:
        stdout.write(run_text)
        return 0

    gates = dict(min_busbw=None, max_latency_us=None, expect_transport=(), baseline=str(baseline),
                 collective=None, small_size="1K", saturation=0.9)
    assert launch_cmds._run_validated(run, gates) == 0
    out = capsys.readouterr().out
    assert "busbw >= 50% of peak" in out and "90% of peak" not in out
