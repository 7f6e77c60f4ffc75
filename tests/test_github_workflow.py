"""The GitHub Actions workflow: schema-valid, free of security findings, and using only real commands.

Linted with real linters from PyPI: check-jsonschema (GitHub's workflow schema,
bundled, offline) for correctness and zizmor (offline audits) for security.
Each linter is also shown failing on a broken copy, so these tests can fail.
"""

import json
import os
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import click
import yaml

from imagekit import sources
from imagekit.util import settings
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
    injection.write_text(text.replace('run: imagekit check "$IMAGE" --junit "checks-$ID.xml"',
                                      'run: echo "${{ github.event.pull_request.title }}"'))
    assert injection.read_text() != text
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


def test_a_row_named_alone_is_judged_by_the_catalogue_model_that_lists_it():
    """J7: ROW alone in IMAGEKIT_VALIDATE takes the model whose `stacks:` lists the row: the x86 CUDA images
    on an H100 model, the Grace rows on GB200 NVL72, the V100 image on DGX-1; every model's `stacks:` names
    rows that exist; each leg's GPU runner carries its model's name."""
    from imagekit.validate import system

    named = "nccl-tests-volta nccl-tests-cu129-sbsa debian-cuda debian-cuda-arm64"
    rows = json.loads(subprocess.run([sys.executable, "-m", "imagekit", "matrix", "--json"], capture_output=True,
                                     text=True, check=True, env={**os.environ, "IMAGEKIT_VALIDATE": named}).stdout)
    by_id = {r["id"]: r for r in rows}
    assert {i: by_id[i]["system"] for i in named.split()} == {
        "nccl-tests-volta": "dgx-1v", "nccl-tests-cu129-sbsa": "gb200-nvl72", "debian-cuda": "dgx-h100",
        "debian-cuda-arm64": "gb200-nvl72"}
    assert all(by_id[i]["system"] in by_id[i]["gpu_runner"] for i in named.split())
    assert not any(r["system"] for i, r in by_id.items() if i not in named.split()), "only the rows named"
    for name in system.available():
        for ref in system.load(name).stacks:
            assert ref in by_id, f"{name} lists {ref}, which is no matrix row"


def test_validate_runs_the_rows_the_site_names_on_their_own_system_across_nodes():
    """Validation is optional per row: the matrix's `system` key (IMAGEKIT_VALIDATE, ROW=SYSTEM) picks the
    rows and each leg's model; runners of the row's arch; gated on IB and the model's band, never a floor."""
    doc = yaml.safe_load(WORKFLOW.read_text())
    validate = doc["jobs"]["validate"]
    assert validate["strategy"]["matrix"]["include"] == "${{ fromJSON(needs.matrix.outputs.validate) }}"
    assert "needs.matrix.outputs.validate != '[]'" in validate["if"]
    assert validate["runs-on"] == "${{ matrix.gpu_runner }}"
    env = validate["env"]
    # Each leg its own system model (the matrix row's), no shared one and no hand-set floor; the runner
    # is one labelled with that model, so the V100 image runs on a V100 (fourth CUDA review, J7).
    assert env["SYSTEM"] == "${{ matrix.system }}" and "MIN_BUSBW" not in env
    assert validate["runs-on"] == "${{ matrix.gpu_runner }}" and "VALIDATE_SYSTEM" not in WORKFLOW.read_text()
    assert int(re.search(r"\|\| '(\d+)'", env["NODES"]).group(1)) >= 2
    script = "\n".join(_run_blocks({"jobs": {"validate": validate}}))
    assert 'test -n "$SYSTEM"' in script and 'test "$NODES" -ge 2' in script
    assert re.search(r'srun [^\n]*-N "\$NODES"', script.replace("\\\n", " "))
    assert "NCCL_DEBUG=INFO" in script  # the transport gate needs the channel lines
    validate_calls = [c for c in _imagekit_calls(script) if c[0] == "validate" and "--system" in c]
    assert len(validate_calls) == 1
    call = validate_calls[0]
    # IB unless the site says otherwise (vars.VALIDATE_TRANSPORT: P2P inside one NVL72 rack).
    assert call[call.index("--expect-transport") + 1] == "$TRANSPORT" and env["TRANSPORT"].endswith("|| 'IB' }}")
    assert call[call.index("--system") + 1] == "$SYSTEM"
    assert int(call[call.index("--min-runs") + 1]) >= 2  # a repeatable result, not one lucky run
    assert "--min-busbw" not in call
    # The matrix gives each named row its system and its arch's GPU runner, and no other row a leg.
    matrix_env = doc["jobs"]["matrix"]["env"]
    assert matrix_env["IMAGEKIT_VALIDATE"] == "${{ inputs.validate || vars.IMAGEKIT_VALIDATE }}"
    rows = json.loads(subprocess.run(["imagekit", "matrix", "debian-mpi", "--json"], capture_output=True, text=True,
                                     check=True, cwd=WORKFLOW.parents[2],
                                     env={**os.environ, "IMAGEKIT_VALIDATE": "debian-mpi-arm64=gb200-nvl72",
                                          "IMAGEKIT_GPU_RUNNERS": "aarch64=self-hosted,gpu,ARM64"}).stdout)
    assert {r["id"]: (r["system"], r["gpu_runner"]) for r in rows} == {
        "debian-mpi": ("", ["gpu", "x86_64"]), "debian-mpi-arm64": ("gb200-nvl72", ["self-hosted", "gpu", "ARM64", "gb200-nvl72"])}


