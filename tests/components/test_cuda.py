"""cuda: the base image's version (source: base) or NVIDIA's 13.x wheels (source: pypi); drives NCCL and PyTorch."""

from __future__ import annotations

import pytest

from imagekit import stack as stack_mod
from stack_helpers import DEBIAN, expect_error, line_of, load_text, render_text, stage, write


def header(image: str, distro: str = "ubuntu22") -> str:
    return f"name: c\nbase:\n  image: {image}\n  distro: {distro}\ncomponents:\n  cuda: {{}}\n"


PYPI = DEBIAN + "components:\n  cuda: {source: pypi, version: '13.0.2'}\n"


@pytest.mark.parametrize("image, version, major_minor", [
    ("nvidia/cuda:12.4.1-devel-ubuntu22.04", "12.4.1", "12.4"),
    ("nvcr.io/nvidia/cuda:12.6.3-cudnn-devel-ubuntu22.04", "12.6.3", "12.6"),
    ("registry.example.org:5000/mirror/nvidia/cuda:11.8.0-devel-ubuntu22.04", "11.8.0", "11.8"),
    ("nvidia/cuda-arm64:12.4-devel", "12.4", "12.4"),
])
def test_version_from_the_base_image(tmp_path, image, version, major_minor):
    cuda = load_text(tmp_path, header(image)).get("cuda")
    assert (cuda.version, cuda.major_minor, cuda.major, cuda.source) == (version, major_minor,
                                                                         version.split(".")[0], "base")
    assert cuda.labels() == {"major": version.split(".")[0], "prefix": "/usr/local/cuda"}


def test_cuda_adds_no_layers(tmp_path):
    # The base image provides CUDA; the component only records facts.
    cuda = load_text(tmp_path, header("nvidia/cuda:12.4.1-devel-ubuntu22.04")).get("cuda")
    assert cuda.devel() == [] and cuda.runtime() == []


def test_checks_use_the_major_and_mark_gpu_checks(tmp_path):
    cuda = load_text(tmp_path, header("nvidia/cuda:12.4.1-devel-ubuntu22.04")).get("cuda")
    checks = {c.id: c for c in cuda.checks()}
    assert "libcudart.so.12" in checks["cuda.runtime"].run and checks["cuda.runtime"].needs is None
    assert checks["cuda.driver"].needs == "gpu"
    assert "cuda.nvcc" not in checks, "the base image's nvcc is not imagekit's to check"


def test_pypi_lays_the_wheels_out_as_a_toolkit(tmp_path):
    cuda = load_text(tmp_path, PYPI).get("cuda")
    assert (cuda.major, cuda.prefix) == ("13", "/usr/local/cuda-13.0")
    assert cuda.labels() == {"major": "13", "prefix": "/usr/local/cuda-13.0"}
    text = render_text(tmp_path, PYPI)
    devel, runtime = stage(text, "devel"), stage(text, "runtime")
    assert "'cuda-toolkit[nvcc,crt,nvvm,cudart,cccl,nvml,cuobjdump]==13.0.2.*'" in devel
    assert "ln -sfn /usr/local/cuda-13.0 /usr/local/cuda" in devel
    # The runtime keeps libcudart only: no compiler, no headers, no pip.
    assert "libcudart.so.13" in runtime and "nvcc" not in runtime and "pip" not in runtime
    nvcc = {c.id: c for c in cuda.checks()}["cuda.nvcc"]
    assert nvcc.target == "devel" and "release 13\\.0" in nvcc.expect


def test_arch_list_must_be_compilable_by_this_cuda(tmp_path):
    path = write(tmp_path, header("nvidia/cuda:12.4.1-devel-ubuntu22.04").replace(
        "cuda: {}", "cuda:\n    arch_list: ['90', '100']"))
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "arch_list"),
                 "components.cuda.arch_list", "CUDA 12.4.1 cannot compile for sm_100", "compiles for: 50")
