"""The offline CUDA 12 stack (debian-cuda12), built for real and checked green and red.

Debian 13's CUDA 12.4 toolkit builds gdrcopy, UCX, PMIx 5, Open MPI 5 and nccl-tests from the site
mirror (../shared/mirror, used in place); the runtime keeps libcudart from the cu12 wheel and NCCL
from its wheel. No GPU exists here: the checks that need one are reported as not run, every other
check runs on the real runtime and devel images, then fails on a broken copy. What decides which
drivers run the image (NVIDIA_REQUIRE_CUDA, the min_driver label) is read from the built image.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers.broken_images import broken_copy
from helpers.cuda_images import check_outcomes, green_but_hardware, image_sizes
from imagekit.engines import docker as engine
from imagekit.checks import runner

pytestmark = pytest.mark.engine

BREAK_RUNTIME = """set -e
rm -f /usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12
rm -f /usr/local/ucx/lib/libucs.so.0*
printf '#!/bin/sh\\necho "# Library version: 1.18.1"\\necho "#define ENABLE_MT 0"\\n' > /usr/local/ucx/bin/ucx_info
mkdir -p /opt/other && cp /usr/local/nccl/lib/libnccl.so.2 /opt/other/
echo /opt/other > /etc/ld.so.conf.d/00-other.conf
ldconfig
rm -f /usr/local/ucx/lib/ucx/libuct_cuda.so.0*
printf '#!/bin/sh\necho "imagekit-cuda-mpi-ring: built against an MPI without CUDA support"\nexit 1\n' > /usr/local/bin/imagekit-cuda-mpi-ring
"""
BROKEN_RUNTIME_FAILS = {"cuda.runtime", "image.ldd_closure", "ucx.mt", "ucx.cuda_build", "nccl-tests.loads_nccl",
                        "ucx.cuda_module", "openmpi.cuda_probe"}
BREAK_DEVEL = """set -e
rm /usr/local/cuda-12.4/bin/nvcc
printf '#!/bin/sh\\necho "Cuda compilation tools, release 11.8, V11.8.89"\\n' > /usr/local/cuda-12.4/bin/nvcc
chmod +x /usr/local/cuda-12.4/bin/nvcc
"""


def _run(image: str, script: str) -> subprocess.CompletedProcess:
    return subprocess.run([engine.docker_cli(), "run", "--rm", "--entrypoint", "sh", image, "-c", script],
                          capture_output=True, text=True)




def test_runtime_image_passes_every_check_and_leaves_gpu_checks_not_run(cuda12_images):
    runtime, _ = cuda12_images
    outcomes = green_but_hardware(runtime)
    assert BROKEN_RUNTIME_FAILS <= {i for i, o in outcomes.items() if o.status == "passed"}


def test_devel_image_has_debians_nvcc_12_4_with_gcc_13(cuda12_images):
    _, devel = cuda12_images
    outcomes = check_outcomes(devel, runner.checks_from_image(devel))
    assert outcomes["cuda.nvcc"].status == "passed", outcomes["cuda.nvcc"].detail
    assert not [i for i, o in outcomes.items() if o.status == "failed"]
    # CUDA 12.4 supports gcc <= 13; trixie's gcc is 14. Debian's nvcc.profile puts wrappers named gcc/g++
    # first on nvcc's PATH, which run gcc-13: cudafe++ is told the host compiler's version (--gnu_version).
    proc = _run(devel, "gcc -dumpversion; cd /tmp && printf '__global__ void k(){}\\nint main(){k<<<1,1>>>();}\\n'"
                       " > t.cu && nvcc -v -o t t.cu 2>&1 | grep -o -m1 -- '--gnu_version=[0-9]*'")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    gcc, host = proc.stdout.split()
    assert gcc.startswith("14") and host.startswith("--gnu_version=13"), proc.stdout


def test_no_driver_library_and_no_debian_cuda_package_in_either_image(cuda12_images):
    """The host's driver is mounted by the GPU runtime: an image's own libcuda would shadow or clash."""
    runtime, devel = cuda12_images
    for image in (runtime, devel):
        proc = _run(image, "ldconfig -p | grep -E 'libcuda[.]so|libnvidia-ml[.]so' || true; "
                           "dpkg-query -W -f '${Package}\\n' | grep -E '^(libcuda1|libnvidia-ml1)$' || true")
        assert proc.returncode == 0 and proc.stdout.strip() == "", f"{image}: {proc.stdout}"
    proc = _run(runtime, "dpkg-query -W -f '${Package}\\n' | grep -E '^(nvidia-|libcu|libnpp)' || true")
    assert proc.stdout.strip() == "", proc.stdout


def test_drivers_r525_and_later_are_let_in(cuda12_images):
    """libnvidia-container refuses a driver whose CUDA is below NVIDIA_REQUIRE_CUDA: R535 reports 12.2."""
    runtime, _ = cuda12_images
    labels = engine.image_labels(runtime)
    assert labels["io.imagekit.component.cuda.min_driver"] == "525.60.13"
    assert labels["io.imagekit.component.cuda.version"] == "12.4.1"
    inspect = subprocess.run([engine.docker_cli(), "image", "inspect", runtime], capture_output=True, text=True,
                             check=True)
    env = dict(kv.split("=", 1) for kv in json.loads(inspect.stdout)[0]["Config"]["Env"])
    assert env["NVIDIA_REQUIRE_CUDA"] == "cuda>=12.0"


def test_nccl_tests_carry_sm_80_sm_90_and_compute_90_ptx(cuda12_images):
    """CUDA 12.4 cannot compile sm_100: Blackwell JIT-compiles the compute_90 PTX."""
    _, devel = cuda12_images
    proc = _run(devel, "cd /usr/local/nccl-tests && for f in bin/all_reduce_perf lib/*.so*; do [ -f \"$f\" ] && "
                       "cuobjdump --list-elf --list-ptx \"$f\" 2>/dev/null; done; true")
    out = proc.stdout
    assert "sm_80.cubin" in out and "sm_90.cubin" in out, out
    assert "sm_90.ptx" in out and "sm_100" not in out, out


def test_runtime_is_at_most_four_tenths_of_devel(cuda12_images):
    runtime, devel = cuda12_images
    sizes = image_sizes(runtime, devel)
    assert sizes[runtime] <= 0.40 * sizes[devel], sizes


def test_each_check_catches_a_broken_copy(cuda12_images, tmp_path):
    runtime, devel = cuda12_images
    broken_rt = broken_copy(runtime, BREAK_RUNTIME, "imagekit-test/cuda12-broken:runtime", tmp_path / "rt")
    broken_dv = broken_copy(devel, BREAK_DEVEL, "imagekit-test/cuda12-broken:devel", tmp_path / "dv")
    try:
        outcomes = check_outcomes(broken_rt, runner.checks_from_image(runtime))
        failed = {i for i, o in outcomes.items() if o.status == "failed"}
        assert BROKEN_RUNTIME_FAILS <= failed, BROKEN_RUNTIME_FAILS - failed
        assert "libcudart.so.12 => not found" in outcomes["image.ldd_closure"].detail
        assert "/opt/other/libnccl.so.2" in outcomes["nccl-tests.loads_nccl"].detail
        devel_outcomes = check_outcomes(broken_dv, runner.checks_from_image(devel))
        assert devel_outcomes["cuda.nvcc"].status == "failed"
        # A compiler that exits 0 without writing a program does not pass the link check either.
        assert devel_outcomes["cuda.nvcc_link"].status == "failed"
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", broken_rt, broken_dv], capture_output=True)
