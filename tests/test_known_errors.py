"""Every error of the catalogue (imagekit.util.known_errors, docs/errors.md) made to happen for real, as a
site meets it: through the `imagekit` command, with its one `error:` line naming the file, reference or
option, its `fix:` line, its exit code, and nothing left half-written. A catalogue entry with no test
here fails the last test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.sif_files import tiny_sif
from helpers.users import ALICE, other_python, setpriv  # noqa: F401  (other_python is a fixture)
from imagekit.util import known_errors
from imagekit.util.known_errors import CATALOGUE

COVERED: set[str] = set()


def covers(known: known_errors.Known):
    """Mark a test as the one that makes ``known`` happen."""
    COVERED.add(known.id)
    return lambda test: test


def imagekit(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})})


def assert_one_error(proc: subprocess.CompletedProcess, known: known_errors.Known, *names: str) -> str:
    """The entry's one error line (naming each of ``names``) and its fix line, and its exit code."""
    lines = proc.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("imagekit: error: ")]
    assert len(errors) == 1, proc.stderr
    message, fix = known.text(**{k: _HOLE for k in _fields(known)})
    for part in message.split("\0"):
        assert part in errors[0], (part, errors[0])
    assert lines[lines.index(errors[0]) + 1].startswith("  fix: " + fix.split("\0")[0]), proc.stderr
    for name in names:
        assert name in errors[0], (name, errors[0])
    assert proc.returncode == known.exit_code, proc.stderr
    return errors[0]


class _Hole:
    """A field's place in a template, however it is formatted ({x}, {x!r})."""

    def __repr__(self) -> str:
        return "\0"

    __str__ = __repr__


_HOLE = _Hole()


def _fields(known: known_errors.Known) -> set[str]:
    import string

    return {f for text in (known.message, known.fix) for _, f, _, _ in string.Formatter().parse(text) if f}


def _squashfs(tmp_path: Path) -> Path:
    """A real Enroot-shaped squashfs: /etc/rc with a label comment, /etc/environment, some bulk."""
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc/rc").write_text("# io.imagekit.stack site-mpi\n\nexec /bin/sh\n")
    (root / "etc/environment").write_text("PATH=/usr/bin:/bin\n")
    (root / "bulk").write_bytes(os.urandom(2 << 20))
    out = tmp_path / "site-mpi.sqsh"
    subprocess.run(["mksquashfs", str(root), str(out), "-quiet", "-no-progress", "-all-root"], check=True)
    return out


