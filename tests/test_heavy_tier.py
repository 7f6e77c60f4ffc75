"""CI's heavy tier (scripts/heavy_tier.py, tests/helpers/heavy_plugin.py): a record vouches only for the tree it
was made on, and only a passing run of every heavy test writes one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import heavy_plugin
from imagekit import render, stack

heavy_tier = heavy_plugin.heavy_tier
pytest_plugins = ["pytester"]

STACK = """\
name: tier-probe
base: {image: "imagekit/debian:bookworm", distro: debian12}
components:
  openmpi: {source: distro, ucx: false}
"""


def _build(tmp_path, text: str = STACK) -> heavy_tier.Build:
    path = tmp_path / "tier-probe.yaml"
    path.write_text(text)
    recipe = render.recipe_hash(render.render(stack.load(str(path)), "docker"))
    return heavy_tier.Build(name=path.name, text=text, variant=None, mirror=False, recipe=recipe)


def _record(tmp_path, builds, tests=None) -> heavy_tier.Record:
    here = heavy_tier.relative(Path(__file__))
    return heavy_tier.new_record(tests or [here], builds, seconds=1.0, passed=1)


def test_a_record_of_this_tree_is_fresh(tmp_path):
    assert heavy_tier.changes(_record(tmp_path, [_build(tmp_path)])) == []


def test_a_recipe_that_renders_differently_makes_it_stale(tmp_path):
    record = _record(tmp_path, [_build(tmp_path)])
    # As if a component had changed since: the recorded recipe is not what the stack renders to now.
    record.builds[0].recipe = "0" * 64
    assert heavy_tier.changes(record) == ["stack tier-probe.yaml: renders to a different recipe"]


def test_a_stack_that_no_longer_renders_makes_it_stale(tmp_path):
    record = _record(tmp_path, [_build(tmp_path)])
    record.builds[0].text = STACK.replace("openmpi:", "no-such-component:")
    (change,) = heavy_tier.changes(record)
    assert change.startswith("stack tier-probe.yaml: unrenderable: ")


def test_a_changed_test_or_support_file_makes_it_stale(tmp_path):
    record = _record(tmp_path, [])
    record.tests[heavy_tier.relative(Path(__file__))] = "0" * 64
    record.support["tests/conftest.py"] = "0" * 64
    record.support.pop("tests/helpers/heavy_plugin.py")
    assert heavy_tier.changes(record) == [f"{heavy_tier.relative(Path(__file__))} changed",
                                          "tests/conftest.py changed", "tests/helpers/heavy_plugin.py added"]


def test_status_says_why_and_exits_1_without_a_record(tmp_path):
    env = {**os.environ, "IMAGEKIT_HEAVY_RECORD_FILE": str(tmp_path / "none.json")}
    script = heavy_tier.TOP / "scripts" / "heavy_tier.py"
    proc = subprocess.run([sys.executable, str(script), "status", "--json"], capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and json.loads(proc.stdout)["changes"] == ["no record (.ci/heavy-tier.json)"]
    heavy_tier.write_record(_record(tmp_path, [_build(tmp_path)]), tmp_path / "none.json")
    proc = subprocess.run([sys.executable, str(script), "status"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("heavy tier: unchanged since it passed at ")


INNER = """
import pytest

@pytest.mark.heavy
def test_heavy():
    assert {ok}

def test_fast():
    pass
"""


@pytest.mark.parametrize("ok, recorded", [(True, True), (False, False)])
def test_only_a_run_where_every_heavy_test_passed_leaves_a_record(pytester, tmp_path, monkeypatch, ok, recorded):
    pytester.makepyfile(test_inner=INNER.format(ok=ok))
    record = tmp_path / "record.json"
    monkeypatch.setenv("IMAGEKIT_HEAVY_RECORD", "1")
    monkeypatch.setenv("IMAGEKIT_HEAVY_RECORD_FILE", str(record))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), str(Path(__file__).parents[1] / "scripts"),
                                                    os.environ.get("PYTHONPATH", "")]))
    result = pytester.runpytest_subprocess("-p", "helpers.heavy_plugin", "-m", "heavy")
    assert record.is_file() is recorded, result.stdout.str() + result.stderr.str()
    if recorded:
        data = json.loads(record.read_text())
        assert data["passed"] == 1 and [Path(t).name for t in data["tests"]] == ["test_inner.py"]
    else:
        assert "heavy tier: not recorded (0 of 1 heavy tests passed" in result.stderr.str()


def test_a_run_of_part_of_the_heavy_tier_leaves_no_record(pytester, tmp_path, monkeypatch):
    pytester.makepyfile(test_inner=INNER.format(ok=True) + "\n@pytest.mark.heavy\ndef test_other():\n    pass\n")
    record = tmp_path / "record.json"
    monkeypatch.setenv("IMAGEKIT_HEAVY_RECORD", "1")
    monkeypatch.setenv("IMAGEKIT_HEAVY_RECORD_FILE", str(record))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), str(Path(__file__).parents[1] / "scripts"),
                                                    os.environ.get("PYTHONPATH", "")]))
    result = pytester.runpytest_subprocess("-p", "helpers.heavy_plugin", "-m", "heavy", "-k", "test_heavy")
    assert not record.exists(), result.stdout.str()
    assert "1 of 2 heavy tests passed" in result.stderr.str()


def test_the_cuda_fixtures_make_a_test_heavy():
    assert {"cuda_images", "cuda12_images", "pytorch_images"} <= heavy_plugin.HEAVY_FIXTURES
