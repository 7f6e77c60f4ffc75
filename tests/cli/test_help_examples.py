"""Every example in every command's ``--help`` runs as written.

The examples are collected from the whole click command tree (each command's help and epilog, lines
whose command is ``imagekit``). Each one must parse (click's ``make_context`` on the example's own
arguments, down to the leaf command), name stacks, variants and ``imagekit/<stack>`` images that exist,
and, where its command has ``--dry-run``, run with it and exit 0. No engine is reached: DOCKER_HOST
names a socket that does not exist for the dry runs.
"""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from imagekit import stack
from imagekit.cli import main, tree

REPO = Path(__file__).resolve().parents[2]
_COMMENT = re.compile(r"\s+#\s.*$")            # "   # a note"; not the '#' of "registry#repo:tag"
_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")
_EXAMPLE = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*imagekit\s")   # "imagekit …", maybe after VAR=value
_SHELL = {"&&", "||", "|", ">", ";"}           # what follows is another program's
_IMAGE = re.compile(r"^imagekit/([\w.-]+):")


def _examples() -> list[tuple[str, list[str]]]:
    """(command path, the example's arguments after ``imagekit``) for every example line."""
    found = []
    for path, cmd, _ctx in tree.walk(main):
        text = "\n".join(t for t in (cmd.help, cmd.epilog) if t)
        # A line ending in a backslash goes on (written as "\\\n" or as a Python line continuation).
        text = re.sub(r"\\\n\s*", " ", text)
        for line in text.splitlines():
            if not _EXAMPLE.match(line.strip()):
                continue      # prose (whose quotes shlex would choke on)
            words = shlex.split(_COMMENT.sub("", line.strip()))
            while _ASSIGNMENT.match(words[0]):
                words.pop(0)
            args = []
            for word in words[1:]:
                if word in _SHELL:
                    break
                args.append(word)
            found.append((" ".join(path) or "imagekit", args))
    return found


EXAMPLES = _examples()


def _leaf(args: list[str]) -> tuple[click.Command, click.Context | None]:
    """The command an example runs and its parsed context (None when an eager option such as
    ``--list-systems`` answered while parsing, exit 0); click's usage errors propagate."""
    cmd: click.Command = main
    try:
        ctx = main.make_context("imagekit", list(args))
        while isinstance(cmd, click.Group):
            rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
            name, cmd, rest = cmd.resolve_command(ctx, rest)
            ctx = cmd.make_context(name, rest, parent=ctx)
    except click.exceptions.Exit as done:
        assert done.exit_code == 0, args
        return cmd, None
    return cmd, ctx


def _stack_refs(cmd: click.Command, params: dict) -> list[str]:
    """What the example names as a stack (a name, a variant's name or a file), by command."""
    if not params:
        return []
    if cmd.name in ("render", "build", "show"):
        return [params["stack"]]
    if cmd.name == "check" and params.get("image"):   # check STACK --image REF
        return [params["ref"]]
    if cmd.name == "stacks":
        return list(params["refs"])
    return []


@functools.lru_cache(maxsize=None)
def _stack_images() -> frozenset[str]:
    """The ``NAME`` of every ``imagekit/NAME`` image a shipped stack (or variant) builds."""
    return frozenset(one.image.split(":")[0].removeprefix("imagekit/")
                     for path in stack.shipped() for one in stack.load_all(path))


def test_examples_were_found_for_the_commands_that_take_stacks():
    commands = {path for path, _ in EXAMPLES}
    assert {"imagekit", "render", "build", "show", "check", "stacks", "export", "launch slurm"} <= commands
    assert len(EXAMPLES) > 50
    assert {p for p, _ in DRY_RUNS} == {"imagekit", "launch", "launch slurm", "launch mpirun"}


@pytest.mark.parametrize("path, args", EXAMPLES, ids=[" ".join(a)[:80] for _, a in EXAMPLES])
def test_each_example_parses_and_names_what_exists(monkeypatch, path, args):
    monkeypatch.chdir(REPO)   # the examples' stacks/*.yaml are relative to the checkout
    cmd, ctx = _leaf(args)
    params = ctx.params if ctx is not None else {}
    platforms = [p for v in (params.get("platform"), *(params.get("platform_list") or ())) if v
                 for p in v.split(",")] or [None]
    for ref in _stack_refs(cmd, params):
        for platform in platforms:
            loaded = stack.load(ref, params.get("variant"), platform=platform)
            assert loaded.name, ref
    for word in args:
        m = _IMAGE.match(word)
        if m:
            assert m.group(1) in _stack_images(), f"{word}: no shipped stack builds imagekit/{m.group(1)}"


def _has_dry_run(args: list[str]) -> bool:
    try:
        cmd, _ctx = _leaf(args)
    except click.ClickException:
        return False      # the test above reports it
    return any(p.name == "dry_run" for p in cmd.params)


# --validate judges a job's output, so it refuses --dry-run by design: those examples are only parsed.
DRY_RUNS = [(p, a) for p, a in EXAMPLES if "--validate" not in a and _has_dry_run(a)]


@pytest.mark.parametrize("path, args", DRY_RUNS, ids=[" ".join(a)[:80] for _, a in DRY_RUNS])
def test_each_example_of_a_command_with_dry_run_runs_dry(monkeypatch, tmp_path, path, args):
    monkeypatch.chdir(tmp_path)   # -o FILE examples write here
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    # Last, before the container's command: it wins over an example's --submit.
    at = args.index("--") if "--" in args else len(args)
    result = CliRunner().invoke(main, [*args[:at], "--dry-run", *args[at:]])
    assert result.exit_code == 0, result.output
