"""pytorch, nccl-tests and gdrcopy: CUDA-matched wheels and builds against the stack."""

from __future__ import annotations

import re

import pytest

from helpers.stack_helpers import CUDA, DEBIAN, load_text, render_text, stage

TORCH = CUDA + """\
components:
  cuda: {}
  openmpi: {version: "4.1.7", ucx: false}
  python: {}
  pytorch: {version: "2.5.1", extras: ["torchvision==0.20.1"]}
"""
TESTS = CUDA + """\
components:
  cuda: {}
  openmpi: {source: distro, ucx: false}
  nccl: {source: upstream, version: "2.23.4-1"}
  nccl-tests: {version: "2.17.6"}
"""
GENCODE_80_90 = ("-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 "
                 "-gencode=arch=compute_90,code=compute_90")


def test_pytorch_index_matches_the_base_cuda(tmp_path):
    text = render_text(tmp_path, TORCH)
    assert ("/opt/venv/bin/python -m pip install --index-url https://download.pytorch.org/whl/cu124 "
            "torch==2.5.1 torchvision==0.20.1") in stage(text, "devel")
    torch = load_text(tmp_path, TORCH).get("pytorch")
    version = {c.id: c for c in torch.checks()}["pytorch.version"]
    assert re.search(version.expect, "2.5.1+cu124") and not re.search(version.expect, "2.5.1+cu121")


def test_pytorch_labels_and_checks_the_nccl_it_loads(tmp_path):
    # torch loads its own nvidia-nccl-cu12 wheel (2.21.5 for 2.5.1), not a system libnccl2.
    torch = load_text(tmp_path, TORCH).get("pytorch")
    assert torch.labels() == {"cuda": "cu124", "index": "pytorch", "nccl": "2.21.5"}
    check = {c.id: c for c in torch.checks()}["pytorch.nccl_version"]
    assert "torch.cuda.nccl.version()" in check.run
    assert "ncclGetVersion" in check.run  # torch.cuda.nccl.version() is the NCCL torch was built against
    assert re.search(check.expect, "built 2.21.5\nloaded 2.21.5\n")
    assert not re.search(check.expect, "built 2.21.5\nloaded 2.23.4\n")
    assert not re.search(check.expect, "built 2.23.4\nloaded 2.21.5\n")


def test_custom_index(tmp_path):
    text = render_text(tmp_path, TORCH.replace('extras: ["torchvision==0.20.1"]',
                                               'index_url: "https://mirror.example.invalid/{cuda}/simple"'))
    assert "--index-url https://mirror.example.invalid/cu124/simple torch==2.5.1" in text


TORCH_PYPI = DEBIAN + """\
components:
  cuda: {source: pypi, version: "13.2.2"}
  nccl: {source: pypi, version: "2.30.7"}
  python: {}
  pytorch: {version: "2.15.0", index: pypi}
"""


def test_pytorch_from_pypi_takes_the_cuda_build_its_wheel_requires(tmp_path):
    """PyPI's torch 2.15.0 is one wheel whose requirements fix CUDA 13.2 and NCCL 2.30.7: pip's
    configured index is used (no --index-url), and the wheel's libnccl.so.2 becomes a link to the
    stack's NCCL, the same version, so the image holds one NCCL."""
    text = render_text(tmp_path, TORCH_PYPI)
    devel = stage(text, "devel")
    assert "/opt/venv/bin/python -m pip install torch==2.15.0 'nvidia-nvjitlink==13.2.*' 'nvidia-cuda-cccl==13.2.*' && " \
        in devel
    assert "--index-url" not in devel
    assert 'ln -sf /usr/local/nccl/lib/libnccl.so.2 "$f"' in devel
    assert devel.index("pip install torch==2.15.0") < devel.index("ln -sf /usr/local/nccl/lib/libnccl.so.2")
    torch = load_text(tmp_path, TORCH_PYPI).get("pytorch")
    assert torch.labels() == {"cuda": "cu132", "index": "pypi", "nccl": "2.30.7"}
    checks = {c.id: c for c in torch.checks()}
    version, build = checks["pytorch.version"], checks["pytorch.cuda_build"]
    assert re.search(version.expect, "2.15.0\n") and re.search(version.expect, "2.15.0+cu132\n")
    assert not re.search(version.expect, "2.14.0\n") and not re.search(version.expect, "2.15.0+cu130\n")
    assert re.search(build.expect, "13.2\n") and not re.search(build.expect, "13.0\n")
    assert checks["pytorch.ldd_closure"].prefixes == ("/opt/venv/lib/python3.11/site-packages/torch",)


def test_pytorch_one_nccl_check_accepts_one_file_only(tmp_path):
    one = {c.id: c for c in load_text(tmp_path, TORCH_PYPI).get("pytorch").checks()}["pytorch.one_nccl"]
    assert re.search(one.expect, "/usr/local/nccl/lib/libnccl.so.2\n")
    assert not re.search(one.expect, "/usr/local/nccl/lib/libnccl.so.2\n/opt/venv/lib/python3.11/site-packages/"
                                     "nvidia/nccl/lib/libnccl.so.2\n")
    assert not re.search(one.expect, "")


