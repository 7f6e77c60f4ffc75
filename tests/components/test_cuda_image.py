"""The offline CUDA stack (debian-cuda), built for real and checked green and red.

It uses the same component code as the production nccl-tests stack: CUDA 13 from
NVIDIA's wheels, gdrcopy, UCX, PMIx, Open MPI and nccl-tests built from the site
mirror's upstream tarballs (../shared/mirror, used in place), NCCL from its wheel.
No GPU exists here: the checks that need one are reported as not run, and every
other check runs on the real runtime (and devel) image, then fails on a broken copy.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from imagekit import check, engine, stack

pytestmark = pytest.mark.engine

# Checks that need a GPU or an RDMA fabric: "not run" here, run where `--with gpu,fabric` is offered.
HARDWARE_CHECKS = {"cuda.driver", "ucx.cuda", "nccl-tests.all_reduce", "gdrcopy.device", "ofed.devices",
                   "ucx.verbs"}
# What a broken copy breaks, and which checks must then fail.
BREAK_RUNTIME = """set -e
rm -f /usr/local/cuda-13.0/targets/x86_64-linux/lib/libcudart.so.13
rm -f /usr/local/ucx/lib/libucs.so.0*
printf '#!/bin/sh\\necho "# Library version: 1.18.1"\\necho "#define ENABLE_MT 0"\\n' > /usr/local/ucx/bin/ucx_info
printf '#!/bin/sh\\necho "MCA pml: ob1 (MCA v2.1.0)"\\necho "MCA pmix: pmix3x"\\n' > /usr/local/openmpi/bin/ompi_info
mkdir -p /opt/other && cp /usr/local/nccl/lib/libnccl.so.2 /opt/other/
echo /opt/other > /etc/ld.so.conf.d/00-other.conf
ldconfig
rm -f /etc/profile.d/zz-imagekit-environment.sh /usr/local/bin/imagekit-mpi-ring
"""
BROKEN_RUNTIME_FAILS = {"cuda.runtime", "image.ldd_closure", "ucx.mt", "ucx.cuda_build", "openmpi.pml_ucx",
                        "openmpi.cuda", "openmpi.pmix_external", "openmpi.srun_direct_launch", "openmpi.ring",
                        "nccl-tests.loads_nccl", "image.login_env"}
BREAK_DEVEL = """set -e
printf '#!/bin/sh\\necho "Cuda compilation tools, release 12.0, V12.0.76"\\n' > /usr/local/cuda-13.0/bin/nvcc
"""


@pytest.fixture(scope="module")
def cuda_stack(site_mirror):
    return stack.load("debian-cuda", mirror=str(site_mirror))


def _broken_copy(image: str, script: str, tag: str, tmp_path) -> str:
    (tmp_path / "Dockerfile").write_text(f"FROM {image}\nRUN {script.strip().replace(chr(10), ' && ')}\n")
    subprocess.run([engine.docker_cli(), "build", "-q", "-t", tag, str(tmp_path)], check=True,
                   capture_output=True, env={**os.environ, "DOCKER_BUILDKIT": "1"})
    return tag


def _outcomes(image: str, specs) -> dict:
    return {o.id: o for o in check.run(image, specs).outcomes}


def test_runtime_image_passes_every_check_and_leaves_gpu_checks_not_run(cuda_images, cuda_stack):
    runtime, _ = cuda_images
    outcomes = _outcomes(runtime, check.checks_from_image(runtime))
    bad = {i: o.detail for i, o in outcomes.items() if o.status == "failed"}
    assert not bad, bad
    assert {i for i, o in outcomes.items() if o.status == "not-run"} == HARDWARE_CHECKS
    assert BROKEN_RUNTIME_FAILS <= {i for i, o in outcomes.items() if o.status == "passed"}
    assert "cuda.nvcc" not in outcomes  # nvcc is in the devel image only


def test_devel_image_has_the_stacks_nvcc(cuda_images):
    _, devel = cuda_images
    outcomes = _outcomes(devel, check.checks_from_image(devel))
    assert outcomes["cuda.nvcc"].status == "passed"
    assert not [i for i, o in outcomes.items() if o.status == "failed"]


def test_each_check_catches_a_broken_copy(cuda_images, tmp_path):
    runtime, devel = cuda_images
    (tmp_path / "rt").mkdir()
    (tmp_path / "dv").mkdir()
    broken_rt = _broken_copy(runtime, BREAK_RUNTIME, "imagekit-test/cuda-broken:runtime", tmp_path / "rt")
    broken_dv = _broken_copy(devel, BREAK_DEVEL, "imagekit-test/cuda-broken:devel", tmp_path / "dv")
    try:
        outcomes = _outcomes(broken_rt, check.checks_from_image(runtime))
        failed = {i for i, o in outcomes.items() if o.status == "failed"}
        assert BROKEN_RUNTIME_FAILS <= failed, BROKEN_RUNTIME_FAILS - failed
        assert "libucs.so.0 => not found" in outcomes["image.ldd_closure"].detail
        assert "/opt/other/libnccl.so.2" in outcomes["nccl-tests.loads_nccl"].detail
        devel_outcomes = _outcomes(broken_dv, check.checks_from_image(devel))
        assert devel_outcomes["cuda.nvcc"].status == "failed"
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", broken_rt, broken_dv], capture_output=True)


def test_the_binaries_were_built_for_the_stacks_gpu_architectures(cuda_images, cuda_stack):
    """nccl-tests carries SASS for each gencode: the fatbinary's ELF images name their sm_XX."""
    runtime, _ = cuda_images
    labels = engine.image_labels(runtime)
    assert labels["io.imagekit.component.nccl-tests.gencode"] == "80,90"
    out = subprocess.run([engine.docker_cli(), "run", "--rm", runtime, "sh", "-c",
                          "grep -c -a -o 'sm_90' /usr/local/nccl-tests/bin/all_reduce_perf"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and int(out.stdout.strip()) > 0, out.stdout + out.stderr
