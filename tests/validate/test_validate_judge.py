"""The judge (imagekit.validate.judge.evaluate): gates, baselines and transport detection applied to a run.

NCCL_DEBUG=INFO logs are generated in the ``host:pid:tid [dev] NCCL INFO Channel
.. via ..`` shape of real NCCL logs (no IB fabric or GPU exists here)."""

from __future__ import annotations

import json

import pytest

from helpers.gate_inputs import BASELINE, PEAK, RUN
from imagekit.validate import Gates, baseline_from_dict, evaluate, parse
from helpers.validate_gen import Spec, nccl_log, nccl_tests_output


def test_gate_above_peak_fails_and_names_size_and_figure() -> None:
    verdict = evaluate(parse(RUN), Gates(min_busbw=PEAK + 1))
    assert verdict.status == "fail"
    [f] = verdict.failures
    assert f.check == "busbw" and f.size == 8 << 30 and f.figure == "out-of-place" and f.value == PEAK
    assert "8 GiB" in f.message and f"{PEAK:.2f}" in f.message


def test_gate_below_peak_passes() -> None:
    verdict = evaluate(parse(RUN), Gates(min_busbw=PEAK - 1))
    assert verdict.status == "pass" and verdict.exit_code == 0


def test_latency_gate_checks_every_small_size() -> None:
    ok = evaluate(parse(RUN), Gates(max_latency_us=25))
    assert ok.status == "pass"
    bad = evaluate(parse(RUN), Gates(max_latency_us=20.1))  # in-place is 20.30 us at every small size
    assert bad.status == "fail"
    assert {f.size for f in bad.failures} == {8, 16, 32, 64, 128, 256, 512, 1024}
    assert {f.figure for f in bad.failures} == {"in-place"}


def test_gate_that_cannot_be_applied_fails() -> None:
    latency_only = "# OSU MPI Latency Test v7.3\n# Size          Latency (us)\n1                       1.52\n"
    verdict = evaluate(parse(latency_only), Gates(min_busbw=1))
    assert verdict.status == "fail" and "could not be applied" in verdict.failures[0].message


@pytest.mark.parametrize("transport,expected", [
    ("IB", ["IB", "P2P"]),
    ("GDRDMA", ["IB", "GDRDMA", "P2P"]),
    ("Socket", ["Socket", "P2P"]),
    ("P2P", ["P2P"]),
    ("SHM", ["SHM"]),
])
def test_transport_detected(transport: str, expected: list) -> None:
    hosts = ("node-a",) if transport in ("P2P", "SHM") else ("node-a", "node-b")
    info = parse(nccl_log(transport, hosts=hosts)).transport
    assert info.transports == expected
    assert info.nccl_version == "2.21.5+cuda12.4" and info.nranks == 2 * len(hosts)
    assert info.hosts == list(hosts)
    verdict = evaluate(parse(RUN + nccl_log(transport, hosts=hosts)), Gates(expect_transport=[transport]))
    assert verdict.status == "pass", verdict.failures


def test_expected_ib_but_socket_used_fails() -> None:
    verdict = evaluate(parse(RUN + nccl_log("Socket")), Gates(expect_transport=["IB"]))
    assert verdict.status == "fail"
    assert "expected transport IB not used" in verdict.failures[0].message
    assert "Socket (8)" in verdict.failures[0].message


def test_socket_fallback_next_to_ib_fails() -> None:
    mixed = nccl_log("IB") + "node-b:4001:4101 [1] NCCL INFO Channel 01/0 : 3[1] -> 0[0] [send] via NET/Socket/0\n"
    verdict = evaluate(parse(RUN + mixed), Gates(expect_transport=["IB"]))
    assert verdict.status == "fail" and "fell back to NET/Socket" in verdict.failures[0].message


def test_gdrdma_expected_but_off() -> None:
    verdict = evaluate(parse(RUN + nccl_log("GDRDMA", gdr=False)), Gates(expect_transport=["GDRDMA"]))
    assert verdict.status == "fail"


def test_transport_gate_without_nccl_log_fails() -> None:
    verdict = evaluate(parse(RUN), Gates(expect_transport=["IB"]))
    assert verdict.status == "fail" and "NCCL_DEBUG=INFO" in verdict.failures[0].message


def test_log_only_input_is_readable_for_transport() -> None:
    assert evaluate(parse(nccl_log("IB")), Gates(expect_transport=["IB"])).status == "pass"
    assert evaluate(parse(nccl_log("IB")), Gates(min_busbw=1)).status == "unreadable"


def test_baseline_per_size_floor_fails_with_size() -> None:
    data = json.loads(json.dumps(BASELINE))
    data["benchmarks"]["all_reduce_perf"]["sizes"]["1G"] = 179.5  # busbw at 1 GiB is 179.68 / 177.02
    verdict = evaluate(parse(RUN + nccl_log("IB")), Gates(baseline=baseline_from_dict(data)))
    assert verdict.status == "fail"
    [f] = verdict.failures
    assert f.size == 1 << 30 and f.figure == "in-place" and f.limit == 179.5


def test_baseline_pass_and_unmatched_entry_is_a_note() -> None:
    verdict = evaluate(parse(RUN + nccl_log("IB")), Gates(baseline=baseline_from_dict(BASELINE)))
    assert verdict.status == "pass", verdict.failures
    gather, _ = nccl_tests_output(Spec(style="new", coll="sendrecv", maxb=1 << 20))
    verdict = evaluate(parse(gather + nccl_log("IB")), Gates(baseline=baseline_from_dict(BASELINE)))
    assert verdict.status == "pass" and any("no baseline entry for 'sendrecv'" in n for n in verdict.notes)


def test_baseline_size_missing_from_run_fails() -> None:
    short, _ = nccl_tests_output(Spec(style="new", maxb=1 << 20))
    verdict = evaluate(parse(short + nccl_log("IB")), Gates(baseline=baseline_from_dict(BASELINE)))
    assert any(f.check == "baseline" and f.size == 1 << 30 for f in verdict.failures)


def test_unknown_collective_with_several_entries_fails() -> None:
    anon, _ = nccl_tests_output(Spec(style="classic", maxb=1 << 30, echo_command=False))
    base = baseline_from_dict(BASELINE)
    assert evaluate(parse(anon), Gates(baseline=base)).failures[0].check == "baseline"
    named = evaluate(parse(anon), Gates(baseline=base, collective="all_reduce"))
    assert all(f.check != "baseline" for f in named.failures)
