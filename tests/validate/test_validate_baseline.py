"""Baseline files (imagekit.validate.baseline): YAML and JSON read, and bad ones refused with file, line and key."""

from __future__ import annotations

import json

import pytest

from helpers.gate_inputs import BASELINE
from imagekit.util.errors import UsageError
from imagekit.validate import baseline_from_dict, load_baseline


def test_baseline_files_yaml_and_json(tmp_path) -> None:
    y = tmp_path / "b.yaml"
    y.write_text("system: s\nbenchmarks:\n  all_reduce:\n    min_busbw: 100\n    sizes:\n      1G: 90\n")
    j = tmp_path / "b.json"
    j.write_text(json.dumps(BASELINE))
    assert load_baseline(y).benchmarks["allreduce"].sizes[1 << 30].min_busbw == 90
    assert load_baseline(j).expect_transport == ["IB"]


@pytest.mark.parametrize("bad", [
    {"min_bus_bw": 3},
    {"benchmarks": {"all_reduce": {"min_busbw": "fast"}}},
    {"benchmarks": {"all_reduce": {"sizes": {"huge": 3}}}},
    {"expect_transport": ["carrier-pigeon"]},
    {"version": 2},
    ["not", "a", "mapping"],
])
def test_bad_baseline_is_a_usage_error(bad) -> None:
    with pytest.raises(UsageError):
        baseline_from_dict(bad)


def test_unparseable_baseline_file(tmp_path) -> None:
    p = tmp_path / "b.yaml"
    p.write_text("benchmarks: [unclosed\n")
    with pytest.raises(UsageError, match=r"b.yaml:1: malformed YAML"):
        load_baseline(p)


def test_baseline_unknown_key_names_line_key_and_suggestion(tmp_path) -> None:
    p = tmp_path / "site.yaml"
    p.write_text("system: dgx\nbenchmarks:\n  all_reduce:\n    min_busbw: 300\n    max_latency: 40\n")
    with pytest.raises(UsageError) as err:
        load_baseline(p)
    assert "site.yaml:5: benchmarks.all_reduce.max_latency: unknown key" in str(err.value)
    assert "did you mean 'max_latency_us'" in str(err.value)
    j = tmp_path / "site.json"
    j.write_text('{"version": 1, "sytem": "dgx"}')
    with pytest.raises(UsageError, match=r"site.json: sytem: unknown key(.|\n)*did you mean 'system'"):
        load_baseline(j)
