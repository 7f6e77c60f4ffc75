"""`imagekit validate` with no gate says PARSED ONLY, never PASS: a run no limit looked at has not passed
anything but its sanity checks. Exit 0 still (the exit-code table's 0: nothing ran wrong, and nothing
asked for went unchecked)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from imagekit.cli import main

# all_reduce_perf on 2 GPUs of one node, nccl-tests 2.17 (the table trimmed to one size in eight).
OUTPUT = """\
# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 8388608 step: 8(factor) warmup iters: 5 iters: 20 agg iters: 1 \
validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41021 on    gpu-a01 device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  41022 on    gpu-a01 device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    10.21    0.00    0.00       0    10.05    0.00    0.00       0
          64            16     float     sum      -1    10.30    0.01    0.01       0    10.12    0.01    0.01       0
         512           128     float     sum      -1    10.44    0.05    0.05       0    10.31    0.05    0.05       0
        4096          1024     float     sum      -1    11.02    0.37    0.37       0    10.88    0.38    0.38       0
       32768          8192     float     sum      -1    13.90    2.36    2.36       0    13.71    2.39    2.39       0
      262144         65536     float     sum      -1    21.75   12.05   12.05       0    21.60   12.14   12.14       0
     2097152        524288     float     sum      -1    38.12   55.01   55.01       0    37.95   55.26   55.26       0
     8388608       2097152     float     sum      -1    93.40   89.81   89.81       0    93.10   90.10   90.10       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 19.72
#
# Collective test concluded: all_reduce_perf
"""


def _validate(tmp_path, *args: str) -> "tuple[int, str]":
    log = tmp_path / "all_reduce.out"
    log.write_text(OUTPUT)
    res = CliRunner().invoke(main, ["validate", str(log), *args], catch_exceptions=False)
    return res.exit_code, res.stdout


def test_no_gate_is_parsed_only_not_pass(tmp_path) -> None:
    code, out = _validate(tmp_path)
    assert code == 0
    assert "verdict: PARSED ONLY (no gate applied: add --system MODEL, --min-busbw" in out
    assert "PASS" not in out
    assert "ok   all_reduce (run 1, line 1): no wrong elements" in out   # the sanity check still shown
    code, out = _validate(tmp_path, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["status"] == "pass" and doc["gated"] is False and doc["exit_code"] == 0


def test_a_gate_that_judged_the_run_is_a_pass(tmp_path) -> None:
    code, out = _validate(tmp_path, "--min-busbw", "80")
    assert code == 0 and "verdict: PASS" in out and "PARSED ONLY" not in out
    doc = json.loads(_validate(tmp_path, "--min-busbw", "80", "--json")[1])
    assert doc["gated"] is True and doc["verdict"]["gates_applied"] == ["busbw"]


def test_a_baseline_with_no_entry_for_the_run_applies_no_gate(tmp_path) -> None:
    """A site baseline names other collectives only: a note says so, and nothing was judged."""
    baseline = tmp_path / "baseline.yaml"
    baseline.write_text("version: 1\nbenchmarks:\n  all_gather_perf: {min_busbw: 1000}\n")
    code, out = _validate(tmp_path, "--baseline", str(baseline))
    assert code == 0 and "verdict: PARSED ONLY" in out and "no baseline entry for 'allreduce'" in out


def test_a_failing_gate_is_still_a_fail(tmp_path) -> None:
    code, out = _validate(tmp_path, "--min-busbw", "100")
    assert code == 1 and "verdict: FAIL" in out
