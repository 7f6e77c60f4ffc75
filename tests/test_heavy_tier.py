"""CI's heavy tier (scripts/heavy_tier.py, tests/helpers/heavy_plugin.py): a record vouches only for the tree it
was made on, only a passing run of every heavy test writes one, and a change that could break a heavy test
makes it stale, naming the input and the tests it feeds."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import heavy_plugin
from imagekit import render, stack

heavy_tier = heavy_plugin.heavy_tier
pytest_plugins = ["pytester"]
TOP = heavy_tier.TOP

STACK = """\
name: tier-probe
base: {image: "imagekit/debian:bookworm", distro: debian12}
components:
  openmpi: {source: distro, ucx: false}
"""


def _build(tmp_path, text: str = STACK, target: str = "runtime") -> heavy_tier.Build:
    path = tmp_path / "tier-probe.yaml"
    path.write_text(text)
    loaded = stack.load(str(path))
    return heavy_tier.Build.of(heavy_tier.Tree(), loaded, target, render.recipe_hash(render.render(loaded, "docker")),
                               tests=["tests/test_heavy_tier.py"])


def _record(builds) -> heavy_tier.Record:
    """A record of this tree as a heavy run would make it: its heavy test files, and this file's."""
    tree = heavy_tier.Tree()
    return heavy_tier.new_record([*tree.heavy_test_files(), tree.rel(Path(__file__))], builds, seconds=1.0, passed=1)


def _lines(changes) -> list[str]:
    return [c.what for c in changes]


def test_a_record_of_this_tree_is_fresh(tmp_path):
    assert heavy_tier.changes(_record([_build(tmp_path)])) == []


def test_a_recipe_that_renders_differently_makes_it_stale(tmp_path):
    record = _record([_build(tmp_path)])
    # As if a component had changed since: the recorded recipe is not what the stack renders to now.
    record.builds[0].recipe = "0" * 64
    (change,) = heavy_tier.changes(record)
    assert change.what == (f"stack written by tests/test_heavy_tier.py ({platform.machine()}, runtime): renders to a "
                           "different recipe")
    assert change.feeds == ("tests/test_heavy_tier.py",)


def test_a_stack_that_no_longer_renders_makes_it_stale(tmp_path):
    record = _record([_build(tmp_path)])
    record.builds[0].text = STACK.replace("openmpi:", "no-such-component:")
    (change,) = _lines(heavy_tier.changes(record))
    assert "cannot be rendered now (StackError" in change


def test_a_changed_test_or_support_file_makes_it_stale(tmp_path):
    here = heavy_tier.Tree().rel(Path(__file__))
    record = _record([])
    record.inputs[here] = "0" * 64
    record.inputs["tests/conftest.py"] = "0" * 64
    record.inputs.pop("tests/helpers/heavy_plugin.py")
    found = heavy_tier.changes(record)
    assert _lines(found) == ["tests/conftest.py changed", "tests/helpers/heavy_plugin.py added", f"{here} changed"]
    assert [c.feeds for c in found][2] == (here,)


def test_a_record_from_another_architecture_is_stale(tmp_path):
    record = _record([])
    record.arch = "riscv64"
    assert _lines(heavy_tier.changes(record)) == [f"the record was made on riscv64, this machine is {platform.machine()}"]


def test_a_record_made_under_another_python_is_stale(tmp_path):
    """CI runs the suite under the distro's own Python: a record made under another (pyenv's, conda's) vouches
    nothing for it, since an interpreter's version and build (its stdlib, its extension modules) can break a test."""
    record = _record([])
    assert record.python == heavy_tier.interpreter() and platform.python_version() in record.python
    record.python = "CPython 3.9.2 (/opt/conda/bin/python3.9)"
    assert _lines(heavy_tier.changes(record)) == [
        f"the record was made under CPython 3.9.2 (/opt/conda/bin/python3.9), the tests run "
        f"under {heavy_tier.interpreter()}"]


