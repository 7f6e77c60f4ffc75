"""The fabric stacks (src/imagekit/stacks/fabric/) built for real from the site mirror, and their checks held
against broken copies.

- debian-efa: debian-cuda12 (Debian 13, rdma-core 56) + libfabric 2.6.0 (CUDA, gdrcopy, efa) + aws-ofi-nccl.
- debian-slingshot: debian-cuda + libcxi from HPE's sources + libfabric 2.6.0 with the cxi provider.

No EFA or Slingshot NIC and no GPU exist here: the checks show what can be shown without them (the dlopen
closure of libfabric, the plugin and NCCL resolved by the image's loader; libfabric's CUDA interface getting
as far as the driver; rdma-core 46+; the plugin's topology files; NCCL_NET set so NCCL fails closed; CXI
built in, HPE's layout and the libraries a host libfabric needs), and the GPU and NIC checks are "not run".
Each broken copy is what a real mistake leaves: the runtime without ``libcudart.so`` is round 3's debian-efa
(fourth CUDA review, J1), the Slingshot image without libcxi is a host-bind image whose bind went wrong.

Heavy: cold builds compile UCX, PMIx, Open MPI, nccl-tests, libfabric, libcxi and aws-ofi-nccl on two cores.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from helpers.broken_images import broken_copy
from helpers.cuda_images import check_outcomes, green_but_hardware, image_sizes
from imagekit import build, stack
from imagekit.checks import runner
from imagekit.engines import docker as engine

pytestmark = [pytest.mark.engine, pytest.mark.heavy]

FABRIC = stack.SHIPPED_DIR / "fabric"
# Checks that need a GPU or the fabric's NIC, besides the CUDA stacks' own (helpers.cuda_images).
EFA_HARDWARE = frozenset({"libfabric.fabric", "libfabric.hmem", "libfabric.cuda_transfer", "aws-ofi-nccl.nccl_loads_it"})
SLINGSHOT_HARDWARE = frozenset({"libfabric.fabric", "libfabric.hmem", "aws-ofi-nccl.nccl_loads_it", "libcxi.devices"})
# Round 3's debian-efa as far as J1 goes: the runtime keeps libcudart.so.12 and not the name libfabric opens.
# With it: a topology file gone (J10), the rdma-core of Debian 12 (J2, as dpkg records it), and NCCL_NET
# emptied (an image that would fall back to sockets).
EFA_BREAK = """rm -f /usr/local/cuda/lib64/libcudart.so
ldconfig
rm -f /opt/amazon/aws-ofi-nccl/share/aws-ofi-nccl/xml/p4d-24xl-topo.xml
sed -i '/^Package: libibverbs1$/,/^$/ s/^Version: .*/Version: 44.0-2/' /var/lib/dpkg/status
"""
SLINGSHOT_BREAK = """rm -f /opt/cxi/lib64/libcxi.so* /opt/cxi/bin/cxi_stat
ldconfig
"""


def _build(path, mirror) -> str:
    logs = os.environ.get("IMAGEKIT_TEST_LOGS", "build/logs")
    return build.build(stack.load(str(path), mirror=str(mirror)), build.BuildRequest(log_dir=logs)).tags[0]


@pytest.fixture(scope="module")
def efa_image(cuda12_images, site_mirror) -> str:
    return _build(FABRIC / "debian-efa.yaml", site_mirror)


@pytest.fixture(scope="module")
def slingshot_image(cuda_images, site_mirror) -> str:
    return _build(FABRIC / "debian-slingshot.yaml", site_mirror)


def closure(image: str) -> str:
    """The image's own dlopen closure check, run as imagekit check runs it: its output."""
    spec = next(c for c in runner.checks_from_image(image) if c["id"] == "image.dlopen_closure")
    return subprocess.run([engine.docker_cli(), "run", "--rm", "--entrypoint", "sh", image, "-c", spec["run"]],
                          capture_output=True, text=True).stdout


