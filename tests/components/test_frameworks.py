"""pytorch, horovod, nccl-tests and gdrcopy: CUDA-matched wheels and builds against the stack."""

from __future__ import annotations

import re

from stack_helpers import CUDA, load_text, render_text, stage

TORCH = CUDA + """\
components:
  cuda: {}
  openmpi: {version: "4.1.7", ucx: false}
  nccl: {version: "2.23.4-1"}
  python: {}
  pytorch: {version: "2.5.1", extras: ["torchvision==0.20.1"]}
  horovod: {version: "0.28.1"}
"""


def test_pytorch_index_matches_the_base_cuda(tmp_path):
    text = render_text(tmp_path, TORCH)
    assert ("/opt/venv/bin/python -m pip install --index-url https://download.pytorch.org/whl/cu124 "
            "torch==2.5.1 torchvision==0.20.1") in stage(text, "devel")
    torch = load_text(tmp_path, TORCH).get("pytorch")
    assert torch.labels() == {"cuda": "cu124"}
    version = {c.id: c for c in torch.checks()}["pytorch.version"]
    assert re.search(version.expect, "2.5.1+cu124") and not re.search(version.expect, "2.5.1+cu121")


def test_custom_index(tmp_path):
    text = render_text(tmp_path, TORCH.replace('extras: ["torchvision==0.20.1"]',
                                               'index_url: "https://mirror.example.invalid/{cuda}/simple"'))
    assert "--index-url https://mirror.example.invalid/cu124/simple torch==2.5.1" in text


def test_horovod_builds_against_the_stacks_nccl_and_mpi(tmp_path):
    devel = stage(render_text(tmp_path, TORCH), "devel")
    assert "export HOROVOD_NCCL_HOME=/usr" in devel  # NCCL from the repo lives in /usr
    assert "export HOROVOD_GPU_OPERATIONS=NCCL" in devel and "export HOROVOD_WITH_MPI=1" in devel
    assert "pip install --no-build-isolation horovod==0.28.1" in devel
    assert devel.index("torch==2.5.1") < devel.index("horovod==0.28.1")


def test_nccl_tests_build_with_mpi(tmp_path):
    text = CUDA + """\
components:
  cuda: {}
  openmpi: {source: distro, ucx: false}
  nccl: {source: upstream, version: "2.23.4-1"}
  nccl-tests: {version: "2.13.11"}
"""
    rendered = render_text(tmp_path, text)
    devel = stage(rendered, "devel")
    assert "https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.13.11.tar.gz" in devel
    assert ("make -j$(nproc) CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr/local/nccl MPI=1 "
            "MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi") in devel
    runtime = stage(rendered, "runtime")
    assert "COPY --from=devel /usr/local/nccl-tests /usr/local/nccl-tests" in runtime
    assert "ENV PATH=/usr/local/nccl-tests/bin:$PATH" in runtime
    tests = load_text(tmp_path, text).get("nccl-tests")
    assert tests.labels() == {"mpi": "true"}
    assert {c.file for c in tests.checks() if c.file} >= {"/usr/local/nccl-tests/bin/all_reduce_perf"}


def test_nccl_tests_without_mpi(tmp_path):
    text = CUDA + "components:\n  cuda: {}\n  nccl: {version: '2.23.4-1'}\n  nccl-tests: {version: '2.13.11', mpi: false}\n"
    devel = stage(render_text(tmp_path, text), "devel")
    assert "NCCL_HOME=/usr" in devel and "MPI=1" not in devel


def test_gdrcopy_user_space_only(tmp_path):
    text = render_text(tmp_path, CUDA + "components:\n  cuda: {}\n  gdrcopy: {version: '2.4.4'}\n")
    devel = stage(text, "devel")
    assert "make prefix=/usr/local/gdrcopy lib lib_install" in devel and "insmod" not in devel
    assert "COPY --from=devel /usr/local/gdrcopy /usr/local/gdrcopy" in stage(text, "runtime")