def _status(script: Path, record: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**(os.environ if env is None else env), "IMAGEKIT_HEAVY_RECORD_FILE": str(record)}
    return subprocess.run([sys.executable, str(script), "status", *args], capture_output=True, text=True, env=env)


def test_status_says_why_and_exits_1_without_a_record(tmp_path):
    script = TOP / "scripts" / "heavy_tier.py"
    proc = _status(script, tmp_path / "none.json", "--json")
    assert proc.returncode == 1
    assert [c["input"] for c in json.loads(proc.stdout)["changes"]] == [f"no record ({tmp_path / 'none.json'})"]
    heavy_tier.write_record(_record([_build(tmp_path)]), tmp_path / "none.json")
    proc = _status(script, tmp_path / "none.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("heavy tier: unchanged since it passed at ")


@pytest.mark.parametrize("spoil, why", [
    (lambda text: text[: len(text) // 2], "it is not JSON"),
    (lambda text: text.replace('"passed": 1', '"passed": 7'), "its seal does not match its content"),
    (lambda text: text.replace(f'"version": {heavy_tier.VERSION}', '"version": 99'),
     f"record version 99; this script reads version {heavy_tier.VERSION}"),
    (lambda text: "[]", "the record is not a JSON object"),
])
def test_a_truncated_or_hand_edited_record_is_never_trusted(tmp_path, spoil, why):
    path = tmp_path / "record.json"
    heavy_tier.write_record(_record([_build(tmp_path)]), path)
    path.write_text(spoil(path.read_text()))
    proc = _status(TOP / "scripts" / "heavy_tier.py", path, "--json")
    assert proc.returncode == 1, proc.stdout
    (change,) = json.loads(proc.stdout)["changes"]
    assert "cannot be trusted: " in change["input"] and why in change["input"], change


# The self-test: a copy of the tree, a record of three real shipped builds made from it, then one edit per
# class of change that can break a heavy test. Each must make `status` (the copy's own script, rendering with
# the copy's own imagekit) say "must run" and name the input; a comment alone must not.
LEAF, PARENT, CHILD = ("src/imagekit/stacks/debian-cuda12.yaml", "src/imagekit/stacks/debian-cuda.yaml",
                       "src/imagekit/stacks/debian-pytorch.yaml")
FEEDS = ["tests/components/test_cuda12_image.py", "tests/components/test_cuda_image.py",
         "tests/components/test_pytorch_image.py"]


def _edit(rel: str, old: str, new: str):
    def apply(root: Path) -> None:
        path = root / rel
        text = path.read_text()
        assert old in text, f"{rel} no longer holds {old!r}: update the self-test's edit"
        path.write_text(text.replace(old, new, 1))
    return apply


def _row(rel: str, target: str, what: str) -> str:
    return f"stack {rel} ({platform.machine()}, {target}): {what}"


# Each edit, and the lines `status` must print for it (among others it may print for the same edit).
EDITS = {
    "a leaf stack": (_edit(LEAF, 'version: "2.32.3"', 'version: "2.31.2"'),
                     [_row(LEAF, t, w) for t in ("runtime", "devel")
                      for w in (f"{LEAF} changed", "renders to a different recipe")]),
    "a parent stack": (_edit(PARENT, 'nccl-tests: {version: "2.19.6"', 'nccl-tests: {version: "2.17.6"'),
                       [_row(PARENT, "runtime", f"{PARENT} changed"), _row(PARENT, "runtime", "renders to a different recipe"),
                        _row(CHILD, "runtime", f"{PARENT} changed"), _row(CHILD, "runtime", "renders to a different recipe")]),
    "a component's check": (_edit("src/imagekit/components/cuda.py", r'expect=rf"release {re.escape(',
                                  r'expect=rf"release 99\.99 {re.escape('),
                            ["src/imagekit/components/cuda.py changed",
                             _row(LEAF, "devel", "its build labels (checks, facts) differ")]),
    "the check runner": (_edit("src/imagekit/checks/runner.py", "\ndef ", "\nRUNNER_EDITED = True\n\n\ndef "),
                         ["src/imagekit/checks/runner.py changed"]),
    "emulation": (_edit("src/imagekit/util/emulation.py", "\ndef ", "\nEMULATION_EDITED = True\n\n\ndef "),
                  ["src/imagekit/util/emulation.py changed"]),
    "the in-container checks": (_edit("src/imagekit/data/testinfra_checks.py", 'ENGINE_ONLY = {"login_env"}',
                                      'ENGINE_ONLY = {"login_env", "library"}'),
                                ["src/imagekit/data/testinfra_checks.py changed"]),
    "an engine module": (_edit("src/imagekit/engines/docker.py", "\ndef ", "\nENGINE_EDITED = True\n\n\ndef "),
                         ["src/imagekit/engines/docker.py changed"]),
    "a dependency pin": (_edit("pyproject.toml", '"pyyaml>=6"', '"pyyaml>=6.0.2"'), ["pyproject.toml changed"]),
}


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory, site_mirror):
    """A copy of the checkout's inputs with a record of three shipped CUDA builds made from it (as the
    heavy run records them), and the record's path."""
    root = tmp_path_factory.mktemp("tree") / "imagekit"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache")
    for d in ("src", "scripts", "tests"):
        shutil.copytree(TOP / d, root / d, ignore=ignore, symlinks=True)
    shutil.copy2(TOP / "pyproject.toml", root / "pyproject.toml")
    tree = heavy_tier.Tree(root)
    os.environ["IMAGEKIT_TEST_MIRROR"], before = str(site_mirror), os.environ.get("IMAGEKIT_TEST_MIRROR")
    builds = []
    for rel, targets, feeds in ((LEAF, ("runtime", "devel"), FEEDS[:1]), (PARENT, ("runtime",), FEEDS[1:]),
                                (CHILD, ("runtime",), FEEDS[2:])):
        loaded = stack.load(str(root / rel), mirror=str(site_mirror))
        recipe = render.recipe_hash(render.render(loaded, "docker"))
        builds += [heavy_tier.Build.of(tree, loaded, t, recipe, tests=feeds) for t in targets]
    # Every heavy test file of the copy, as a heavy run records them (FEEDS among them).
    record = heavy_tier.new_record(tree.heavy_test_files(), builds, seconds=1.0, passed=3, tree=tree)
    if before is None:
        del os.environ["IMAGEKIT_TEST_MIRROR"]
    else:
        os.environ["IMAGEKIT_TEST_MIRROR"] = before
    path = root.parent / "record.json"
    heavy_tier.write_record(record, path)
    return root, path, site_mirror


def _status_of_copy(root: Path, record: Path, mirror: Path) -> subprocess.CompletedProcess:
    # The copy's own script and code: nothing of this checkout's src on the path.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(IMAGEKIT_TEST_MIRROR=str(mirror), IMAGEKIT_SITE=str(root / heavy_tier.SITE_PINS))
    return _status(root / "scripts" / "heavy_tier.py", record, "--json", env=env)


def _edited_copy(tree_copy, tmp_path) -> Path:
    root, record, _ = tree_copy
    copy = tmp_path / "imagekit"
    shutil.copytree(root, copy, symlinks=True)
    return copy


def test_the_copy_with_its_record_is_fresh(tree_copy):
    root, record, mirror = tree_copy
    proc = _status_of_copy(root, record, mirror)
    assert proc.returncode == 0 and json.loads(proc.stdout)["fresh"], proc.stdout + proc.stderr


@pytest.mark.parametrize("edit", list(EDITS))
def test_each_class_of_change_that_can_break_a_heavy_test_makes_it_stale(tree_copy, tmp_path, edit):
    _, record, mirror = tree_copy
    copy = _edited_copy(tree_copy, tmp_path)
    apply, expected = EDITS[edit]
    apply(copy)
    proc = _status_of_copy(copy, record, mirror)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = json.loads(proc.stdout)["changes"]
    assert set(expected) <= {c["input"] for c in found}, found
    # Nothing else: every line is the edited file, or a build that read it.
    assert all(c["input"].startswith("stack ") or c["input"] in expected for c in found), found
    # Each names the heavy tests it feeds: code feeds all of them, a build the tests that built it.
    for c in found:
        if c["input"].startswith("stack "):
            assert c["feeds"] and set(c["feeds"]) <= set(FEEDS), c
        else:
            assert c["feeds"] == ["every heavy test"], c


def test_a_comment_in_an_unrelated_module_keeps_the_record(tree_copy, tmp_path):
    """The rule hashes Python by its syntax tree, so a comment or a blank line changes nothing; a
    docstring does (it is code: click prints it), and so does any other edit."""
    _, record, mirror = tree_copy
    copy = _edited_copy(tree_copy, tmp_path)
    path = copy / "src/imagekit/validate/report.py"
    path.write_text(path.read_text().replace("\ndef ", "\n# a comment, and a blank line below\n\ndef ", 1))
    proc = _status_of_copy(copy, record, mirror)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_new_heavy_test_file_makes_it_stale(tree_copy, tmp_path):
    _, record, mirror = tree_copy
    copy = _edited_copy(tree_copy, tmp_path)
    (copy / "tests/components/test_new_heavy.py").write_text("def test_x(cuda_images):\n    pass\n")
    proc = _status_of_copy(copy, record, mirror)
    assert [c["input"] for c in json.loads(proc.stdout)["changes"]] == [
        "tests/components/test_new_heavy.py holds heavy tests the record never ran"]


INNER = """
import pytest

@pytest.mark.heavy
def test_heavy():
    assert {ok}

def test_fast():
    pass
"""


def _inner_env(monkeypatch, record: Path) -> None:
    monkeypatch.setenv("IMAGEKIT_HEAVY_RECORD", "1")
    monkeypatch.setenv("IMAGEKIT_HEAVY_RECORD_FILE", str(record))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), str(TOP / "scripts"),
                                                    os.environ.get("PYTHONPATH", "")]))


