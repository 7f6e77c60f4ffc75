"""The stack commands (show, render) and the CLI's help and start-up.

Bad input goes through the real click group (CliRunner on imagekit.cli.main),
and a few cases through a real `imagekit` subprocess: one error line located
at file:line: key:, a fix line, exit code 2, and no file written with -o.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit import cli
from imagekit import render as render_mod
from imagekit import stack as stack_mod
from helpers.stack_helpers import CUDA, DEBIAN, line_of, write

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
GOLDEN = REPO / "tests" / "golden"


@pytest.fixture(autouse=True)
def shipped_stacks(monkeypatch):
    monkeypatch.setenv("IMAGEKIT_STACKS", str(STACKS))


def invoke(*args: str):
    result = CliRunner().invoke(cli.main, list(args), prog_name="imagekit")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def imagekit_exe() -> list[str]:
    exe = shutil.which("imagekit") or str(Path(sys.executable).with_name("imagekit"))
    return [exe]


# -- bad input ------------------------------------------------------------

BAD = {
    "malformed": (DEBIAN + "components:\n  sshd: {source: distro\n", "sshd:", None,
                  "malformed YAML: expected ',' or '}'"),
    "unknown-key": (DEBIAN + "components:\n  openmpi:\n    source: distro\n    verison: '4.1.4'\n", "verison",
                    "components.openmpi.verison", "unknown key\n  fix: did you mean 'version'?"),
    "float-version": (CUDA + "components:\n  cuda:\n    version: 12.4\n", "version: 12.4",
                      "components.cuda.version", 'got the number 12.4\n  fix: quote it: version: "12.4"'),
    "unknown-component": (DEBIAN + "components:\n  opnempi: {source: distro}\n", "opnempi",
                          "components.opnempi", "unknown key\n  fix: did you mean 'openmpi'?"),
    "missing-distro": ("name: t\nbase:\n  image: imagekit/debian:bookworm\n", "image:", "base",
                       "missing required key 'distro'\n  fix: add `distro:`"),
    "impossible": (DEBIAN + "components:\n  ucx: {source: distro, ofed: false}\n  openmpi:\n    source: distro\n"
                   "    cuda: true\n", "cuda: true", "components.openmpi.cuda",
                   "the distro's OpenMPI is not CUDA-aware\n  fix: use `source: upstream`"),
    "missing-need": (DEBIAN + "components:\n  openmpi: {source: distro, pmix: true, ucx: false}\n", "pmix: true",
                     "components.openmpi.pmix", "needs the `pmix` component (an external PMIx matching the site's Slurm)\n"
                     "  fix: add `pmix` to components, or set `pmix: false` on openmpi"),
    # yamlpos reports duplicates while parsing, before it knows the key's dotted path.
    "duplicate-key": (DEBIAN + "components:\n  sshd: {}\n  sshd: {}\n", "sshd: {}\n  sshd", "sshd",
                      "duplicate key (first written at line 6)"),
}


def expected_line(path: Path, needle: str) -> int:
    if needle == "sshd: {}\n  sshd":  # the second of two identical lines
        return line_of(path, "sshd") + 1
    return line_of(path, needle)


def check_error(stderr: str, path: Path, needle: str, key: str | None, message: str) -> None:
    lines = stderr.rstrip("\n").split("\n")
    prefix = f"imagekit: error: {path}:{expected_line(path, needle)}: " + (f"{key}: " if key else "")
    assert lines[0].startswith(prefix), stderr
    assert message in stderr, stderr
    assert len(lines) <= 2, f"more than an error line and a fix line: {stderr!r}"
    if len(lines) == 2:
        assert lines[1].startswith("  fix: ")
    assert "Traceback" not in stderr


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("command", ["render", "show"])
def test_bad_input_cli(tmp_path, case, command):
    text, needle, key, message = BAD[case]
    path = write(tmp_path / "in", text, "bad.yaml")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = [command, str(path)] + (["-o", str(out_dir / "Dockerfile")] if command == "render" else [])
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    check_error(result.stderr, path, needle, key, message)
    assert list(out_dir.iterdir()) == [], "an output or temporary file was left behind"


@pytest.mark.parametrize("case", ["malformed", "float-version", "unknown-component", "impossible"])
def test_bad_input_real_subprocess(tmp_path, case):
    text, needle, key, message = BAD[case]
    path = write(tmp_path, text, "bad.yaml")
    out = tmp_path / "Dockerfile"
    proc = subprocess.run([*imagekit_exe(), "render", str(path), "-o", str(out)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    check_error(proc.stderr, path, needle, key, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_unknown_stack_name(tmp_path):
    result = invoke("render", "debian-mpj", "-o", str(tmp_path / "D"))
    assert result.exit_code == 2
    # The stack's name, and no placeholder for a file there is none of (review 4 E6: `<stack>: unknown ...`).
    assert result.stderr.startswith("imagekit: error: unknown stack 'debian-mpj'")
    assert "did you mean 'debian-mpi'?" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_matrix_stack_without_variant():
    result = invoke("render", "nccl-tests")
    assert result.exit_code == 2
    assert "2 matrix variants; choose one" in result.stderr and "--variant" in result.stderr


def test_bad_format_is_a_usage_error():
    result = invoke("render", "debian-mpi", "--format", "podman")
    assert result.exit_code == 2 and "Invalid value for '--format'" in result.stderr


# -- render ---------------------------------------------------------------

def test_render_stdout_matches_golden():
    result = invoke("render", "debian-mpi")
    assert result.exit_code == 0
    assert result.stdout == (GOLDEN / "debian-mpi.docker").read_text()


def test_render_variant_singularity_by_variant_name(monkeypatch):
    monkeypatch.delenv("IMAGEKIT_SITE", raising=False)  # the goldens are the recipes as shipped
    result = invoke("render", "nccl-tests-cu129-sbsa", "--format", "singularity")
    assert result.exit_code == 0
    assert result.stdout == (GOLDEN / "nccl-tests-cu129-sbsa.singularity").read_text()
    short = invoke("render", "nccl-tests", "--variant", "cu129-sbsa", "--format", "singularity")
    assert short.stdout == result.stdout


def test_render_single_stage():
    result = invoke("render", "pytorch", "--single-stage")
    assert result.exit_code == 0
    assert "AS runtime" not in result.stdout and result.stdout.count("FROM ") == 1
    assert result.stdout == render_mod.render(stack_mod.load("pytorch"), "docker", single_stage=True)


def test_render_output_file(tmp_path):
    out = tmp_path / "sub" / "Dockerfile"
    result = invoke("render", "debian-mpi", "-o", str(out))
    assert result.exit_code == 0
    assert result.stdout == "" and result.stderr == f"wrote {out}\n"
    assert out.read_text() == (GOLDEN / "debian-mpi.docker").read_text()
    assert sorted(p.name for p in out.parent.iterdir()) == ["Dockerfile"]
    assert (out.stat().st_mode & 0o777) == 0o644


def test_render_output_is_atomic_on_failure(tmp_path, monkeypatch):
    # A write that fails half-way (disk full, Ctrl-C) keeps the previous file and leaves no temporary.
    out = tmp_path / "Dockerfile"
    out.write_text("previous\n")
    real_write = Path.write_bytes

    def failing_write(self, data, *a, **kw):
        real_write(self, data[:100], *a, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_bytes", failing_write)
    result = CliRunner().invoke(cli.main, ["render", "debian-mpi", "-o", str(out)])
    monkeypatch.undo()
    assert result.exit_code != 0
    assert out.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["Dockerfile"]


def test_render_output_replaces_a_symlinked_target_not_its_target(tmp_path):
    real = tmp_path / "real"
    real.write_text("keep\n")
    link = tmp_path / "Dockerfile"
    link.symlink_to(real)
    assert invoke("render", "debian-mpi", "-o", str(link)).exit_code == 0
    assert not link.is_symlink() and link.read_text().startswith("# imagekit ")
    assert real.read_text() == "keep\n"


# -- show -----------------------------------------------

def test_show_json():
    result = invoke("show", "nccl-tests-cu129-sbsa", "--json")
    assert result.exit_code == 0
    info = json.loads(result.stdout)
    assert info["name"] == "nccl-tests-cu129-sbsa" and info["stack"] == "nccl-tests"
    assert info["variant"] == {"cuda": "cu129", "arch": "sbsa"}
    assert info["base"] == {"image": "nvidia/cuda:12.9.1-devel-ubuntu22.04",
                            "runtime": "nvidia/cuda:12.9.1-base-ubuntu22.04", "distro": "ubuntu22",
                            "arch": "aarch64"}
    assert info["tags"] == ["registry.example.org/hpc/nccl-tests:2.19.6-cu129-sbsa"]
    assert info["image"] == "imagekit/nccl-tests-cu129-sbsa:latest"
    comps = {c["name"]: c for c in info["components"]}
    assert list(comps) == ["cuda", "ofed", "gdrcopy", "ucx", "pmix", "openmpi", "nccl", "nccl-tests", "nvbandwidth"]
    assert comps["cuda"] == {"name": "cuda", "version": "12.9.1", "source": "base", "arch_list": None}
    assert comps["openmpi"]["pmix"] is True and comps["openmpi"]["version"] == "5.0.10"
    assert comps["nccl"]["source"] == "repo"
    assert comps["nccl-tests"]["version"] == "2.19.6"
    assert "sha256" not in comps["openmpi"], "imagekit's own pin is not repeated as a stack option"


def test_show_text():
    result = invoke("show", "debian-mpi")
    assert result.exit_code == 0
    assert "base     imagekit/debian:bookworm  [debian12, x86_64]" in result.stdout
    assert "runtime " not in result.stdout  # same as the devel image: not repeated
    assert any(l.split()[:3] == ["openmpi", "4.1.4", "distro"] for l in result.stdout.splitlines())


# -- help and start-up ----------------------------------------------------

def test_group_help_has_examples():
    result = invoke("--help")
    assert result.exit_code == 0 and "imagekit render" in result.stdout
    assert "Example" in result.stdout or "imagekit render stacks/" in result.stdout


def all_commands() -> list[tuple[str, ...]]:
    """Every registered command, and the subcommands of groups (e.g. `launch slurm`)."""
    import click

    out = []
    for name, target in sorted(cli.COMMANDS.items()):
        module_name, attr = target.split(":")
        command = getattr(importlib.import_module(module_name), attr)  # every registered command must exist
        out.append((name,))
        if isinstance(command, click.Group):
            out += [(name, sub) for sub in sorted(command.commands)]
    return out


# The `launch` group's help shows example command lines but no "Example" heading
# (src/imagekit/cli/launch_cmds.py is not ours to edit; reported to the lead).
@pytest.mark.parametrize("words", all_commands(), ids=" ".join)
def test_every_command_help_shows_an_example(words):
    result = invoke(*words, "--help")
    assert result.exit_code == 0, result.output
    assert "Example" in result.stdout, f"`imagekit {' '.join(words)} --help` shows no example"
    assert f"imagekit {' '.join(words)}" in result.stdout.split("Example", 1)[1]


def test_every_registered_command_module_exists():
    for name, target in cli.COMMANDS.items():
        module_name, attr = target.split(":")
        assert hasattr(importlib.import_module(module_name), attr), f"{name}: {target} is missing"


def test_help_does_not_import_heavy_libraries():
    code = ("import sys\nfrom imagekit.cli import main\n"
            "try:\n    main(['--help'], prog_name='imagekit')\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('hpccm', 'yaml', 'docker', 'testinfra', 'spython', 'requests')"
            " if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_console_script_is_installed():
    assert os.access(imagekit_exe()[0], os.X_OK)


def test_show_json_lists_every_check_the_image_gets():
    info = json.loads(invoke("show", "debian-mpi", "--json").output)
    ids = [c["id"] for c in info["checks"]]
    assert "stack.mpi4py-ring" in ids and "openmpi.ring" in ids and "image.no_build_secrets" in ids
    assert all({"id", "kind", "describe"} <= set(c) for c in info["checks"])
    assert info["packages"] == {"runtime": [], "devel": []}


def test_show_diff_parent_names_what_the_child_changed(tmp_path):
    child = write(tmp_path, """\
        name: site-mpi
        extends: debian-mpi
        packages: {runtime: [htop]}
        components:
          python: {packages: [numpy, {remove: mpi4py}]}
        checks:
          - remove: mpi4py-ring
          - {name: h5, file: /usr/bin/htop}
        """)
    result = invoke("show", str(child), "--diff-parent", "--json")
    assert result.exit_code == 0, result.output
    diff = json.loads(result.output)
    assert diff["parent"].endswith("debian-mpi.yaml")
    changes = {(c["op"], c["key"], c.get("item")) for c in diff["changes"]}
    assert {("-", "checks", "mpi4py-ring"), ("+", "checks", "h5"), ("-", "components.python.packages", "mpi4py"),
            ("+", "components.python.packages", "numpy"), ("+", "packages", None), ("~", "name", None)} == changes
    text = invoke("show", str(child), "--diff-parent").output
    assert "  - checks: mpi4py-ring\n" in text and "  ~ name: debian-mpi -> site-mpi\n" in text
    alone = invoke("show", "debian-mpi", "--diff-parent")
    assert alone.exit_code == 2 and "extends no stack" in alone.output
