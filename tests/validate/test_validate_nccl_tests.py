"""nccl-tests parsing. Outputs are generated in the printf layouts of nccl-tests'
own sources (see validate_gen.py): there is no GPU here to run the real binary."""

from __future__ import annotations

import pytest

from imagekit.validate import Gates, evaluate, parse
from imagekit.validate.summary import saturation_size
from helpers.validate_gen import Spec, nccl_tests_output

STYLES = ["legacy", "classic", "new"]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("check", [True, False], ids=["single-node-numeric", "multi-node-NA"])
def test_every_row_and_figure_read_back(style: str, check: bool) -> None:
    hosts = ("node-a",) if check else ("node-a", "node-b")
    text, exp = nccl_tests_output(Spec(style=style, check=check, hosts=hosts))
    result = parse(text)
    assert len(result.nccl_tests) == 1
    run = result.nccl_tests[0]
    assert [r.size for r in run.rows] == exp.sizes  # 8 B .. 8 GiB
    assert exp.sizes[0] == 8 and exp.sizes[-1] == 8 << 30
    assert [r.out_of_place.busbw for r in run.rows] == exp.oop_busbw
    assert [r.in_place.busbw for r in run.rows] == exp.ip_busbw
    assert [r.out_of_place.time_us for r in run.rows] == exp.oop_time
    if style != "legacy":
        assert [r.out_of_place.wrong for r in run.rows] == exp.wrong
        assert all(r.root == -1 for r in run.rows)
    assert run.collective == "all_reduce"
    assert len(run.ranks) == 8 * len(hosts) and run.hosts == list(hosts)
    assert run.footer and not run.truncated and not run.garbled and run.out_of_bounds == 0
    assert run.expected_steps == 31
    assert evaluate(result).status == "pass"


def test_new_style_metadata() -> None:
    text, _ = nccl_tests_output(Spec(style="new", hosts=("a1", "a2")))
    run = parse(text).nccl_tests[0]
    assert run.version == "2.17.6"
    assert run.params["nThread"] == 1 and run.params["maxBytes"] == 8 << 30 and run.params["unalign"] == 0
    assert run.ranks[9].host == "a2" and run.ranks[9].device == 1 and run.ranks[9].bus_id == "0000:17:00"
    assert run.gpus == ["NVIDIA H100 80GB HBM3"]


def test_all_gather_has_none_redop_and_its_busbw_factor() -> None:
    text, exp = nccl_tests_output(Spec(coll="all_gather", style="new", minb=1024, maxb=1 << 24))
    run = parse(text).nccl_tests[0]
    assert run.collective == "all_gather"
    assert {r.redop for r in run.rows} == {"none"} and {r.root for r in run.rows} == {-1}
    assert [r.size for r in run.rows] == exp.sizes
    # all_gather counts are per rank: count * 4 bytes * 8 ranks == size
    assert all(r.count * 4 * 8 == r.size for r in run.rows)


def test_collective_named_by_command_echo_when_output_does_not_say() -> None:
    text, _ = nccl_tests_output(Spec(coll="reduce_scatter", style="classic", maxb=1 << 20))
    assert parse(text).nccl_tests[0].collective == "reduce_scatter"
    text, _ = nccl_tests_output(Spec(style="classic", maxb=1 << 20, echo_command=False))
    assert parse(text).nccl_tests[0].collective is None


def test_saturation_is_smallest_size_reaching_90_percent_of_peak() -> None:
    text, exp = nccl_tests_output(Spec(style="classic"))
    run = parse(text).nccl_tests[0]
    best = [max(o, i) for o, i in zip(exp.oop_busbw, exp.ip_busbw)]
    peak = max(best)
    want = next(s for s, b in zip(exp.sizes, best) if b >= 0.9 * peak)
    assert saturation_size(run) == want == 32 << 20
    assert saturation_size(run, 0.5) < want


def test_numeric_errors_fail_and_name_the_size() -> None:
    text, _ = nccl_tests_output(Spec(style="classic", wrong={1 << 20: 12}, maxb=1 << 24))
    verdict = evaluate(parse(text))
    assert verdict.status == "fail"
    [f] = [f for f in verdict.failures if f.check == "errors"]
    assert f.size == 1 << 20 and f.figure == "out-of-place" and f.value == 12
    assert "#wrong 12" in f.message and "1 MiB" in f.message


def test_out_of_bounds_fails() -> None:
    text, _ = nccl_tests_output(Spec(style="legacy", oob=3, maxb=1 << 20))
    verdict = evaluate(parse(text))
    assert verdict.status == "fail" and any(f.check == "out_of_bounds" and f.value == 3 for f in verdict.failures)


