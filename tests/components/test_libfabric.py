"""libfabric from upstream with CUDA, and aws-ofi-nccl over it: the shipped EFA and Slingshot stacks render
with GPUDirect RDMA and NCCL_NET set, and the plugin builds against the stack's libfabric, not the distro's.
EFA's provider is held to rdma-core 46+ (RDMA write), Slingshot's builds CXI from HPE's sources, and the
runtime carries the libcudart.so that libfabric dlopens. (Built for real with the site mirror:
tests/components/test_fabric_images.py.)"""

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
    # Every debian-cuda12 layer comes first: the fabric goes on top.
    assert text.index("nccl-tests-2.19.6") < text.index("libfabric-2.6.0") < text.index("aws-ofi-nccl-1.21.1")
    # J2: Debian 13's rdma-core (56) under the efa provider; J1: the runtime has the name libfabric dlopens;
    # J10: the topology files the plugin points NCCL at.
    assert s.base.distro == "debian13" and s.get("ofed").version.startswith("56")
    runtime = text[text.index("AS runtime"):]
    assert "ln -sf libcudart.so.12 /usr/local/cuda/lib64/libcudart.so" in runtime
    assert "COPY --from=devel /opt/amazon/aws-ofi-nccl/share/aws-ofi-nccl/xml" in runtime
    assert "benchmarks/fi_rdm_pingpong" in text             # fabtests for the GPU check (-D cuda)


def test_slingshot_stack_builds_cxi_from_hpes_sources_and_keeps_hpes_layout(site_mirror):
    s = stack.load(str(FABRIC / "debian-slingshot.yaml"), mirror=str(site_mirror))
    env = s.get("aws-ofi-nccl").environment()
    assert env["FI_PROVIDER"] == "cxi" and env["FI_CXI_DISABLE_HOST_REGISTER"] == "1"
    assert env["FI_MR_CACHE_MONITOR"] == "userfaultfd" and env["NCCL_NET_GDR_LEVEL"] == "PHB"
    fabric = s.get("libfabric")
    assert "cxi" in fabric.opts["providers"] and s.provider("cxi").name == "libcxi"
    opts = fabric.configure_opts()
    assert {"--enable-cxi=/opt/cxi", "--with-cassini-headers=/opt/cxi", "--with-cxi-uapi-headers=/opt/cxi",
            "--libdir=/opt/libfabric/lib64"} <= set(opts)
    assert fabric.labels()["host_bind"] == "/opt/libfabric"
    text = render.render(s, "docker")
    for name in ("shs-cassini-headers-14.0.0.tar.gz", "shs-cxi-driver-14.0.1.tar.gz", "shs-libcxi-14.0.0.tar.gz"):
        assert f"COPY sources/{name}" in text
    # Without a mirror: HPE's tag archives, which unpack to REPO-release-shs-X and have no configure yet.
    online = render.render(stack.load(str(FABRIC / "debian-slingshot.yaml")), "docker")
    assert "shs-libcxi/archive/refs/tags/release/shs-14.0.0.tar.gz" in online
    assert "cd /var/tmp/shs-libcxi-release-shs-14.0.0" in online and "autoconf" in online
    assert text.index("shs-libcxi-14.0.0") < text.index("libfabric-2.6.0") < text.index("aws-ofi-nccl-1.21.1")
    assert "--libdir=/opt/cxi/lib64" in text                           # HPE's layout, for a host bind
    runtime = text[text.index("AS runtime"):]
    assert "COPY --from=devel /opt/cxi/lib64 /opt/cxi/lib64" in runtime and "libcurl4" in runtime


def test_every_slingshot_setting_names_its_source():
    from imagekit.components.aws_ofi_nccl import SLINGSHOT_ENV

    for name, (value, source) in SLINGSHOT_ENV.items():
        assert value and any(site in source for site in ("HPE", "CSCS", "ISAM")), name


