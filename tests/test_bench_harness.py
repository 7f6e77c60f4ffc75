"""The bench scripts share one harness (bench/record.py): one way to time, ``--json``, and results
files written whole with the commit, the machine and its load. No engine, no bench is run here."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from argparse import Namespace
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
HARNESS = BENCH / "record.py"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p != HARNESS)


def _harness():
    spec = importlib.util.spec_from_file_location("bench_record", HARNESS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


record = _harness()


def test_there_are_bench_scripts():
    assert len(SCRIPTS) >= 13, [p.name for p in SCRIPTS]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_uses_the_harness(script: Path):
    tree = ast.parse(script.read_text(), filename=str(script))
    imports = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "record" in imports, f"{script.name} does not import the harness (bench/record.py)"
    functions = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert "timed" not in functions, f"{script.name} has a timing helper of its own: use record.timer()"
    used = {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "record"}
    # record.alternate times each side of a pair with record.timer(); build.py and the like report the
    # library's own times (or its logs').
    assert used & {"timer", "alternate"} or script.name in {"build.py", "cuda_build.py", "launch.py",
                                                            "stacks_report.py"}, \
        f"{script.name} times nothing with record.timer() or record.alternate()"
    assert used & {"parser", "options"}, f"{script.name} has no --json/--out (record.parser or record.options)"
    assert {"start"} <= used, f"{script.name} writes no results file (record.start ... finish)"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_help_has_an_example(script: Path):
    doc = ast.get_docstring(ast.parse(script.read_text())) or ""
    assert any(line.strip().startswith(("python ", "python3 ")) and "bench/" in line for line in doc.splitlines()), \
        f"{script.name}'s docstring (its --help) shows no example command"


def test_timer_measures_wall_and_children_cpu():
    with record.timer() as t:
        time.sleep(0.05)
        subprocess.run([sys.executable, "-c", "sum(range(2_000_000))"], check=True)
    assert t.wall >= 0.05
    assert t.children_cpu > 0
    assert t.cpu == pytest.approx(t.self_cpu + t.children_cpu)


def test_finish_writes_the_document_with_its_metadata(tmp_path: Path):
    out = tmp_path / "results" / "x.json"
    run = record.start("x", Namespace(json=False, out=out))
    path = run.finish({"rows": [1, 2], "where": tmp_path})
    assert path == out
    doc = json.loads(out.read_text())
    assert set(record.METADATA) <= set(doc)
    assert doc["bench"] == "x" and doc["rows"] == [1, 2] and doc["where"] == str(tmp_path)
    assert set(doc["load"]) == {"before", "after"} and "loadavg_1m" in doc["load"]["before"]
    assert {"cpus", "cpu", "memory_gib", "kernel"} <= set(doc["machine"])
    assert isinstance(doc["dirty"], bool) and doc["commit"]
    assert doc["argv"] == sys.argv
    assert os.listdir(out.parent) == ["x.json"]           # no temporary file left beside it


def test_default_path_is_bench_results_name():
    run = record.start("some_bench", Namespace(json=False, out=None))
    assert run.path == HARNESS.parent / "results" / "some_bench.json"


def test_a_write_that_fails_leaves_the_old_results_whole(tmp_path: Path, monkeypatch):
    out = tmp_path / "x.json"
    out.write_text('{"old": true}\n')
    seen = []

    def replace(src, dst):
        seen.append((Path(src).parent, json.loads(Path(src).read_text())["bench"]))
        raise OSError("disk gone")

    monkeypatch.setattr(record.os, "replace", replace)
    with pytest.raises(OSError):
        record.start("x", Namespace(json=False, out=out)).finish({"n": 1})
    assert seen == [(tmp_path, "x")]                      # written in full beside the target first
    assert out.read_text() == '{"old": true}\n'
    assert os.listdir(tmp_path) == ["x.json"]


def test_data_may_not_take_the_harness_keys(tmp_path: Path):
    run = record.start("x", Namespace(json=False, out=tmp_path / "x.json"))
    with pytest.raises(ValueError, match="commit"):
        run.finish({"commit": "mine"})


def test_json_prints_only_the_document_on_stdout(tmp_path: Path):
    script = tmp_path / "tiny.py"
    script.write_text(textwrap.dedent(f"""\
        \"\"\"A tiny bench.

            python bench/tiny.py
        \"\"\"
        import subprocess
        import record

        args = record.parser(__doc__).parse_args()
        run = record.start("tiny", args)
        with record.timer() as t:
            print("| a table | for people |")
            subprocess.run(["echo", "a child's own output"], check=True)
        run.finish({{"took_s": t.wall}})
        print("after finish")
        """))
    out = tmp_path / "tiny.json"
    # The harness as bench scripts find it beside them; this one lives elsewhere, so the path says where.
    env = {**os.environ, "PYTHONPATH": str(BENCH)}
    proc = subprocess.run([sys.executable, str(script), "--json", "--out", str(out)], capture_output=True,
                          text=True, check=True, env=env)
    head, _, tail = proc.stdout.rpartition("}\n")
    doc = json.loads(head + "}")
    assert tail == "after finish\n"
    assert doc == json.loads(out.read_text())
    assert doc["bench"] == "tiny" and doc["took_s"] >= 0
    assert "a table" in proc.stderr and "a child's own output" in proc.stderr
    help_text = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                               check=True, env=env).stdout
    assert "python bench/tiny.py" in help_text and "--json" in help_text and "--out" in help_text


def test_sides_alternate_and_the_warm_up_round_is_dropped():
    order = []
    samples = record.alternate({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, runs=2)
    assert order == ["a", "b"] * 3
    assert [len(v) for v in samples.values()] == [2, 2]
    assert all(s.wall >= 0 and s.load_before >= 0 for s in samples["a"])


def test_a_paired_row_takes_the_ratio_pair_by_pair():
    s = lambda wall, cpu: record.Sample(wall, cpu, 1.0, 3.0)  # noqa: E731
    a = [s(1.0, 2.0), s(3.0, 2.0), s(2.0, 2.0)]
    b = [s(2.0, 4.0), s(3.0, 4.0), s(8.0, 4.0)]
    row = record.paired(a, b, "new", "old")
    # per pair 0.5, 1.0, 0.25: not the ratio of the medians (2 / 3)
    assert row["wall"]["ratio"] == {"n": 3, "min": 0.25, "median": 0.5, "max": 1.0}
    assert row["wall"]["times"]["median"] == 2.0 and row["cpu"]["times"]["median"] == 2.0
    assert row["wall"]["added_ms"] == {"n": 3, "min": -6000.0, "median": -1000.0, "max": 0.0}
    assert row["load_1m"] == {"min": 1.0, "max": 3.0} and (row["a"], row["b"], row["n"]) == ("new", "old", 3)
    assert "new / old wall: 0.250 / 0.500 / 1.000 (3), 2.00x, load 1.0-3.0" == record.describe(row)
    with pytest.raises(ValueError):
        record.paired(a, b[:2])


def test_spread_of_an_even_count_is_the_middle_pair_mean():
    assert record.spread([4, 1, 3, 2]) == {"n": 4, "min": 1, "median": 2.5, "max": 4}