@covers(known_errors.DAMAGED_SQUASHFS)
@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_a_truncated_or_corrupt_sqsh_is_called_so_by_report_check_and_preflight(tmp_path, damage):
    """Review 4 E9: a .sqsh cut to its first quarter; `report` printed `None` three times and exited 0."""
    good = _squashfs(tmp_path)
    assert imagekit("report", str(good), "--json").returncode == 0
    data = good.read_bytes()
    bad = tmp_path / "trunc.sqsh"
    bad.write_bytes(data[:len(data) // 4] if damage == "truncated" else os.urandom(4) + data[4:])
    for command in ("report", "check", "preflight"):
        line = assert_one_error(imagekit(command, str(bad)), known_errors.DAMAGED_SQUASHFS, str(bad))
        assert ("truncated:" if damage == "truncated" else "not a squashfs") in line


@covers(known_errors.DAMAGED_SIF)
def test_a_truncated_sif_is_called_so(tmp_path):
    sif = tiny_sif(tmp_path)
    data = sif.read_bytes()
    sif.write_bytes(data[:len(data) - 4096])
    for command in ("report", "preflight"):
        line = assert_one_error(imagekit(command, str(sif)), known_errors.DAMAGED_SIF, str(sif))
        assert "truncated:" in line


@covers(known_errors.EXPORT_FROM_FILE)
@pytest.mark.parametrize("engine", ["answers", "none"])
def test_a_sqsh_given_to_export_is_not_looked_up_as_an_engine_image(tmp_path, engine):
    """Review 4 E9b: `.sqsh` -> SIF said "not found in the local engine" (or "no Docker engine answers")."""
    sqsh = _squashfs(tmp_path)
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no.sock"} if engine == "none" else {}
    proc = imagekit("export", str(sqsh), "--to", "sif", "-o", str(tmp_path / "out.sif"), env=env)
    line = assert_one_error(proc, known_errors.EXPORT_FROM_FILE, str(sqsh))
    assert "Enroot squashfs" in line and "--to sif" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rootfs", "site-mpi.sqsh"]   # nothing written


@covers(known_errors.PINS_FILE_AS_STACK)
def test_a_pins_file_named_as_a_stack(tmp_path):
    pins = tmp_path / "site-pins.yaml"
    pins.write_text('pins:\n  ucx: {"1.18.1": "' + "c" * 64 + '"}\n')
    assert_one_error(imagekit("render", str(pins), "-o", str(tmp_path / "Dockerfile")),
                     known_errors.PINS_FILE_AS_STACK, f"{pins}: ")
    assert not (tmp_path / "Dockerfile").exists()


def _shown_stack(tmp_path: Path, base: str, components: str) -> tuple[Path, subprocess.CompletedProcess]:
    stack = tmp_path / "s.yaml"
    stack.write_text(f"name: s\nbase: {base}\ncomponents:\n{components}")
    return stack, imagekit("show", str(stack))


@covers(known_errors.NOT_A_VERSION)
def test_a_version_that_is_none(tmp_path):
    stack, shown = _shown_stack(tmp_path, "{image: imagekit/debian:bookworm, distro: debian12}",
                                "  openmpi: {source: distro, version: 'four'}\n")
    line = assert_one_error(shown, known_errors.NOT_A_VERSION, f"{stack}:4: components.openmpi.version:")
    assert "'four'" in line


@covers(known_errors.WHEEL_VERSION_FROM_SOURCE)
def test_a_wheels_post_release_pinned_for_a_source_build(tmp_path):
    stack, shown = _shown_stack(tmp_path, "{image: nvidia/cuda:12.9.1-devel-ubuntu22.04, distro: ubuntu22}",
                                "  cuda: {}\n  nccl: {source: upstream, version: '2.26.2.post1'}\n")
    line = assert_one_error(shown, known_errors.WHEEL_VERSION_FROM_SOURCE, f"{stack}:5: components.nccl.version:")
    assert 'write "2.26.2" for source: upstream' in shown.stderr and "2.26.2.post1" in line


@covers(known_errors.ENGINE_DOWN)
def test_no_engine_at_docker_host(tmp_path):
    proc = imagekit("check", "imagekit/debian-mpi:latest", env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"})
    assert_one_error(proc, known_errors.ENGINE_DOWN, f"unix://{tmp_path}/no.sock")


@pytest.mark.engine
@covers(known_errors.ENGINE_NO_GROUP)
def test_a_user_outside_the_docker_group_is_pointed_to_podman(tmp_path, other_python):
    """Review 4 E10: the user was told to start the engine, which was running, and never about Podman."""
    proc = subprocess.run(setpriv(ALICE, [str(other_python.python), "-m", "imagekit", "check",
                                          "imagekit/debian-mpi:latest"]),
                          capture_output=True, text=True, cwd="/", env=other_python.env(HOME=str(tmp_path)))
    assert_one_error(proc, known_errors.ENGINE_NO_GROUP, "permission denied")
    assert "--engine podman" in proc.stderr and "start the Docker engine" not in proc.stderr


def test_every_catalogued_error_is_made_to_happen_here():
    assert COVERED == {k.id for k in CATALOGUE}, {k.id for k in CATALOGUE} - COVERED
    assert len({k.id for k in CATALOGUE}) == len(CATALOGUE)


def test_the_errors_page_lists_the_catalogue():
    text = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [k.id for k in CATALOGUE]
    for known, row in zip(CATALOGUE, rows):
        assert row.rstrip(" |").endswith(str(known.exit_code)), row


def test_report_json_of_a_good_sqsh_still_reads_its_labels(tmp_path):
    """The superblock check passes a whole file: its labels are read as before."""
    doc = json.loads(imagekit("report", str(_squashfs(tmp_path)), "--json").stdout)
    assert "site-mpi" in json.dumps(doc)
