"""Validate on the GB200 NVL72 model and the V100 models, on outputs generated in nccl-tests' and NCCL's
published formats: a run inside one NVLink domain must show NVLink (P2P) between its nodes, never the NICs,
and a V100 run is judged against the DGX-1 model found by its alias."""

from __future__ import annotations

from click.testing import CliRunner

from imagekit.cli import main
from imagekit.validate import Gates, evaluate, parse
from validate_gen import Spec, nccl_log, nccl_tests_output

TRAYS = ("tray-01", "tray-02")


def _two_trays(transport: str):
    text, _ = nccl_tests_output(Spec(hosts=TRAYS, gpus_per_host=4, gpu="NVIDIA GB200", peak_busbw=700.0))
    return evaluate(parse(text + nccl_log(transport, hosts=TRAYS, gpus=4)), Gates.load(system="gb200-nvl72"))


def test_two_trays_of_one_rack_over_nvlink_pass():
    verdict = _two_trays("P2P")
    assert verdict.status == "pass", verdict.failures


def test_two_trays_of_one_rack_over_infiniband_fail_naming_imex():
    """NCCL fell back to the NICs between trays of one NVLink domain: what a missing IMEX channel does."""
    verdict = _two_trays("GDRDMA")
    assert verdict.status == "fail"
    messages = " ".join(f.message for f in verdict.failures)
    assert "between nodes of one NVLink domain" in messages and "IMEX" in messages and "--profile nvl72" in messages


def test_a_dgx_1_run_of_the_volta_image_judged_by_alias(tmp_path):
    """2 x DGX-1 (8 x V100, 4 x EDR each) at the seed guides' 42 GB/s: in the band of `--system dgx-1`."""
    text, _ = nccl_tests_output(Spec(hosts=("dgx1-a", "dgx1-b"), gpus_per_host=8, gpu="Tesla V100-SXM2-32GB",
                                     peak_busbw=42.0))
    log = tmp_path / "v100.log"
    log.write_text(text)
    result = CliRunner().invoke(main, ["validate", str(log), "--system", "dgx-1"])
    assert result.exit_code == 0, result.output
    assert "dgx-1v" in result.output
    slow, _ = nccl_tests_output(Spec(hosts=("dgx1-a", "dgx1-b"), gpus_per_host=8, gpu="Tesla V100-SXM2-32GB",
                                     peak_busbw=30.0))
    log.write_text(slow)
    assert CliRunner().invoke(main, ["validate", str(log), "--system", "dgx-1"]).exit_code != 0
