"""Stack files as untrusted input (issue 33: G6 and G7 of ../shared/reviews/security-3.md).

CI renders stacks from pull requests, so a stack file is someone else's text:

- G6: ``extends:`` followed any absolute or ``../`` path, and the parse error quoted the first line of
  the file it read (``/etc/shadow:1: root:*:20228:… unknown key``). Now it names a stack below the
  stack's own directory or on the search path, nothing else, and an error about a file that is not a
  stack quotes none of it.
- G7: a 1 KiB alias bomb, or a 50 MB stack, kept `imagekit render` busy past a minute. Now the file's
  size, its YAML nodes (aliases counted as expanded) and their nesting are bounded, each with one
  error naming the file. How long a refusal takes is measured in bench/stack_bounds.py, not here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit import stack as stack_mod
from imagekit.util import yamlpos
from imagekit.cli import main

SECRET = "hunter2-SECRET-TOKEN"
BOMB = "".join(f"{n}: &{n} [" + ",".join([f"*{p}"] * 9 if p else ['"lol"'] * 9) + "]\n"
               for p, n in zip([None, *"abcdefgh"], "abcdefghi"))


def render(path: Path) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["render", str(path)])
    return res.exit_code, res.output


@pytest.fixture
def tree(tmp_path) -> Path:
    """stacks/ (a repository's stack directory) beside a secret file outside it."""
    (tmp_path / "stacks").mkdir()
    (tmp_path / "runner").mkdir()
    (tmp_path / "runner" / "token.yaml").write_text(f"{SECRET}: x\n")
    (tmp_path / "runner" / "shadow").write_text(f"root:{SECRET}:20228:0:99999:7:::\n")
    return tmp_path


@pytest.mark.parametrize("ref", ["../runner/shadow", "../runner/token", "{tmp}/runner/shadow",
                                 "sub/../../runner/token.yaml"])
def test_g6_extends_never_leaves_the_stack_tree_or_the_search_path(tree, ref):
    child = tree / "stacks" / "c.yaml"
    child.write_text(f"name: c\nextends: {ref.format(tmp=tree)}\n")
    code, out = render(child)
    assert code == 2 and "not a stack name or a path below" in out, out
    assert SECRET not in out and "Traceback" not in out


def test_g6_a_link_inside_the_tree_that_leads_out_is_refused(tree):
    (tree / "stacks" / "parent.yaml").symlink_to(tree / "runner" / "token.yaml")
    child = tree / "stacks" / "c.yaml"
    child.write_text("name: c\nextends: parent\n")
    code, out = render(child)
    assert code == 2 and "leads out of" in out and SECRET not in out, out


def test_g6_a_yaml_file_that_is_not_a_stack_is_named_never_quoted(tree):
    (tree / "stacks" / "ci-secrets.yaml").write_text(f"registry_password: {SECRET}\n{SECRET}: 1\n")
    child = tree / "stacks" / "c.yaml"
    child.write_text("name: c\nextends: ci-secrets\n")
    code, out = render(child)
    assert code == 2 and "ci-secrets.yaml: is not a stack file" in out, out
    assert SECRET not in out and "registry_password" not in out


def test_g6_a_file_that_is_not_yaml_is_not_read(tree):
    (tree / "stacks" / "notes.txt").write_text(f"{SECRET}: 1\n")
    child = tree / "stacks" / "c.yaml"
    child.write_text("name: c\nextends: notes.txt\n")
    code, out = render(child)
    assert code == 2 and "not a stack file" in out and SECRET not in out, out


def test_g6_names_on_the_search_path_and_files_below_still_work(tree, monkeypatch):
    shipped = tree / "shipped"
    (shipped / "base").mkdir(parents=True)
    base = "base:\n  image: imagekit/debian:bookworm\n  distro: debian12\n"
    (shipped / "base" / "p.yaml").write_text(base)
    (tree / "stacks" / "local").mkdir()
    (tree / "stacks" / "local" / "q.yaml").write_text(base)
    monkeypatch.setenv("IMAGEKIT_STACKS", str(shipped))
    for ref in ("base/p", "local/q", "./local/q.yaml"):
        child = tree / "stacks" / "c.yaml"
        child.write_text(f"name: c\nextends: {ref}\n")
        assert stack_mod.load(child).base.distro == "debian12"


def test_g7_an_alias_bomb_is_refused_naming_the_file(tmp_path):
    """Nine levels of nine aliases: 9**9 strings once expanded, from a few hundred bytes."""
    path = tmp_path / "bomb.yaml"
    path.write_text("name: bomb\nbase: {image: x, distro: debian12}\n" + BOMB)
    code, out = render(path)
    assert code == 2 and str(path) in out and "aliases are expanded" in out, out


def test_g7_a_huge_stack_is_refused_before_it_is_parsed(tmp_path):
    """The red team's 50 MB stack (a 10-million-element list)."""
    path = tmp_path / "huge.yaml"
    with open(path, "w") as fh:
        fh.write("name: huge\nbase: {image: x, distro: debian12}\nx: [")
        fh.write("1," * 10_000_000)
        fh.write("1]\n")
    code, out = render(path)
    assert code == 2 and str(path) in out and f"larger than {stack_mod.MAX_STACK_BYTES} bytes" in out, out


def test_g7_many_nodes_under_the_size_cap_are_refused(tmp_path):
    """A flow list of 30,000 one-character items fits in 64 KiB; its nodes do not fit the node bound."""
    path = tmp_path / "many.yaml"
    path.write_text("name: many\nx: [" + ",".join(["1"] * 30_000) + "]\n")
    assert path.stat().st_size < stack_mod.MAX_STACK_BYTES
    code, out = render(path)
    assert code == 2 and f"more than {stack_mod.MAX_STACK_NODES} YAML nodes" in out, out


def test_g7_deep_nesting_is_refused(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("name: deep\nx: " + "[" * 5000 + "]" * 5000 + "\n")
    code, out = render(path)
    assert code == 2 and "nests deeper than" in out and "Traceback" not in out, out


def test_the_shipped_stacks_are_far_inside_the_bounds():
    for path in stack_mod.shipped():
        assert path.stat().st_size * 8 < stack_mod.MAX_STACK_BYTES, path
        yamlpos.load(path, max_bytes=stack_mod.MAX_STACK_BYTES, max_nodes=stack_mod.MAX_STACK_NODES // 10)


def test_other_yaml_keeps_its_larger_default_bounds(tmp_path):
    """Baselines and system models are not stacks: 64 KiB is no limit for them, aliases still are."""
    path = tmp_path / "baseline.yaml"
    path.write_text("results:\n" + "".join(f"  - {{size: {i}, busbw: 1.5}}\n" for i in range(4000)))
    assert path.stat().st_size > stack_mod.MAX_STACK_BYTES
    assert len(yamlpos.load(path)["results"]) == 4000
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    with pytest.raises(Exception, match="aliases are expanded"):
        yamlpos.load(bomb)
    assert os.path.getsize(bomb) < 1024
