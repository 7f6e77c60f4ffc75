"""`imagekit launch … --validate`: the image's benchmark, run for real, judged by the validate gates."""

import io
import subprocess
import sys

import pytest

from imagekit.util.errors import UsageError
from imagekit.launch import benchmark


def test_benchmark_follows_the_labels():
    cmd, env = benchmark.default_benchmark({"io.imagekit.components": "cuda,nccl,nccl-tests"})
    assert cmd[0] == "all_reduce_perf" and env == {"NCCL_DEBUG": "INFO"}
    cmd, env = benchmark.default_benchmark({"io.imagekit.components": "openmpi,python",
                                            "io.imagekit.component.python.packages": "mpi4py"})
    assert cmd[:4] == ["python3", "-m", "mpi4py.bench", "ringtest"] and env == {}
    with pytest.raises(UsageError, match="no benchmark known"):
        benchmark.default_benchmark({"io.imagekit.components": "openmpi"})


def test_tee_forwards_and_keeps_a_subprocess_output():
    sink = io.StringIO()
    tee = benchmark.Tee(sink)
    rc = subprocess.run([sys.executable, "-c", "print('a'); print('b')"], stdout=tee.file).returncode
    assert rc == 0 and tee.close() == "a\nb\n" == sink.getvalue()


def _launch(*args):
    return subprocess.run([sys.executable, "-m", "imagekit", "launch", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.engine
@pytest.mark.parametrize("gate,expected", [("100000", 0), ("0.001", 1)])
def test_inside_out_validate_passes_and_fails_on_the_gate(mpi_image, gate, expected):
    proc = _launch("inside-out", "--image", mpi_image, "--nodes", "2", "--validate", "--max-latency-us", gate)
    assert proc.returncode == expected, proc.stdout + proc.stderr
    assert "time for 1000 loops" in proc.stdout, "the benchmark's own output still streams"
    assert ("verdict: PASS" if expected == 0 else "verdict: FAIL") in proc.stdout
    if expected:
        assert "at 1 KiB > max 0.001 us" in proc.stdout, "the failure names the size and the limit"


@pytest.mark.engine
@pytest.mark.mpi
def test_outside_in_mpirun_validate(mpi_image):
    proc = _launch("mpirun", "--image", mpi_image, "--hosts", "localhost:2", "--validate",
                   "--max-latency-us", "100000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ringtest" in proc.stdout and "verdict: PASS" in proc.stdout


def test_validate_with_an_unreadable_file_image_needs_a_command(tmp_path):
    # A .sqsh/.sif here is read for its labels (tests/test_image_facts.py); one that is not here cannot name
    # its benchmark.
    proc = _launch("mpirun", "--runtime", "enroot", "--image", str(tmp_path / "x.sqsh"), "--hosts", "localhost:1",
                   "--validate", "--no-preflight")
    assert proc.returncode == 2 and "needs the image's labels" in proc.stderr and "-- all_reduce_perf" in proc.stderr