def test_na_error_columns_pass() -> None:
    text, _ = nccl_tests_output(Spec(style="new", check=False, hosts=("x", "y"), maxb=1 << 20))
    result = parse(text)
    assert all(r.out_of_place.wrong is None and r.in_place.wrong is None for r in result.nccl_tests[0].rows)
    assert evaluate(result).status == "pass"


@pytest.mark.parametrize("style", STYLES)
def test_output_that_stops_without_footer_is_truncated(style: str) -> None:
    text, exp = nccl_tests_output(Spec(style=style, stop_after=20, footer=False))
    result = parse(text)
    run = result.nccl_tests[0]
    assert run.truncated and len(run.rows) == 20
    assert any("Avg bus bandwidth" in t for t in run.truncation)
    verdict = evaluate(result, Gates(min_busbw=1))
    assert verdict.status == "fail"
    assert any(f.check == "truncated" for f in verdict.failures)


def test_sizes_stopping_early_is_truncated_even_with_footer() -> None:
    text, _ = nccl_tests_output(Spec(style="classic", stop_after=25))
    run = parse(text).nccl_tests[0]
    assert run.footer and run.truncated
    assert "25 of 31 sizes" in run.truncation[0]


def test_row_cut_in_the_middle_is_truncated() -> None:
    text, _ = nccl_tests_output(Spec(style="classic", stop_after=12, footer=False))
    text = text.rstrip("\n")
    text = text[: text.rindex("  ") - 10] + "\n"  # the process died while printing the last row
    run = parse(text).nccl_tests[0]
    assert run.truncated and len(run.rows) == 11
    assert any("incomplete" in t for t in run.truncation)


def test_memory_limited_maxbytes_is_respected() -> None:
    text, _ = nccl_tests_output(Spec(style="classic", maxb=1 << 20))
    text = text.replace("#\n# Using devices", "#\n# Reducing maxBytes to 1048576 due to memory limitation\n# Using devices")
    assert not parse(text).nccl_tests[0].truncated


@pytest.mark.parametrize("junk", [
    "",
    "\x00\x01\x02binary\xff\xfe" * 10,
    "Segmentation fault (core dumped)\n",
    "#  size count type\n",  # a header fragment, no numbers
])
def test_input_without_any_table_is_unreadable(junk: str) -> None:
    verdict = evaluate(parse(junk))
    assert verdict.status == "unreadable" and verdict.exit_code == 2


def test_corrupted_table_is_unreadable() -> None:
    text, _ = nccl_tests_output(Spec(style="classic", maxb=1 << 16))
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.strip().startswith("1024 "))
    lines[i] = lines[i].replace("float", "12.5").replace("sum", "77")  # words where numbers cannot be
    verdict = evaluate(parse("\n".join(lines)))
    assert verdict.status == "unreadable"
    assert "corrupted" in verdict.failures[0].message


def test_header_without_rows_is_unreadable() -> None:
    text, _ = nccl_tests_output(Spec(style="classic", stop_after=0))
    verdict = evaluate(parse(text))
    assert verdict.status == "unreadable"


def test_two_runs_in_one_log() -> None:
    a, _ = nccl_tests_output(Spec(style="new", maxb=1 << 20))
    b, _ = nccl_tests_output(Spec(style="new", coll="all_gather", maxb=1 << 20, minb=1024))
    runs = parse(a + "some job output in between\n" + b).nccl_tests
    assert [r.collective for r in runs] == ["all_reduce", "all_gather"]
    assert all(not r.truncated for r in runs)


def test_wrapped_header_and_rows() -> None:
    text, exp = nccl_tests_output(Spec(style="classic", maxb=1 << 24))
    out = []
    for line in text.splitlines():
        if len(line) > 80:  # a terminal 80 columns wide wrapped every long line
            out.extend([line[:80], line[80:]])
        else:
            out.append(line)
    run = parse("\n".join(out)).nccl_tests[0]
    assert [r.in_place.busbw for r in run.rows] == exp.ip_busbw
    assert not run.truncated and not run.garbled


def test_cputime_and_timestamp_columns() -> None:
    text, exp = nccl_tests_output(Spec(style="new", maxb=1 << 16))
    lines = []
    for line in text.splitlines():
        if line.startswith("#       size"):
            line = line.replace(" time", "cputime").rstrip() + " timestamp"
        elif line.strip() and line.strip()[0].isdigit():
            line += "  2025-01-02 03:04:05"
        lines.append(line)
    run = parse("\n".join(lines)).nccl_tests[0]
    assert [r.out_of_place.busbw for r in run.rows] == exp.oop_busbw and not run.garbled
