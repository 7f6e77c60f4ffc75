"""The EFA stack (src/imagekit/stacks/fabric/debian-efa.yaml) built for real from the site mirror: libfabric
2.6.0 from source with CUDA and gdrcopy, aws-ofi-nccl against it. No EFA device or GPU exists here: the checks
show what can be shown without one (libfabric's CUDA memory support compiled in, its device-free providers,
the plugin's `ldd -r` closure against this libfabric, NCCL_NET), then fail on a broken copy: libfabric
rebuilt without CUDA is what a distro's library is.

Heavy: a cold build compiles libfabric and aws-ofi-nccl (several minutes on 2 cores) on top of debian-cuda.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from helpers.broken_images import broken_copy
from helpers.cuda_images import check_outcomes
from imagekit import build, stack
from imagekit.checks import runner
from imagekit.engines import docker as engine

pytestmark = [pytest.mark.engine, pytest.mark.heavy]

EFA = stack.SHIPPED_DIR / "fabric" / "debian-efa.yaml"
FABRIC_CHECKS = {"libfabric.lib", "libfabric.version", "libfabric.providers", "libfabric.cuda",
                 "aws-ofi-nccl.ldd", "aws-ofi-nccl.nccl_finds_it", "aws-ofi-nccl.fi_info"}
# libfabric without its CUDA support (the string it dlsyms is gone) and without its tcp provider.
BREAK = """set -e
sed -i 's/cuPointerGetAttribute/cuPointerGetAttributX/g' /opt/libfabric/lib/libfabric.so.1.*
printf '#!/bin/sh\\necho "psm3: psm3"\\n' > /opt/libfabric/bin/fi_info
"""


@pytest.fixture(scope="module")
def efa_image(cuda_images, site_mirror) -> str:
    logs = os.environ.get("IMAGEKIT_TEST_LOGS", "build/logs")
    return build.build(stack.load(str(EFA), mirror=str(site_mirror)), build.BuildRequest(log_dir=logs)).tags[0]


def test_the_efa_image_has_gpudirect_rdma_and_fails_rather_than_falls_back(efa_image):
    outcomes = check_outcomes(efa_image, runner.checks_from_image(efa_image))
    failed = {i: o.detail for i, o in outcomes.items() if o.status == "failed"}
    assert not failed, failed
    assert {i for i, o in outcomes.items() if o.status == "passed"} >= FABRIC_CHECKS | {"image.ldd_closure"}
    env = subprocess.run([engine.docker_cli(), "run", "--rm", "--entrypoint", "sh", efa_image, "-c",
                          "echo $NCCL_NET $NCCL_NET_PLUGIN $FI_PROVIDER; "
                          "ldd /opt/amazon/aws-ofi-nccl/lib/libnccl-net-ofi.so | grep libfabric"],
                         capture_output=True, text=True, check=True).stdout
    assert env.startswith("Libfabric ofi efa") and "/opt/libfabric/lib/libfabric.so.1" in env


def test_a_libfabric_without_cuda_is_caught(efa_image, tmp_path):
    broken = broken_copy(efa_image, BREAK, "imagekit-test/efa-broken:latest", tmp_path)
    try:
        outcomes = check_outcomes(broken, runner.checks_from_image(efa_image))
        assert outcomes["libfabric.cuda"].status == "failed"
        assert outcomes["libfabric.providers"].status == "failed"
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", broken], capture_output=True)
