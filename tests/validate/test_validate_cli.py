"""``imagekit validate``: exit codes 0/1/2, text and --json, stdin, a real subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from imagekit.cli import main
from helpers.validate_gen import Spec, nccl_log, nccl_tests_output

RUN, EXP = nccl_tests_output(Spec(style="new", hosts=("node-a", "node-b"), check=False))
PEAK = max(EXP.oop_busbw + EXP.ip_busbw)


def _invoke(args: list, stdin: str = "") -> "tuple[int, str, str]":
    res = CliRunner().invoke(main, ["validate", *args], input=stdin, catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def test_help_shows_examples() -> None:
    code, out, _ = _invoke(["--help"])
    assert code == 0 and "imagekit validate - --system dgx-h100" in out and "--expect-transport" in out
    assert "9 ran wrong" in out and "1 ran right but slow" in out


def test_pass_fail_unreadable_exit_codes(tmp_path) -> None:
    log = tmp_path / "nccl.log"
    log.write_text(RUN + nccl_log("IB"))
    code, out, _ = _invoke([str(log), "--min-busbw", str(PEAK - 1), "--expect-transport", "IB"])
    assert code == 0 and "verdict: PASS" in out and "peak busbw" in out
    code, out, _ = _invoke([str(log), "--min-busbw", str(PEAK + 1)])
    assert code == 1 and "verdict: FAIL" in out and "at 8 GiB" in out
    code, _, err = _invoke(["-"], stdin="no benchmark here\n")
    assert code == 2 and "unreadable" in err
    code, _, err = _invoke([str(tmp_path / "missing.log")])
    assert code == 2 and "cannot read" in err


def test_truncated_is_a_run_gone_wrong_exit_9(tmp_path) -> None:
    """A truncated run ran wrong (sanity), which scripts must tell from slow (1): exit 9."""
    text, _ = nccl_tests_output(Spec(style="classic", stop_after=10, footer=False))
    code, out, _ = _invoke(["-", "--brief"], stdin=text)
    assert code == 9 and "TRUNCATED" in out and "verdict: FAIL (ran wrong)" in out


def test_json_output() -> None:
    code, out, _ = _invoke(["-", "--json", "--min-busbw", str(PEAK + 1)], stdin=RUN + nccl_log("GDRDMA"))
    assert code == 1
    data = json.loads(out)
    assert data["status"] == "fail"
    [s] = data["summary"]["nccl_tests"]
    assert s["peak_busbw"] == PEAK and s["saturation_size"] == 32 << 20 and s["hosts"] == ["node-a", "node-b"]
    assert s["small_size_latency_us"][0] == {"size": 8, "out_of_place": 20.0, "in_place": 20.3}
    assert data["summary"]["transports"] == ["IB", "GDRDMA", "P2P"]
    assert data["verdict"]["failures"][0]["size"] == 8 << 30
    assert len(data["result"]["nccl_tests"][0]["rows"]) == 31


def test_json_unreadable_still_prints_json() -> None:
    code, out, _ = _invoke(["-", "--json"], stdin="\x00garbage")
    assert code == 2 and json.loads(out)["status"] == "unreadable"


def test_bad_baseline_exits_2(tmp_path) -> None:
    b = tmp_path / "b.yaml"
    b.write_text("min_bus_bw: 3\n")
    code, _, err = _invoke(["-", "--baseline", str(b)], stdin=RUN)
    assert code == 2 and "unknown key" in err


def test_real_subprocess_reads_stdin() -> None:
    exe = shutil.which("imagekit")
    cmd = [exe] if exe else [sys.executable, "-m", "imagekit"]
    proc = subprocess.run([*cmd, "validate", "-", "--min-busbw", str(PEAK - 1), "--brief"],
                          input=(RUN.replace("\n", "\r\n")).encode(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert b"verdict: PASS" in proc.stdout
    proc = subprocess.run([*cmd, "validate", "-", "--min-busbw", str(PEAK + 1)], input=RUN.encode(),
                          capture_output=True, timeout=60)
    assert proc.returncode == 1 and b"FAIL" in proc.stdout


def test_expect_transport_takes_a_net_plugin_like_a_baseline_does(tmp_path) -> None:
    """`NET:<plugin>` (aws-ofi-nccl's Libfabric, HPC-X's SHARP) is accepted by baseline files and by the
    library; the command line refused it with "invalid choice"."""
    log = tmp_path / "nccl.log"
    log.write_text(RUN + nccl_log("IB").replace("NET/IB/0", "NET/Libfabric/0"))
    code, out, _ = _invoke([str(log), "--expect-transport", "NET:Libfabric"])
    assert code == 0 and "verdict: PASS" in out
    code, out, _ = _invoke([str(log), "--expect-transport", "net:Other"])
    assert code == 9 and "NET:Other" in out  # the wrong transport: ran wrong
    code, _, err = _invoke([str(log), "--expect-transport", "Carrier-Pigeon"])
    assert code == 2 and "NET:<plugin>" in err


@pytest.mark.engine
def test_image_names_the_nccl_the_run_must_have_loaded(tmp_path, mpi_image) -> None:
    """--image reads the image's facts (debian-mpi records its NCCL wheel's version): a run that loaded
    another NCCL fails, and a log without the 'NCCL version' line cannot pass."""
    from imagekit.image_facts import reader

    nccl = reader.read(mpi_image).role_version("nccl")
    assert nccl, "debian-mpi records its NCCL"
    log = tmp_path / "nccl.log"
    log.write_text(RUN + nccl_log("IB").replace("NCCL version 2.21.5", f"NCCL version {nccl}"))
    code, out, _ = _invoke([str(log), "--image", mpi_image])
    assert code == 0 and f"the run used the image's NCCL {nccl}" in out
    log.write_text(RUN + nccl_log("IB").replace("NCCL version 2.21.5", "NCCL version 2.23.4"))
    code, out, _ = _invoke([str(log), "--image", mpi_image])
    assert code == 9 and f"the run loaded NCCL 2.23.4+cuda12.4, and {mpi_image} records NCCL {nccl}" in out
    log.write_text(RUN)
    code, out, _ = _invoke([str(log), "--image", mpi_image])
    assert code == 9 and "no 'NCCL version' line" in out
    code, _, err = _invoke([str(log), "--image", str(tmp_path / "gone.sqsh")])
    assert code == 2 and "not on this host" in err
