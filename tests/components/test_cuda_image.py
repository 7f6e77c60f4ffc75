"""The offline CUDA stack (debian-cuda), built for real and checked green and red.

It uses the same component code as the production nccl-tests stack: CUDA 13 from
NVIDIA's wheels, gdrcopy, UCX, PMIx, Open MPI and nccl-tests built from the site
mirror's upstream tarballs (../shared/mirror, used in place), NCCL from its wheel.
No GPU exists here: the checks that need one are reported as not run, and every
other check runs on the real runtime (and devel) image, then fails on a broken copy.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from helpers.broken_images import broken_copy
from helpers.cuda_images import check_outcomes, green_but_hardware, image_sizes
from imagekit import stack
from imagekit.engines import docker as engine
from imagekit.checks import runner

pytestmark = pytest.mark.engine

# What a broken copy breaks, and which checks must then fail.
BREAK_RUNTIME = """set -e
rm -f /usr/local/cuda-13.2/targets/x86_64-linux/lib/libcudart.so.13
rm -f /usr/local/ucx/lib/libucs.so.0*
printf '#!/bin/sh\\necho "# Library version: 1.18.1"\\necho "#define ENABLE_MT 0"\\n' > /usr/local/ucx/bin/ucx_info
printf '#!/bin/sh\\necho "MCA pml: ob1 (MCA v2.1.0)"\\necho "MCA pmix: pmix3x"\\n' > /usr/local/openmpi/bin/ompi_info
printf '#!/bin/sh\\necho "MCA ras: simulator"\\n' > /usr/local/openmpi/bin/prte_info
mkdir -p /opt/other && cp /usr/local/nccl/lib/libnccl.so.2 /opt/other/
echo /opt/other > /etc/ld.so.conf.d/00-other.conf
ldconfig
rm -f /etc/profile.d/00-imagekit-environment.sh /usr/local/bin/imagekit-mpi-ring
rm -f /usr/local/ucx/lib/ucx/libuct_cuda.so.0*
printf '#!/bin/sh\necho "imagekit-cuda-mpi-ring: built against an MPI without CUDA support"\nexit 1\n' > /usr/local/bin/imagekit-cuda-mpi-ring
"""
BROKEN_RUNTIME_FAILS = {"cuda.runtime", "image.ldd_closure", "ucx.mt", "ucx.cuda_build", "openmpi.pml_ucx",
                        "openmpi.cuda", "openmpi.pmix_external", "openmpi.slurm", "openmpi.ring",
                        "nccl-tests.loads_nccl", "image.login_env", "ucx.cuda_module", "openmpi.cuda_probe"}
# The CUDA tree as it was before lib beside lib64: nvcc.profile links with -L$(TOP)/lib (issue 38).
BREAK_NVCC_LINK = "rm /usr/local/cuda-13.2/lib"
# nccl-tests' binaries replaced by device code for sm_80 and sm_90 only (what the stack built before
# Blackwell), compiled with the image's own nvcc; then nvcc itself replaced by an older one.
BREAK_DEVEL = """set -e
printf '__global__ void k(int *p) { *p = 1; }\\n' > /tmp/k.cu
/usr/local/cuda/bin/nvcc -c -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90 -o /tmp/k.o /tmp/k.cu
for f in /usr/local/nccl-tests/bin/*; do cp /tmp/k.o "$f"; done
printf '#!/bin/sh\\necho "Cuda compilation tools, release 12.0, V12.0.76"\\n' > /usr/local/cuda-13.2/bin/nvcc
"""


@pytest.fixture(scope="module")
def cuda_stack(site_mirror):
    return stack.load("debian-cuda", mirror=str(site_mirror))




def test_runtime_image_passes_every_check_and_leaves_gpu_checks_not_run(cuda_images, cuda_stack):
    runtime, _ = cuda_images
    outcomes = green_but_hardware(runtime)
    assert BROKEN_RUNTIME_FAILS <= {i for i, o in outcomes.items() if o.status == "passed"}
    assert "cuda.nvcc" not in outcomes  # nvcc is in the devel image only


def test_devel_image_has_the_stacks_nvcc(cuda_images):
    _, devel = cuda_images
    outcomes = check_outcomes(devel, runner.checks_from_image(devel))
    assert outcomes["cuda.nvcc"].status == "passed"
    assert outcomes["nccl-tests.sm_code"].status == "passed", outcomes["nccl-tests.sm_code"].detail
    assert not [i for i, o in outcomes.items() if o.status == "failed"]


def test_runtime_is_at_most_four_tenths_of_devel(cuda_images):
    """The issue's size target. Open MPI 5's HTML manual (share/doc, 69 MB) and man pages are removed
    where it is installed; the help texts mpirun prints from stay."""
    runtime, devel = cuda_images
    sizes = image_sizes(runtime, devel)
    assert sizes[runtime] <= 0.40 * sizes[devel], sizes
    listing = subprocess.run([engine.docker_cli(), "run", "--rm", "--entrypoint", "ls", runtime,
                              "/usr/local/openmpi/share"], capture_output=True, text=True, check=True).stdout.split()
    assert sorted(listing) == ["openmpi", "prte"], listing


def test_each_check_catches_a_broken_copy(cuda_images, tmp_path):
    runtime, devel = cuda_images
    (tmp_path / "rt").mkdir()
    (tmp_path / "dv").mkdir()
    broken_rt = broken_copy(runtime, BREAK_RUNTIME, "imagekit-test/cuda-broken:runtime", tmp_path / "rt")
    broken_dv = broken_copy(devel, BREAK_DEVEL, "imagekit-test/cuda-broken:devel", tmp_path / "dv")
    try:
        outcomes = check_outcomes(broken_rt, runner.checks_from_image(runtime))
        failed = {i for i, o in outcomes.items() if o.status == "failed"}
        assert BROKEN_RUNTIME_FAILS <= failed, BROKEN_RUNTIME_FAILS - failed
        assert "libucs.so.0 => not found" in outcomes["image.ldd_closure"].detail
        assert "/opt/other/libnccl.so.2" in outcomes["nccl-tests.loads_nccl"].detail
        devel_outcomes = check_outcomes(broken_dv, runner.checks_from_image(devel))
        assert devel_outcomes["cuda.nvcc"].status == "failed"
        assert devel_outcomes["nccl-tests.sm_code"].status == "failed"
        assert "sm_90.cubin" in devel_outcomes["nccl-tests.sm_code"].detail
        assert "sm_100.cubin" not in devel_outcomes["nccl-tests.sm_code"].detail
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", broken_rt, broken_dv], capture_output=True)


def test_plain_nvcc_compiles_and_links_and_a_missing_lib_link_breaks_it(cuda_images, tmp_path):
    """Issue 38: the wheels' nvcc.profile links with -L$(TOP)/lib (read in the image: `LIBRARIES =+ ...
    "-L$(TOP)/lib/stubs" "-L$(TOP)/lib"`), and the cudart wheel carries libcudart_static.a and
    libcudadevrt.a; with lib64 alone, plain `nvcc k.cu -o k` failed to link. The check passes on the real
    devel image and fails on a copy without the lib link, naming the missing libraries."""
    _, devel = cuda_images
    profile = subprocess.run([engine.docker_cli(), "run", "--rm", "--entrypoint", "sh", devel, "-c",
                              "cat /usr/local/cuda/bin/nvcc.profile; ls /usr/local/cuda/lib/"],
                             capture_output=True, text=True, check=True).stdout
    assert '"-L$(TOP)/lib"' in profile and "libcudart_static.a" in profile and "libcudadevrt.a" in profile
    assert check_outcomes(devel, runner.checks_from_image(devel))["cuda.nvcc_link"].status == "passed"
    broken = broken_copy(devel, BREAK_NVCC_LINK, "imagekit-test/cuda-broken:nvcc-link", tmp_path)
    try:
        outcomes = check_outcomes(broken, runner.checks_from_image(devel))
        assert outcomes["cuda.nvcc"].status == "passed"
        assert outcomes["cuda.nvcc_link"].status == "failed"
        assert "cannot find -lcudart_static" in outcomes["cuda.nvcc_link"].detail
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", broken], capture_output=True)


def test_the_binaries_were_built_for_hopper_and_blackwell(cuda_images):
    """nccl-tests carries SASS for each architecture and PTX for the newest: cuobjdump (from the CUDA
    wheels, devel image) lists the cubins of every installed binary, sm_100 (B200/GB200) included."""
    runtime, devel = cuda_images
    assert engine.image_labels(runtime)["io.imagekit.component.nccl-tests.gencode"] == "80,90,100,120"
    out = subprocess.run([engine.docker_cli(), "run", "--rm", devel, "sh", "-c",
                          "for f in /usr/local/nccl-tests/bin/*; do /usr/local/cuda/bin/cuobjdump --list-elf $f; done"],
                         capture_output=True, text=True)
    archs = set(re.findall(r"\.(sm_\d+)\.cubin", out.stdout))
    assert archs == {"sm_80", "sm_90", "sm_100", "sm_120"}, out.stdout