@pytest.mark.parametrize("ok, recorded", [(True, True), (False, False)])
def test_only_a_run_where_every_heavy_test_passed_leaves_a_record(pytester, tmp_path, monkeypatch, ok, recorded):
    pytester.makepyfile(test_inner=INNER.format(ok=ok))
    record = tmp_path / "record.json"
    _inner_env(monkeypatch, record)
    result = pytester.runpytest_subprocess("-p", "helpers.heavy_plugin", "-m", "heavy")
    assert record.is_file() is recorded, result.stdout.str() + result.stderr.str()
    if recorded:
        data = json.loads(record.read_text())
        assert data["passed"] == 1 and [Path(t).name for t in data["tests"]] == ["test_inner.py"]
        assert data["arch"] == platform.machine() and " at the start, " in data["load"]
    else:
        assert "heavy tier: not recorded (0 of 1 heavy tests passed" in result.stderr.str()


def test_a_run_of_part_of_the_heavy_tier_leaves_no_record(pytester, tmp_path, monkeypatch):
    pytester.makepyfile(test_inner=INNER.format(ok=True) + "\n@pytest.mark.heavy\ndef test_other():\n    pass\n")
    record = tmp_path / "record.json"
    _inner_env(monkeypatch, record)
    result = pytester.runpytest_subprocess("-p", "helpers.heavy_plugin", "-m", "heavy", "-k", "test_heavy")
    assert not record.exists(), result.stdout.str()
    assert "1 of 2 heavy tests passed" in result.stderr.str()


def test_the_cuda_fixtures_make_a_test_heavy():
    assert {"cuda_images", "cuda12_images", "pytorch_images"} <= heavy_plugin.HEAVY_FIXTURES