def test_pytorch_runtime_can_compile_for_torch_compile(tmp_path):
    """Review finding 3: Triton builds a C launcher against Python.h on first use of torch.compile."""
    runtime = stage(render_text(tmp_path, TORCH_PYPI), "runtime")
    assert "--no-install-recommends gcc libc6-dev python3-dev" in runtime
    check = {c.id: c for c in load_text(tmp_path, TORCH_PYPI).get("pytorch").checks()}["pytorch.compiler"]
    assert "#include <Python.h>" in check.command and "sysconfig.get_paths()" in check.command


def test_nccl_tests_build_with_mpi(tmp_path):
    rendered = render_text(tmp_path, TESTS)
    devel = stage(rendered, "devel")
    assert "https://github.com/NVIDIA/nccl-tests/archive/v2.17.6.tar.gz" in devel
    make = (f'make -j$(nproc) DSO=1 CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr/local/nccl NVCC_GENCODE="{GENCODE_80_90}" '
            "MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi")
    assert make in devel
    # The upstream file is checked against its pin before anything is built from it.
    assert devel.index("sha256sum -c") < devel.index(make)
    runtime = stage(rendered, "runtime")
    assert "COPY --from=devel /usr/local/nccl-tests /usr/local/nccl-tests" in runtime
    assert "ENV PATH=/usr/local/nccl-tests/bin:$PATH" in runtime
    tests = load_text(tmp_path, TESTS).get("nccl-tests")
    assert tests.labels() == {"mpi": "true", "gencode": "80,90"}
    assert {c.file for c in tests.checks() if c.file} >= {"/usr/local/nccl-tests/bin/all_reduce_perf"}


def test_nccl_tests_build_against_whichever_component_provides_mpi(tmp_path):
    upstream = TESTS.replace("{source: distro, ucx: false}", '{version: "4.1.7", ucx: false}')
    stack = load_text(tmp_path, upstream)
    assert stack.provider("mpi") is stack.get("openmpi")
    assert "MPI=1 MPI_HOME=/usr/local/openmpi" in stage(render_text(tmp_path, upstream), "devel")


def test_nccl_tests_without_mpi(tmp_path):
    text = CUDA + ("components:\n  cuda: {}\n  nccl: {version: '2.23.4-1'}\n"
                   "  nccl-tests: {version: '2.17.6', mpi: false}\n")
    devel = stage(render_text(tmp_path, text), "devel")
    assert "NCCL_HOME=/usr " in devel and "MPI=1" not in devel


@pytest.mark.parametrize("cuda, tests, archs", [
    # The default always has Hopper SASS (nccl-tests < 2.13.13's own default had none), plus
    # Blackwell where the CUDA compiles it.
    ("{}", "{version: '2.17.6', mpi: false}", ["80", "90"]),
    ("{arch_list: ['90']}", "{version: '2.17.6', mpi: false}", ["90"]),
    ("{arch_list: ['90']}", "{version: '2.17.6', mpi: false, gencode: ['80', '89']}", ["80", "89"]),
])
def test_nccl_tests_gencode(tmp_path, cuda, tests, archs):
    text = CUDA + f"components:\n  cuda: {cuda}\n  nccl: {{version: '2.23.4-1'}}\n  nccl-tests: {tests}\n"
    assert load_text(tmp_path, text).get("nccl-tests").archs == archs
    gencode = re.search(r'NVCC_GENCODE="([^"]*)"', stage(render_text(tmp_path, text), "devel")).group(1)
    assert re.findall(r"code=sm_(\d+)", gencode) == archs
    assert gencode.endswith(f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}"), "PTX of the newest"


def test_nccl_tests_default_gencode_adds_blackwell_on_cuda_12_8(tmp_path):
    text = CUDA.replace("12.4.1", "12.8.1") + \
        "components:\n  cuda: {}\n  nccl: {version: '2.25.1-1'}\n  nccl-tests: {version: '2.17.6', mpi: false}\n"
    assert load_text(tmp_path, text).get("nccl-tests").archs == ["80", "90", "100", "120"]


def test_gdrcopy_user_space_only(tmp_path):
    text = render_text(tmp_path, CUDA + "components:\n  cuda: {}\n  gdrcopy: {version: '2.4.4'}\n")
    devel = stage(text, "devel")
    assert "https://github.com/NVIDIA/gdrcopy/archive/v2.4.4.tar.gz" in devel
    make = "make prefix=/usr/local/gdrcopy CUDA=/usr/local/cuda lib lib_install"
    assert make in devel and "insmod" not in devel and "gdrdrv" not in devel
    assert devel.index("sha256sum -c") < devel.index(make)
    assert "COPY --from=devel /usr/local/gdrcopy/lib /usr/local/gdrcopy/lib" in stage(text, "runtime")
