"""The GitHub Actions workflow: schema-valid, free of security findings, and using only real commands.

Linted with real linters from PyPI: check-jsonschema (GitHub's workflow schema,
bundled, offline) for correctness and zizmor (offline audits) for security.
Each linter is also shown failing on a broken copy, so these tests can fail.
"""

import json
import re
import shlex
import subprocess
from pathlib import Path

import click
import yaml

from imagekit.cli import COMMANDS, main

WORKFLOW = Path(__file__).resolve().parents[1] / ".github/workflows/build.yml"


def _schema_lint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["check-jsonschema", "--builtin-schema", "vendor.github-workflows", str(path)],
                          capture_output=True, text=True)


def _zizmor(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["zizmor", "--offline", "--no-progress", str(path)], capture_output=True, text=True)


def test_workflow_matches_githubs_schema():
    result = _schema_lint(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


def test_workflow_has_no_security_findings():
    result = _zizmor(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


def test_linters_catch_broken_workflows(tmp_path):
    text = WORKFLOW.read_text()
    bad_schema = tmp_path / "schema.yml"
    bad_schema.write_text(text.replace("runs-on: ubuntu-24.04\n    outputs:", "runs_on: ubuntu-24.04\n    outputs:"))
    assert _schema_lint(bad_schema).returncode != 0
    injection = tmp_path / "inject.yml"
    injection.write_text(text.replace('run: echo "include=$(imagekit matrix --json)" >> "$GITHUB_OUTPUT"',
                                      'run: echo "${{ github.event.pull_request.title }}"'))
    assert _zizmor(injection).returncode != 0


def _run_blocks(doc: dict) -> list[str]:
    blocks = []
    for job in doc["jobs"].values():
        blocks += [step["run"] for step in job.get("steps", []) if "run" in step]
    return blocks


def _imagekit_calls(script: str) -> list[list[str]]:
    """Each `imagekit ...` command line in a shell script, $(...) substitutions included."""
    calls = []
    for line in script.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        command: list[str] = []
        for token in list(lexer) + [";"]:
            if token and set(token) <= set("|;&<>()"):
                if "imagekit" in command:
                    calls.append(command[command.index("imagekit") + 1:])
                command = []
                continue
            command.append(token)
            for inner in re.findall(r"\$\(([^)]*)\)", token):
                calls += _imagekit_calls(inner)
    return calls


def test_every_imagekit_call_uses_a_real_command_and_real_options():
    doc = yaml.safe_load(WORKFLOW.read_text())
    calls = [c for block in _run_blocks(doc) for c in _imagekit_calls(block)]
    assert len(calls) >= 8
    ctx = click.Context(main)
    for call in calls:
        assert call[0] in COMMANDS, f"workflow calls unknown `imagekit {call[0]}`"
        command = main.get_command(ctx, call[0])
        known = {opt for p in command.params for opt in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])}
        for word in call[1:]:
            if word.startswith("--"):
                assert word.split("=")[0] in known, f"`imagekit {call[0]}` has no option {word}"


def test_workflow_consumes_imagekit_matrix_json():
    doc = yaml.safe_load(WORKFLOW.read_text())
    matrix_job = doc["jobs"]["matrix"]
    assert any("imagekit matrix --json" in s.get("run", "") for s in matrix_job["steps"])
    rows = json.loads(subprocess.run(["imagekit", "matrix", "--json"], capture_output=True, text=True,
                                     check=True, cwd=WORKFLOW.parents[2]).stdout)
    used = set(re.findall(r"(?<![\w.])matrix\.(\w+)", WORKFLOW.read_text()))
    for row in rows:
        assert used <= set(row), f"workflow reads matrix keys {used - set(row)} that imagekit matrix lacks"
        assert not Path(row["file"]).is_absolute(), "paths must work in the runner's checkout"
    assert {r["arch"] for r in rows} == {"x86_64", "aarch64"}
