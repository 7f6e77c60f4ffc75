"""Issue 22, F1, for real: an image's benchmark label under `launch mpirun` and `launch slurm --submit`
with the real Enroot, Pyxis and Slurm of the test cluster.

The label's environment holds ``BASH_ENV='$(touch CANARY)'``, which every bash on the host would run
had it become a host variable (the red team's reproducer: run.sh exported it, and rank.sh and
Enroot, both bash, ran it), beside a variable the benchmark prints. The benchmark runs (mpi4py's
ring test, judged by ``--validate``), prints the variable it got inside its container, and the
canary, a host path no container binds, never appears. Pyxis takes a container's variables from the
job's environment on the host, so there the same label is refused, naming the image and the label,
and an allow-listed variable alone goes through.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from imagekit.image_facts import BENCHMARK

pytestmark = [pytest.mark.engine, pytest.mark.slurm]

MARK = "from the label: $(x) `y` 'q'"
RING = "python3 -m mpi4py.bench ringtest -n 1024 -l 1000"
SHOW = ["sh", "-c", f'echo "mark=$NCCL_IK_MARK"; exec {RING}']


@pytest.fixture(scope="module")
def shared():
    """Root's exports and jobs, readable by Slurm's job user (pytest's tmp_path is root's, mode 700);
    its canary is a host path that no container binds (Enroot binds /tmp, not /var/tmp)."""
    path = Path(tempfile.mkdtemp(prefix="imagekit-image-env-", dir="/var/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _labelled_sqsh(mpi_image: str, docker_bin: str, shared: Path, name: str, env: dict[str, str]) -> Path:
    """debian-mpi with its benchmark label replaced (SHOW, ``env``), exported to a .sqsh."""
    from imagekit.export import ExportRequest, export_image

    tag = f"imagekit-test/bench-label-{name}:1"
    label = json.dumps({"command": SHOW, "env": env})
    proc = subprocess.run([docker_bin, "build", "-q", "-t", tag, "--label", f"{BENCHMARK}={label}", "-"],
                          input=f"FROM {mpi_image}\n", text=True, capture_output=True,
                          env={**os.environ, "DOCKER_BUILDKIT": "1"})
    assert proc.returncode == 0, proc.stderr
    out = Path(export_image(tag, ExportRequest("enroot"), shared / f"{name}.sqsh", store=False).path)
    os.chmod(out, 0o644)
    return out


@pytest.fixture(scope="module")
def hostile_sqsh(mpi_image, shared) -> Path:
    from imagekit.engines import docker as engine

    return _labelled_sqsh(mpi_image, engine.docker_cli(), shared, "hostile",
                          {"NCCL_IK_MARK": MARK, "BASH_ENV": f"$(touch {shared / 'canary'})"})


@pytest.fixture(scope="module")
def tuning_sqsh(mpi_image, shared) -> Path:
    from imagekit.engines import docker as engine

    return _labelled_sqsh(mpi_image, engine.docker_cli(), shared, "tuning", {"NCCL_IK_MARK": MARK})


def _imagekit(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", *argv], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def test_mpirun_enroot_runs_the_label_benchmark_with_its_env_in_the_container_only(hostile_sqsh, shared, tmp_path):
    """The red team's F1 reproducer: `launch mpirun --runtime enroot --validate`, no command."""
    proc = _imagekit("launch", "mpirun", "--runtime", "enroot", "--image", str(hostile_sqsh), "--hosts",
                     "localhost:2", "--validate", "--no-preflight", "--max-latency-us", "100000", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count(f"mark={MARK}\n") == 2 and "verdict: PASS" in out, out
    assert not (shared / "canary").exists(), "the image's BASH_ENV ran on the host"


def test_slurm_enroot_runs_the_label_benchmark_with_its_env_in_the_container_only(cluster, hostile_sqsh, shared):
    script = shared / "enroot.sbatch"
    proc = _imagekit("launch", "slurm", "--runtime", "enroot", "--image", str(hostile_sqsh), "-N", "1",
                     "--ntasks-per-node", "2", "--submit", "--validate", "--max-latency-us", "100000",
                     "-o", str(script), env={"SLURM_CONF": str(cluster.conf)}, cwd=shared)
    job_out = script.with_suffix(".out")
    out = proc.stdout + proc.stderr + (job_out.read_text(errors="replace") if job_out.exists() else "")
    assert proc.returncode == 0, out
    assert f"mark={MARK}\n" in out and "verdict: PASS" in out, out
    # In the script only as the container's argument, inside the rank wrapper's text.
    assert "export BASH_ENV" not in script.read_text() and "--env '\\''BASH_ENV=" in script.read_text()
    assert not (shared / "canary").exists(), "the image's BASH_ENV ran on the host"


def test_pyxis_refuses_the_label_and_takes_an_allow_listed_variable(cluster, hostile_sqsh, tuning_sqsh, shared):
    """Pyxis hands the container its variables through the job's environment on the host: BASH_ENV from
    the label is refused before anything is written; NCCL_IK_MARK alone reaches the container."""
    script = shared / "pyxis.sbatch"
    env = {"SLURM_CONF": str(cluster.conf)}
    proc = _imagekit("launch", "slurm", "--image", str(hostile_sqsh), "-N", "1", "--ntasks-per-node", "2",
                     "--submit", "--validate", "-o", str(script), env=env, cwd=shared)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"image {hostile_sqsh}: label {BENCHMARK} env name 'BASH_ENV' is not one that may pass" in proc.stderr
    assert not script.exists()
    proc = _imagekit("launch", "slurm", "--image", str(tuning_sqsh), "-N", "1", "--ntasks-per-node", "2",
                     "--submit", "--validate", "--max-latency-us", "100000", "-o", str(script), env=env, cwd=shared)
    job_out = script.with_suffix(".out")
    out = proc.stdout + proc.stderr + (job_out.read_text(errors="replace") if job_out.exists() else "")
    assert proc.returncode == 0, out
    assert f"mark={MARK}\n" in out and "verdict: PASS" in out, out
    assert not (shared / "canary").exists()
