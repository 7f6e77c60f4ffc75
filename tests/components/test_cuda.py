"""cuda: the version comes from the base image's tag, and drives NCCL and PyTorch."""

from __future__ import annotations

import pytest

from stack_helpers import load_text


def header(image: str, distro: str = "ubuntu22") -> str:
    return f"name: c\nbase:\n  image: {image}\n  distro: {distro}\ncomponents:\n  cuda: {{}}\n"


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
    assert cuda.labels() == {"major": version.split(".")[0]}


def test_cuda_adds_no_layers(tmp_path):
    # The base image provides CUDA; the component only records facts.
    cuda = load_text(tmp_path, header("nvidia/cuda:12.4.1-devel-ubuntu22.04")).get("cuda")
    assert cuda.devel() == [] and cuda.runtime() == []


def test_checks_use_the_major_and_mark_gpu_checks(tmp_path):
    cuda = load_text(tmp_path, header("nvidia/cuda:12.4.1-devel-ubuntu22.04")).get("cuda")
    checks = {c.id: c for c in cuda.checks()}
    assert "libcudart.so.12" in checks["cuda.runtime"].run and checks["cuda.runtime"].needs is None
    assert checks["cuda.driver"].needs == "gpu"