def test_validate_jobs_system_gate_fails_a_single_node_run_and_passes_two(tmp_path):
    """What the job runs, on generated output: 2 nodes at the band pass; the same output from one node
    fails (no IB path to prove), as does a socket fallback."""
    from click.testing import CliRunner
    from helpers.validate_gen import Spec, nccl_log, nccl_tests_output

    def run(hosts: tuple, transport: str) -> int:
        logs = []
        for i in range(3):
            text, _ = nccl_tests_output(Spec(style="new", hosts=hosts, check=False, peak_busbw=372 + i))
            path = tmp_path / f"{len(hosts)}-{transport}-{i}.log"
            path.write_text(text + nccl_log(transport, hosts=hosts, gpus=8, env_algo="Ring"))
            logs.append(str(path))
        res = CliRunner().invoke(main, ["validate", *logs, "--system", "dgx-h100", "--expect-transport", "IB",
                                        "--min-runs", "3", "--json"])
        return res.exit_code

    assert run(("n1", "n2"), "GDRDMA") == 0
    assert run(("n1",), "P2P") == 9
    assert run(("n1", "n2"), "Socket") == 9


def test_the_site_sets_registry_stacks_and_mirror_as_inputs_or_variables():
    """A manual run's input wins over the repository/organisation variable; both unset, no default host."""
    doc = yaml.safe_load(WORKFLOW.read_text())
    # PyYAML reads the key `on` as True.
    inputs = (doc.get("on") or doc[True])["workflow_dispatch"]["inputs"]
    assert {"registry", "stacks_dir", "stacks", "platforms", "runners", "validate", "mirror"} <= set(inputs)
    matrix_env = doc["jobs"]["matrix"]["env"]
    for name, var in (("stacks", "IMAGEKIT_BUILD_STACKS"), ("platforms", "IMAGEKIT_PLATFORMS"),
                      ("validate", "IMAGEKIT_VALIDATE")):
        assert matrix_env[var] == f"${{{{ inputs.{name} || vars.{var} }}}}"
    # Build runners come from the site's labels (default: GitHub's hosted ones), row by row.
    assert matrix_env["IMAGEKIT_RUNNERS"].startswith("${{ inputs.runners || vars.IMAGEKIT_RUNNERS || ")
    assert doc["jobs"]["build"]["runs-on"] == "${{ matrix.runner }}"
    assert all(i["type"] == "string" and i["default"] == "" for i in inputs.values())
    env = doc["env"]
    assert env["REGISTRY"] == "${{ inputs.registry || vars.IMAGEKIT_REGISTRY }}"
    assert env[settings.STACKS_PATH_ENV] == "${{ inputs.stacks_dir || vars.IMAGEKIT_STACKS_DIR }}"
    assert env[sources.MIRROR_ENV] == "${{ inputs.mirror || vars.IMAGEKIT_MIRROR }}"
    assert env[sources.SITE_ENV] == "${{ vars.IMAGEKIT_SITE }}"  # the mirror's own pins, when not upstream's


