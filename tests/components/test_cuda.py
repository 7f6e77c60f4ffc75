"""cuda: the base image's version (source: base) or NVIDIA's 13.x wheels (source: pypi); drives NCCL and PyTorch."""

from __future__ import annotations

import pytest

from imagekit import stack as stack_mod
from helpers.stack_helpers import DEBIAN, expect_error, line_of, load_text, render_text, stage, write


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
    assert cuda.labels() == {"major": version.split(".")[0], "prefix": "/usr/local/cuda",
                             "min_driver": {"11": "450.80.02", "12": "525.60.13"}[version.split(".")[0]],
                             "driver_policy": "minor-version"}


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
    assert cuda.labels() == {"major": "13", "prefix": "/usr/local/cuda-13.0", "min_driver": "580.65.06",
                             "driver_policy": "minor-version"}
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


TRIXIE = "name: t\nbase:\n  image: imagekit/debian:trixie\n  distro: debian13\n"
DISTRO = TRIXIE + "components:\n  cuda: {source: distro}\n"


def test_distro_is_debians_toolkit_in_devel_and_the_wheels_cudart_in_runtime(tmp_path):
    cuda = load_text(tmp_path, DISTRO).get("cuda")
    assert (cuda.version, cuda.major, cuda.prefix) == ("12.4.1", "12", "/usr/local/cuda-12.4")
    assert cuda.labels() == {"major": "12", "prefix": "/usr/local/cuda-12.4", "min_driver": "525.60.13",
                             "driver_policy": "minor-version"}
    text = render_text(tmp_path, DISTRO)
    devel, runtime = stage(text, "devel"), stage(text, "runtime")
    assert "nvidia-cuda-toolkit" in devel and "nvidia-cuda-runtime-cu12==12.4.127" in devel
    # apt would otherwise install the 550 driver's libcuda1 into the image, which the host's driver must be.
    assert "Provides: libcuda.so.1 (= 550), libcuda-12.4-1, libnvidia-ml.so.1 (= 550)" in devel
    assert devel.index("dpkg -i /var/tmp/no-driver.deb") < devel.index("apt-get install")
    assert "ln -s /usr/bin/$t /usr/local/cuda-12.4/bin/$t" in devel and "python3 - /usr/include" in devel
    # Nothing of Debian's toolkit in the runtime: libcudart from the wheel (copied from devel) only.
    assert "COPY --from=devel /usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12" in runtime
    assert "nvidia-cuda-toolkit" not in runtime and "nvcc" not in runtime
    nvcc = {c.id: c for c in cuda.checks()}["cuda.nvcc"]
    assert nvcc.target == "devel" and "release 12\\.4" in nvcc.expect


@pytest.mark.parametrize("text, version", [(DISTRO, "12"), (PYPI, "13")])
def test_require_cuda_lets_every_driver_of_the_major_run_it(tmp_path, text, version):
    """libnvidia-container refuses a driver whose CUDA is below NVIDIA_REQUIRE_CUDA: an R535 driver reports
    CUDA 12.2, so a 12.4 image must ask for cuda>=12.0 (minor-version compatibility), not 12.4."""
    rendered = render_text(tmp_path, text)
    for name in ("devel", "runtime"):
        assert f"NVIDIA_REQUIRE_CUDA=cuda>={version}.0" in stage(rendered, name)


def test_distro_refuses_a_distro_without_the_toolkit_and_another_version(tmp_path):
    path = write(tmp_path, DEBIAN + "components:\n  cuda: {source: distro}\n")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "cuda:"), "components.cuda.source",
                 "no distro CUDA toolkit for debian12", "debian13 (CUDA 12.4.1)")
    path = write(tmp_path, TRIXIE + "components:\n  cuda: {source: distro, version: '12.8'}\n")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "cuda:"), "components.cuda.version",
                 "CUDA 12.4.1, not 12.8")


@pytest.mark.parametrize("text, arch, fragments", [
    # Blackwell needs CUDA 12.8: Debian's 12.4 cannot compile it.
    (DISTRO, "100", ["CUDA 12.4.1 cannot compile for sm_100", "CUDA 12.4 compiles for: 50, 52", "90"]),
    # CUDA 13 dropped everything before Turing.
    (PYPI, "70", ["CUDA 13.0.2 cannot compile for sm_70", "CUDA 13.0 compiles for: 75, 80"]),
])
def test_an_arch_the_cuda_cannot_compile_is_refused_at_load(tmp_path, text, arch, fragments):
    path = write(tmp_path, text.replace("cuda: {source:", f"cuda: {{arch_list: ['{arch}'], source:"))
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "arch_list"), "components.cuda.arch_list",
                 *fragments)
