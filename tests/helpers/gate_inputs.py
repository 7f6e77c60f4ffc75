"""What the gate and baseline tests judge: one nccl-tests run over two nodes, its peak bus bandwidth,
and a baseline file's content around that peak (validate_gen makes the run)."""

from __future__ import annotations

from helpers.validate_gen import Spec, nccl_tests_output

RUN, EXP = nccl_tests_output(Spec(style="new", hosts=("node-a", "node-b"), check=False))
PEAK = max(EXP.oop_busbw + EXP.ip_busbw)

BASELINE = {
    "version": 1,
    "system": "test-2node",
    "expect_transport": ["IB"],
    "benchmarks": {
        "all_reduce_perf": {"min_busbw": PEAK - 5, "max_latency_us": 30,
                            "sizes": {"1G": 170, "8K": {"max_latency_us": 25}}},
        "all_gather": {"min_busbw": 1000},
    },
}
