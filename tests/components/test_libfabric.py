"""libfabric from upstream with CUDA, and aws-ofi-nccl over it: the shipped EFA and Slingshot stacks render
with GPUDirect RDMA and NCCL_NET set, and the plugin builds against the stack's libfabric, not the distro's.
(Built for real with the site mirror: tests/components/test_fabric_images.py.)"""

from __future__ import annotations

import pytest

from imagekit import render, stack

FABRIC = stack.SHIPPED_DIR / "fabric"


@pytest.fixture(autouse=True)
def _site_pins(monkeypatch):
    """aws-ofi-nccl and libfabric 2.6.0 have no upstream pin in imagekit: the stand-in mirror's site pins."""
    from pathlib import Path

    monkeypatch.setenv("IMAGEKIT_SITE", str(Path(__file__).resolve().parents[1] / "data" / "site-mirror-pins.yaml"))


def test_efa_stack_has_gpudirect_rdma_and_fails_rather_than_falling_back():
    s = stack.load(str(FABRIC / "debian-efa.yaml"))
    plugin, fabric = s.get("aws-ofi-nccl"), s.get("libfabric")
    assert s.provider("libfabric") is fabric and fabric.enabled("cuda") and fabric.enabled("gdrcopy")
    assert plugin.labels()["gdr"] == "true" and plugin.labels()["libfabric"] == "2.6.0"
    env = plugin.environment()
    assert env["NCCL_NET"] == "Libfabric" and env["FI_PROVIDER"] == "efa" and env["OMPI_MCA_pml"] == "^ucx"
    text = render.render(s, "docker")
    assert "--with-libfabric=/opt/libfabric" in text and "--enable-platform-aws" in text
    assert "libfabric-dev" not in text and "libfabric1" not in text   # no distro libfabric at all
    # Every debian-cuda layer comes first: the fabric goes on top.
    assert text.index("nccl-tests-2.19.6") < text.index("libfabric-2.6.0") < text.index("aws-ofi-nccl-1.21.1")


def test_slingshot_stack_keeps_to_cxi_and_builds_against_libfabric():
    s = stack.load(str(FABRIC / "debian-slingshot.yaml"))
    assert s.get("aws-ofi-nccl").environment()["FI_PROVIDER"] == "cxi"
    assert "cxi" not in s.get("libfabric").opts["providers"]      # the host's libfabric brings CXI
    assert "--with-libfabric=/opt/libfabric" in render.render(s, "docker")


def test_a_libfabric_without_cuda_needs_the_no_gdr_acceptance(tmp_path):
    from imagekit.util.errors import StackError

    text = (FABRIC / "debian-efa.yaml").read_text()     # extends debian-cuda by name: found from anywhere
    path = tmp_path / "nogdr.yaml"
    path.write_text(text.replace("cuda: true, gdrcopy: true", "cuda: false"))
    with pytest.raises(StackError, match="no GPUDirect RDMA"):
        stack.load(str(path))
    path.write_text(text.replace("cuda: true, gdrcopy: true", "cuda: false")
                    .replace("provider: efa}", "provider: efa, accept: [no-gdr]}"))
    assert stack.load(str(path)).get("aws-ofi-nccl").labels()["gdr"] == "false"


def test_the_providers_check_reads_fi_info_line_by_line():
    """`fi_info -l` prints one provider a line, after the others (as libfabric 2.6 printed it here): each
    device-free provider asked for must start a line, and a missing one fails the check."""
    import re

    from imagekit import stack

    check = next(c for c in stack.load(str(FABRIC / "debian-efa.yaml")).get("libfabric").checks()
                 if c.id == "libfabric.providers")
    listed = "efa:\nversion: 206.0\nofi_rxm:\nversion: 206.0\nshm:\nversion: 206.0\ntcp:\nversion: 206.0\n"
    assert re.search(check.expect, listed)
    assert not re.search(check.expect, listed.replace("tcp:", "psm3:"))
