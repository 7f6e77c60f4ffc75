"""MPI benchmark output: OSU micro-benchmarks (generated in OMB's layout), mpi4py.bench
(an excerpt captured from a real run here, and real runs with Debian's Open MPI)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from imagekit.validate import Gates, evaluate, parse
from helpers.validate_gen import osu_allreduce_full, osu_bw, osu_latency

# Captured from `mpirun -np 2 python -m mpi4py.bench pingpong -n 4096` (mpi4py 4.1.2, Open MPI 4.1.4).
PINGPONG = """\
# MPI PingPong Test
# Size [B]  Bandwidth [MB/s] | Time Mean [s] \u00b1 StdDev [s]  Samples
         1              2.51 | 3.9824730e-07 \u00b1 2.1518e-07    10000
         2              5.01 | 3.9943575e-07 \u00b1 3.3134e-07    10000
         4             10.06 | 3.9765825e-07 \u00b1 1.6329e-07    10000
      1024           1803.56 | 5.6776490e-07 \u00b1 1.0063e-07    10000
      2048           3238.23 | 6.3244495e-07 \u00b1 3.4957e-06    10000
      4096           3607.78 | 1.1353227e-06 \u00b1 1.6479e-07    10000
"""
RINGTEST = "time for 100 loops = 0.000421741 seconds (3 processes, 1024 bytes)\n"


def test_osu_latency() -> None:
    result = parse(osu_latency())
    [run] = result.mpi
    assert run.benchmark == "osu_latency" and run.points[0].size == 0 and run.points[-1].size == 1 << 22
    assert run.points[1].latency_us == 1.52 and not run.truncated
    assert evaluate(result, Gates(max_latency_us=1.7)).status == "pass"
    bad = evaluate(result, Gates(max_latency_us=1.5))
    assert bad.status == "fail" and bad.failures[0].size == 1  # 0 B is 1.42 us, 1 B is 1.52 us


def test_osu_v5_without_datatype_line() -> None:
    [run] = parse(osu_latency(version="v5.6.2")).mpi
    assert len(run.points) == 24


def test_osu_bw_peak_and_gate_in_gbps() -> None:
    result = parse(osu_bw())
    [run] = result.mpi
    peak = max(p.bandwidth_mbps for p in run.points)
    assert run.benchmark == "osu_bw" and peak > 23000
    assert evaluate(result, Gates(min_busbw=peak / 1000 - 0.1)).status == "pass"
    bad = evaluate(result, Gates(min_busbw=peak / 1000 + 0.1))
    assert bad.status == "fail" and bad.failures[0].size == 1 << 22


def test_osu_allreduce_full_uses_avg_latency() -> None:
    [run] = parse(osu_allreduce_full()).mpi
    assert run.benchmark == "osu_allreduce"
    assert run.points[0].size == 4 and run.points[0].latency_us == 3.0


def test_osu_truncated_row() -> None:
    text = osu_latency(max_size=1024) + "2048\n"
    result = parse(text)
    assert result.mpi[0].truncated and evaluate(result).status == "fail"


def test_mpi4py_pingpong_and_ringtest() -> None:
    result = parse(PINGPONG + RINGTEST)
    pp, ring = result.mpi
    assert pp.benchmark == "pingpong" and [p.size for p in pp.points] == [1, 2, 4, 1024, 2048, 4096]
    assert pp.points[0].latency_us == pytest.approx(0.3982473) and pp.points[-1].bandwidth_mbps == 3607.78
    assert ring.benchmark == "ringtest" and ring.processes == 3
    assert ring.points[0].latency_us == pytest.approx(4.21741)
    assert evaluate(result, Gates(max_latency_us=5)).status == "pass"
    verdict = evaluate(result, Gates(max_latency_us=1))
    assert [f.run.split()[0] for f in verdict.failures] == ["ringtest"]


# -- real runs ----------------------------------------------------------------------------------
def _mpi4py_python() -> "str | None":
    # IMAGEKIT_MPI4PY_PYTHON: an interpreter with mpi4py >= 4 (pingpong), e.g. a venv with the PyPI wheel.
    for exe in (os.environ.get("IMAGEKIT_MPI4PY_PYTHON"), sys.executable, "/usr/bin/python3"):
        if exe and os.path.exists(exe) and subprocess.run([exe, "-c", "import mpi4py.bench"],
                                                          capture_output=True).returncode == 0:
            return exe
    return None


def _run_mpi(args: list) -> str:
    problem = None if shutil.which("mpirun") else "mpirun not found (apt-get install openmpi-bin)"
    exe = _mpi4py_python()
    if exe is None:
        problem = problem or "mpi4py not importable (apt-get install python3-mpi4py, or pip install mpi4py)"
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs Open MPI and mpi4py: {problem}", pytrace=False)
        pytest.skip(problem)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1")
    proc = subprocess.run(["mpirun", "-np", "2", exe, "-m", "mpi4py.bench", *args],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.mpi
def test_real_mpi4py_ringtest() -> None:
    out = _run_mpi(["ringtest", "-n", "1024", "-l", "200"])
    result = parse(out)
    [run] = result.mpi
    assert run.benchmark == "ringtest" and run.processes == 2 and run.points[0].size == 1024
    assert 0 < run.points[0].latency_us < 10_000
    assert evaluate(result, Gates(max_latency_us=10_000)).status == "pass"
    assert evaluate(result, Gates(max_latency_us=run.points[0].latency_us / 2)).status == "fail"


@pytest.mark.mpi
def test_real_mpi4py_pingpong() -> None:
    exe = _mpi4py_python()
    if exe and subprocess.run([exe, "-c", "import mpi4py.bench as b; assert hasattr(b, 'pingpong')"],
                              capture_output=True).returncode != 0:
        problem = "this mpi4py has no pingpong benchmark (needs mpi4py >= 4, the test extra installs it)"
        if os.environ.get("CI"):
            pytest.fail(f"CI: {problem}", pytrace=False)
        pytest.skip(problem)
    out = _run_mpi(["pingpong", "-n", "65536", "-l", "200", "-s", "20"])
    result = parse(out)
    [run] = result.mpi
    assert [p.size for p in run.points] == [2 ** i for i in range(17)]
    assert all(p.latency_us and p.latency_us > 0 and p.bandwidth_mbps > 0 for p in run.points)
    assert evaluate(result).status == "pass"