def test_no_registry_host_is_written_in_the_workflow():
    text = WORKFLOW.read_text()
    code = "\n".join(line.split("#")[0] for line in text.splitlines())
    # A host is a dotted name or host:port before a slash, outside comments and expressions.
    hosts = re.findall(r"(?<![\w$.{-])((?:[a-z0-9-]+\.)+[a-z]{2,}|[a-z0-9.-]+:\d+)/", code)
    assert hosts == [], hosts
    doc = yaml.safe_load(text)
    # Every reference pushed to is under $REGISTRY, and nothing is pushed or logged in without one.
    for name in ("build", "index"):
        for step in doc["jobs"][name]["steps"]:
            run = step.get("run", "")
            for call in _imagekit_calls(run):
                if call[0] == "push":
                    to = call[call.index("--to") + 1]
                    assert to.startswith("$REGISTRY/") or (to.startswith("$repo:") and 'repo="$REGISTRY/' in run), call
            if "docker login" in run or any(c[0] == "push" for c in _imagekit_calls(run)):
                assert "REGISTRY" in (step.get("if", "") + doc["jobs"][name].get("if", "")), step


def test_matrix_with_a_site_stack_directory_lists_its_stacks_by_relative_path(tmp_path):
    """What the matrix job runs with IMAGEKIT_STACKS_PATH set to a directory of the checkout."""
    site = tmp_path / "site-stacks"
    site.mkdir()
    (site / "site-mpi.yaml").write_text("name: site-mpi\nextends: debian-mpi\n")
    env = {**os.environ, settings.STACKS_PATH_ENV: "site-stacks"}
    rows = json.loads(subprocess.run(["imagekit", "matrix", "--json"], capture_output=True, text=True, check=True,
                                     cwd=tmp_path, env=env).stdout)
    site_rows = [r for r in rows if r["stack"] == "site-mpi"]
    assert site_rows and all(r["file"] == "site-stacks/site-mpi.yaml" for r in site_rows)


def test_validate_runs_every_variant_and_a_failed_leg_skips_no_other():
    """Review 3 H8: the GPU job ran for nccl-tests only, and `needs` without always() let one failed build
    leg skip every validation. Each leg now runs what its image carries, chosen from its own report."""
    validate = yaml.safe_load(WORKFLOW.read_text())["jobs"]["validate"]
    assert validate["if"].startswith("always()") and "needs.matrix.result == 'success'" in validate["if"]
    text = yaml.dump(validate)
    assert "matrix.stack ==" not in text
    conditions = {s.get("name"): s.get("if", "") for s in validate["steps"] if s.get("name")}
    assert any("outputs.nccl_tests" in c for c in conditions.values())
    assert any("outputs.cuda_mpi" in c for c in conditions.values())
    assert any("outputs.pytorch" in c for c in conditions.values())
    carries = runpy.run_path(str(WORKFLOW.parents[2] / "scripts" / "image_carries.py"))["carries"]

    report = {"components": [{"name": "openmpi", "facts": {"cuda": "true"}}, {"name": "nccl-tests", "facts": {}}]}
    assert carries(report) == {"nccl_tests": True, "cuda_mpi": True, "pytorch": False}
    assert carries({"components": [{"name": "pytorch", "facts": {}}]}) == {"nccl_tests": False, "cuda_mpi": False,
                                                                          "pytorch": True}


def test_every_variable_a_run_step_reads_is_set_for_its_job():
    """A `$NAME` in a step's script that neither the workflow, its job, the step nor the script itself
    sets is empty when it runs (the validate job once read `$VARIANT`, which only the build job sets)."""
    doc = yaml.safe_load(WORKFLOW.read_text())
    workflow_env = set(doc.get("env") or {})
    unset = []
    for job_name, job in doc["jobs"].items():
        job_env = workflow_env | set(job.get("env") or {})
        for step in job.get("steps", []):
            script = step.get("run", "")
            if not script:
                continue
            code = "\n".join(line.split(" #")[0] for line in script.splitlines() if not line.lstrip().startswith("#"))
            assigned = set(re.findall(r"(?:^|[\s;(])(?:export\s+|local\s+)?([A-Za-z_][A-Za-z0-9_]*)=", code))
            assigned |= set(re.findall(r"\b(?:for|read(?:\s+-\w+)*)\s+([A-Za-z_][A-Za-z0-9_]*)", code))
            known = job_env | set(step.get("env") or {}) | assigned
            for name in re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", code):
                if name not in known and not name.startswith(("GITHUB_", "RUNNER_")) and name not in {"PATH", "HOME", "PWD"}:
                    unset.append(f"{job_name}/{step.get('name', '?')}: ${name}")
    assert not unset, unset
