"""Bad input refused before any build, each as one located error with the fix (fourth CUDA review, J4 and J5):
a binary of the image without code for the oldest GPU another binary serves (nvbandwidth on a V100), and a NIC
rule's ceiling (DOCA after 2.9 LTS has no ConnectX-4). The shipped V100 image keeps both."""

from __future__ import annotations

from helpers.stack_helpers import CUDA, expect_error, line_of, load_text, write

from imagekit import stack as stack_mod

CUDA129 = CUDA.replace("12.4.1", "12.9.1")
VOLTA = CUDA129 + ("components:\n  cuda: {}\n  nccl: {source: repo, version: '2.30.4-1'}\n"
                   "  nccl-tests: {version: '2.19.6', mpi: false, gencode: ['70', '80', '90']}\n  nvbandwidth: {version: '0.8'%s}\n")
OFED = CUDA129 + "components:\n  ofed: {%s}\n"


def test_nvbandwidth_without_the_sm70_code_nccl_tests_carries_is_refused(tmp_path):
    path = write(tmp_path, VOLTA % "")
    err = expect_error(lambda: stack_mod.load(path), path, line_of(path, "nvbandwidth:"),
                       "components.nvbandwidth.archs", "nvbandwidth has no sm_70 code, which nccl-tests carries")
    assert "'70'" in err.hint
    s = load_text(tmp_path, VOLTA % ", archs: ['70', '80', '90']")
    assert s.get("nvbandwidth").labels()["archs"] == "70,80,90"


def test_nvbandwidth_archs_are_held_to_the_cuda_release(tmp_path):
    path = write(tmp_path, VOLTA.replace("12.9.1", "12.4.1") % ", archs: ['70', '100']")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "nvbandwidth:"), "components.nvbandwidth.archs",
                 "cannot compile for sm_100")


def test_doca_after_29_lts_refuses_connectx4(tmp_path):
    path = write(tmp_path, OFED % "flavor: doca, version: '3.2.0', nics: [cx4, cx5]")
    err = expect_error(lambda: stack_mod.load(path), path, line_of(path, "ofed:"), "components.ofed.version",
                       "DOCA 3.2.0 does not support ConnectX-4", "2.9 (LTS) is the last")
    assert '"2.9.4"' in err.hint and "inbox" in err.hint
    assert load_text(tmp_path, OFED % "flavor: doca, version: '2.9.4', nics: [cx4, cx5]").get("ofed").version == "2.9.4"
    assert load_text(tmp_path, OFED % "flavor: doca, version: '2.10.0', nics: [cx5, cx8]").get("ofed")


def test_the_shipped_v100_image_serves_connectx4_and_v100_in_every_binary():
    s = stack_mod.load("nccl-tests-volta")
    assert s.get("ofed").version.startswith("2.9.") and "cx4" in s.get("ofed").opts["nics"]
    for component in ("nccl-tests", "nvbandwidth"):
        assert "70" in s.get(component).archs, component
