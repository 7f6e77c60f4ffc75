"""nccl-tests' check that its binaries load the stack's NCCL, for each place an NCCL lives.

NVIDIA's repo NCCL (nccl-tests stacks, source: repo) cannot be installed here (no NVIDIA
registry); its path is the documented multiarch one that `readlink -f` prints on Ubuntu. The
wheel layout (/usr/local/nccl) is checked green and red on the real debian-cuda image
(test_cuda_image.py)."""

from __future__ import annotations

import re

import pytest

from imagekit import checks, stack
from imagekit.components.nccl_tests import loads_nccl_pattern


def _loads_nccl(variant: str) -> str:
    s = stack.load(variant)
    (c,) = [c for c in checks.stack_checks(s) if c.id == "nccl-tests.loads_nccl"]
    return c.as_dict()["expect"]


@pytest.mark.parametrize("variant, loaded", [
    ("nccl-tests-cu129-x86_64", "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9"),
    ("nccl-tests-cu129-sbsa", "/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9"),
])
def test_the_repo_nccls_multiarch_path_passes(variant, loaded):
    assert re.search(_loads_nccl(variant), loaded)


@pytest.mark.parametrize("loaded", [
    "/usr/local/lib/python3.10/dist-packages/nvidia/nccl/lib/libnccl.so.2",   # torch's wheel NCCL
    "/opt/other/lib/libnccl.so.2",
    "/usr/lib/x86_64-linux-gnu/nccl-old/libnccl.so.2",
    "",                                                                        # not loaded at all
])
def test_another_nccl_fails(loaded):
    assert not re.search(_loads_nccl("nccl-tests-cu129-x86_64"), loaded)


def test_a_prefix_is_taken_literally():
    assert re.search(loads_nccl_pattern("/usr/local/nccl"), "/usr/local/nccl/lib/libnccl.so.2.28.9")
    assert not re.search(loads_nccl_pattern("/usr/local/nccl"), "/usr/local/ncclX/lib/libnccl.so.2")
    assert not re.search(loads_nccl_pattern("/opt/n.c"), "/opt/nxc/lib/libnccl.so.2")