@pytest.mark.parametrize("stack_file, old, new, problem, key, fix", [
    # J2: Debian 12's rdma-core 44 has no RDMA write for EFA; aws-ofi-nccl's default protocol on p5/p6
    # would refuse the endpoint.
    ("debian-efa.yaml", "extends: debian-cuda12", "extends: debian-cuda",
     "needs rdma-core 46 or newer .* debian12's inbox rdma-core is 44.0", "components.libfabric.providers",
     "debian-cuda12"),
    # CXI builds against HPE's libcxi: the stack's libcxi component, or one in the base image.
    ("debian-slingshot.yaml", "  libcxi:", "  # libcxi:", "`cxi: true` needs HPE's libcxi",
     "components.libfabric.cxi", "libcxi"),
])
def test_a_fabric_without_what_its_provider_builds_on_is_refused(tmp_path, stack_file, old, new, problem, key, fix):
    from imagekit.util.errors import StackError

    path = tmp_path / stack_file
    path.write_text((FABRIC / stack_file).read_text().replace(old, new))
    with pytest.raises(StackError, match=problem) as info:
        stack.load(str(path))
    assert info.value.key == key and fix in info.value.hint


def test_a_libfabric_without_cuda_needs_the_no_gdr_acceptance(tmp_path):
    from imagekit.util.errors import StackError

    # extends debian-cuda12 by name: found from anywhere; fabtests move CUDA memory, so they go too.
    text = (FABRIC / "debian-efa.yaml").read_text().replace(", fabtests: [fi_rdm_pingpong]", "")
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


def test_the_gpu_checks_judge_the_output_upstream_prints():
    """No GPU here: the checks that need one are held to the lines upstream's code prints (NCCL's "Using
    network", aws-ofi-nccl's src/nccl_ofi_rdma.cpp / nccl_ofi_sendrecv.cpp GDR lines, libfabric's
    src/hmem.c and src/hmem_cuda.c log lines), as a passing and a fallen-back run would show them."""
    import re

    efa = stack.load(str(FABRIC / "debian-efa.yaml"))
    by_id = {c.id: c for c in efa.get("libfabric").checks() + efa.get("aws-ofi-nccl").checks()}

    def passes(check, output):
        return bool(re.search(check.expect, output)) and not (check.excluded and re.search(check.excluded, output))

    nccl = by_id["aws-ofi-nccl.nccl_loads_it"]
    good = ("h:1:1 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.21.1\n"
            "h:1:1 [0] NCCL INFO NET/OFI Using Libfabric 1.18 API, with GPUDirect RDMA support\n"
            "h:1:1 [0] NCCL INFO Using network Libfabric\nloaded rc=0\nwithout the plugin rc=1\n")
    assert passes(nccl, good)
    assert not passes(nccl, good.replace("Using network Libfabric", "Using network Socket"))
    assert not passes(nccl, good.replace("with GPUDirect", "without GPUDirect"))
    assert not passes(nccl, good.replace("without the plugin rc=1", "without the plugin rc=0"))   # fell back
    cuda = by_id["libfabric.cuda"]
    gpu_less = "libfabric:9:1:core:core:cuda_hmem_dl_init():571<warn> Failed to dlopen libcuda.so.1\ntcp:\nshm:\n"
    assert passes(cuda, gpu_less)
    assert not passes(cuda, "libfabric:9:1:core:core:cuda_hmem_dl_init():566<info> Failed to dlopen libcudart.so\n"
                            "libfabric:9:1:core:core:ofi_hmem_init():662<info> Hmem iface FI_HMEM_CUDA not supported\n"
                            "tcp:\nshm:\n")
    assert passes(by_id["libfabric.hmem"], "FI_HMEM on shm\nFI_HMEM on tcp\n")
    assert not passes(by_id["libfabric.hmem"], "")
    assert passes(by_id["libfabric.cuda_transfer"], "bytes   iters ...\n1m      20 ...\nclient 0 server 0\n")
    assert not passes(by_id["libfabric.cuda_transfer"], "fi_getinfo(): No data available\nclient 1 server 1\n")