def env_of(image: str, names: str) -> str:
    return subprocess.run([engine.docker_cli(), "run", "--rm", "--entrypoint", "sh", image, "-c", f"echo {names}"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_efa_image_resolves_what_it_opens_and_fails_rather_than_falls_back(efa_image):
    outcomes = green_but_hardware(efa_image, EFA_HARDWARE)
    for check in ("image.dlopen_closure", "libfabric.cuda", "libfabric.efa_rdma_write", "aws-ofi-nccl.topology",
                  "aws-ofi-nccl.fails_closed", "image.ldd_closure"):
        assert outcomes[check].status == "passed", check
    out = closure(efa_image)
    assert "ok       libfabric.so.1 opens libcudart.so -> /usr/local/cuda" in out
    assert "ok       libnccl.so.2 opens libnccl-net-ofi.so -> /opt/amazon/aws-ofi-nccl/lib/" in out
    assert "ok       libnccl-net-ofi.so opens libgdrapi.so" in out and ", 0 missing," in out
    assert env_of(efa_image, "$NCCL_NET $NCCL_NET_PLUGIN $FI_PROVIDER") == "Libfabric ofi efa"
    print("debian-efa:", out.strip().splitlines()[-1], image_sizes(efa_image))


def test_round3s_efa_runtime_is_caught_by_the_capability_checks(efa_image, tmp_path):
    broken = broken_copy(efa_image, EFA_BREAK, "imagekit-test/efa-broken:latest", tmp_path / "b")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "Dockerfile").write_text(f"FROM {broken}\nENV NCCL_NET=\n")
    subprocess.run([engine.docker_cli(), "build", "-q", "-t", broken, str(tmp_path / "e")], check=True,
                   capture_output=True, env={**os.environ, "DOCKER_BUILDKIT": "1"})
    try:
        outcomes = check_outcomes(broken, runner.checks_from_image(efa_image))
        failed = {i for i, o in outcomes.items() if o.status == "failed"}
        assert failed == {"image.dlopen_closure", "libfabric.cuda", "libfabric.efa_rdma_write",
                          "aws-ofi-nccl.topology", "aws-ofi-nccl.fails_closed"}, failed
        assert "libcudart.so" in outcomes["image.dlopen_closure"].detail
        out = closure(broken)
        assert "MISSING  libfabric.so.1 opens libcudart.so: the loader cannot find it" in out
        print("debian-efa without libcudart.so:", out.strip().splitlines()[-1])
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", broken], capture_output=True)


def test_the_slingshot_image_has_cxi_built_in_in_hpes_layout(slingshot_image):
    outcomes = green_but_hardware(slingshot_image, SLINGSHOT_HARDWARE)
    for check in ("image.dlopen_closure", "libfabric.cuda", "libfabric.cxi_built", "libfabric.host_libs",
                  "libcxi.lib", "libcxi.tools", "aws-ofi-nccl.fails_closed"):
        assert outcomes[check].status == "passed", check
    out = closure(slingshot_image)
    assert "ok       libnccl.so.2 opens libnccl-net-ofi.so" in out and ", 0 missing," in out
    ldd = subprocess.run([engine.docker_cli(), "run", "--rm", "--entrypoint", "sh", slingshot_image, "-c",
                          "ldd /opt/libfabric/lib64/libfabric.so.1; echo $FI_CXI_DISABLE_HOST_REGISTER "
                          "$FI_MR_CACHE_MONITOR"], capture_output=True, text=True, check=True).stdout
    assert "libcxi.so.1 => /opt/cxi/lib64/libcxi.so.1" in ldd and ldd.strip().endswith("1 userfaultfd")
    print("debian-slingshot:", out.strip().splitlines()[-1], image_sizes(slingshot_image))


def test_a_slingshot_image_without_libcxi_is_caught(slingshot_image, tmp_path):
    broken = broken_copy(slingshot_image, SLINGSHOT_BREAK, "imagekit-test/slingshot-broken:latest", tmp_path)
    try:
        outcomes = check_outcomes(broken, runner.checks_from_image(slingshot_image))
        failed = {i for i, o in outcomes.items() if o.status == "failed"}
        assert {"image.dlopen_closure", "image.ldd_closure", "libcxi.lib", "libcxi.tools", "libfabric.cxi_built",
                "libfabric.host_libs"} <= failed, failed
        out = closure(broken)
        assert "MISSING  libfabric.so.1 does not load: libcxi.so.1: cannot open shared object file" in out
        print("debian-slingshot without libcxi:", out.strip().splitlines()[-1])
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", broken], capture_output=True)
