"""Preflight's fabric checks (imagekit.launch.preflight_fabric): GPUDirect RDMA's prerequisites, a host libfabric
bound over the image's, and each binary's GPU code.

No GPU, NVIDIA driver or Slingshot host exists here. The GPUDirect probe reads made-up /proc, /sys and /dev
trees written in the documented formats (/proc/driver/nvidia/version as the driver writes it: "NVRM version:
NVIDIA UNIX [Open ]Kernel Module ..."; /sys/module/<name> exists while a module is loaded). The bound
"HPE libfabric" is a real shared library built here with the C compiler, linking stand-in libcxi and json-c
libraries, so its DT_NEEDED entries are real ones; the image's side is the shipped Slingshot stack's labels."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from imagekit import image_facts, stack
from imagekit.image_facts import writer
from imagekit.launch import preflight as pf
from imagekit.launch import preflight_fabric as fabric
from imagekit.launch.preflight_fabric import GpuDirectFacts

OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16)\n"
PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"
EFA = {"io.imagekit.stack": "debian-efa", "io.imagekit.components": "cuda,ofed,gdrcopy,nccl,libfabric,aws-ofi-nccl",
       "io.imagekit.role.rdma": "ofed", "io.imagekit.role.gdrcopy": "gdrcopy", "io.imagekit.role.libfabric": "libfabric",
       "io.imagekit.component.cuda.version": "12.4.1", "io.imagekit.component.ofed.version": "56.1",
       "io.imagekit.component.gdrcopy.version": "2.5.1", "io.imagekit.component.nccl.version": "2.32.3",
       "io.imagekit.component.libfabric.version": "2.6.0", "io.imagekit.component.aws-ofi-nccl.version": "1.21.1"}


def host(tmp_path, version: str | None, peermem=False, kernel="6.1.0-18-amd64", gdrdrv=False) -> GpuDirectFacts:
    root = tmp_path / "root"
    for sub in ("proc/driver/nvidia", "proc/sys/kernel", "sys/module", "dev"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    if version:
        (root / "proc/driver/nvidia/version").write_text(version)
    (root / "proc/sys/kernel/osrelease").write_text(kernel + "\n")
    if peermem:
        (root / "sys/module/nvidia_peermem").mkdir()
    if gdrdrv:
        (root / "dev/gdrdrv").touch()
    return GpuDirectFacts.probe(root)


def efa():
    return image_facts.from_labels(EFA, ref="efa")


def test_peermem_or_dmabuf_is_gpudirect_rdma(tmp_path):
    assert fabric.check_gpudirect(efa(), "535.183.01", host(tmp_path, PROPRIETARY, peermem=True)).status == "ok"
    dmabuf = fabric.check_gpudirect(efa(), "580.65.06", host(tmp_path / "o", OPEN, kernel="6.8.0-45-generic"))
    assert dmabuf.status == "ok" and "DMA-BUF" in dmabuf.detail and "6.8" in dmabuf.detail


@pytest.mark.parametrize("version, kernel, why", [
    (PROPRIETARY, "6.1.0-18-amd64", "proprietary kernel modules"),   # a DGX-1 (V100): peermem is the only way
    (OPEN, "5.10.0-30-amd64", "Linux 5.10 (DMA-BUF needs 5.12+)"),
])
def test_without_either_the_cost_is_said_in_one_line(tmp_path, version, kernel, why):
    c = fabric.check_gpudirect(efa(), "535.183.01", host(tmp_path, version, kernel=kernel))
    assert c.status == "warn" and why in c.detail and "through host memory" in c.detail and "\n" not in c.detail
    assert "modprobe nvidia_peermem" in c.fix


def test_gdrdrv(tmp_path):
    assert fabric.check_gdrdrv(efa(), "580.65.06", host(tmp_path, OPEN, gdrdrv=True)).status == "ok"
    c = fabric.check_gdrdrv(efa(), "580.65.06", host(tmp_path / "n", OPEN))
    assert c.status == "warn" and "no /dev/gdrdrv" in c.detail and "cudaMemcpy" in c.detail and "gdrdrv" in c.fix


def test_no_driver_or_no_network_is_not_checked(tmp_path):
    facts = host(tmp_path, None)
    assert fabric.check_gpudirect(efa(), None, facts).status == "not checked"
    mpi = image_facts.from_labels({"io.imagekit.stack": "s", "io.imagekit.components": "openmpi",
                                   "io.imagekit.component.openmpi.version": "5.0.10"}, ref="s")
    assert fabric.check_gpudirect(mpi, "580.65.06", facts).status == "not checked"


# -- a host libfabric bound over the Slingshot image's ----------------------------------------------------

@pytest.fixture(scope="module")
def slingshot():
    s = stack.load(str(stack.SHIPPED_DIR / "fabric" / "debian-slingshot.yaml"))
    return image_facts.from_labels(writer.recipe_labels(s), ref="slingshot")


def so(directory: Path, soname: str, links: list[Path] = ()) -> Path:
    """A real shared library named ``soname`` (its SONAME too) linking the libraries ``links``."""
    need = shutil.which("cc")
    if need is None:
        pytest.fail("the C compiler (cc) builds the stand-in libraries: apt-get install gcc")
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / f"{soname}.c"
    src.write_text(f"int {soname.split('.')[0].replace('-', '_')}_f(void) {{ return 1; }}\n")
    out = directory / soname
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,--no-as-needed", f"-Wl,-soname,{soname}", "-o", str(out), str(src),
                    *(str(lib) for lib in links)], check=True)
    src.unlink()
    return out


def hpe_tree(tmp_path, sub="lib64", json="libjson-c.so.3") -> Path:
    deps = tmp_path / "deps"
    links = [so(deps, "libcxi.so.1"), so(deps, json)]
    so(tmp_path / "hpe" / sub, "libfabric.so.1", links)
    return tmp_path / "hpe"


def test_the_bound_libraries_dt_needed_is_read_from_the_file(tmp_path):
    from imagekit.util import elf

    lib = hpe_tree(tmp_path) / "lib64" / "libfabric.so.1"
    assert {"libcxi.so.1", "libjson-c.so.3"} <= set(elf.needed(lib))
    readelf = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    assert elf.needed(lib) == [line.split("[")[1].rstrip("]") for line in readelf.splitlines() if "(NEEDED)" in line]


def test_a_bind_without_the_library_names_the_path_and_what_was_looked_for(tmp_path, slingshot):
    (tmp_path / "empty").mkdir()
    (c,) = fabric.check_host_bind(slingshot, [(str(tmp_path / "empty"), "/opt/libfabric")])
    assert c.status == "fail" and str(tmp_path / "empty") in c.detail
    assert f"{tmp_path}/empty/lib64/libfabric.so.1 and {tmp_path}/empty/lib/libfabric.so.1" in c.detail


def test_a_library_neither_the_image_nor_the_binds_carry_is_named(tmp_path, slingshot):
    tree = hpe_tree(tmp_path)
    (c,) = fabric.check_host_bind(slingshot, [(str(tree), "/opt/libfabric")])
    # libcxi.so.1 is the image's own (HPE's layout); json-c 0.13's soname is not Debian's libjson-c.so.5.
    assert c.status == "fail" and "links libjson-c.so.3, which neither the image nor the binds carry" in c.detail
    assert "libcxi.so.1" not in c.detail.split("carry")[0] and "/opt/cxi/lib64/libjson-c.so.3" in c.fix
    binds = [(str(tree), "/opt/libfabric"), ("/usr/lib64/libjson-c.so.3", "/opt/cxi/lib64/libjson-c.so.3")]
    (ok,) = fabric.check_host_bind(slingshot, binds)
    assert ok.status == "ok"
    assert fabric.check_host_bind(slingshot, [])[0].status == "ok"      # nothing bound: the image's own


def test_a_lib_layout_loads_only_where_ldconfig_runs_again(tmp_path, slingshot):
    tree = hpe_tree(tmp_path, sub="lib", json="libjson-c.so.5")
    found = fabric.check_host_bind(slingshot, [(str(tree), "/opt/libfabric")])
    assert [c.status for c in found] == ["warn", "ok"] and "/opt/libfabric/lib64" in found[0].detail


def test_preflight_runs_them_with_the_launchs_mounts(tmp_path, slingshot):
    (tmp_path / "empty").mkdir()
    plan = pf.PreflightPlan(mounts=((str(tmp_path / "empty"), "/opt/libfabric"),))
    found = {c.name: c for c in pf.run("slingshot", plan, host=pf.HostFacts(), facts=slingshot)}
    assert found["host libfabric bind"].status == "fail"
    assert "GPUDirect RDMA" not in found                               # a host without a driver: not probed
    gpu = pf.HostFacts(driver="535.183.01", gpudirect=host(tmp_path, PROPRIETARY, gdrdrv=True))
    found = {c.name: c for c in pf.run("slingshot", pf.PreflightPlan(), host=gpu, facts=slingshot)}
    assert found["GPUDirect RDMA"].status == "warn" and found["gdrcopy (gdrdrv)"].status == "ok"


# -- each binary's GPU code (J4), and PTX against the driver (J11) ------------------------------------------

VOLTA = {"io.imagekit.stack": "nccl-tests-volta", "io.imagekit.components": "cuda,nccl-tests,nvbandwidth",
         "io.imagekit.component.cuda.version": "12.9.1", "io.imagekit.component.cuda.archs": "70,80,90",
         "io.imagekit.component.nccl-tests.version": "2.19.6", "io.imagekit.component.nccl-tests.gencode": "70,80,90",
         "io.imagekit.component.nvbandwidth.version": "0.8", "io.imagekit.component.nvbandwidth.archs": "70,80,90"}
V100 = [("Tesla V100-SXM2-32GB", "7.0")]
B200 = [("NVIDIA B200", "10.0")]


def arch(labels, gpus, driver="580.65.06"):
    return pf.check_gpu_arch(image_facts.from_labels(labels, ref="img"), pf.HostFacts(driver=driver, gpus=gpus))


def test_a_binary_without_code_for_the_gpu_is_named_though_the_union_has_it():
    """Round 3's nccl-tests-volta: the union label said 70,80,90 while nvbandwidth had 80 and later only."""
    old = {**VOLTA, "io.imagekit.component.nvbandwidth.archs": "80,90,100,103,120"}
    c = arch(old, V100)
    assert c.status == "fail" and c.detail.startswith("nvbandwidth carries GPU code for sm_80") and "sm_70" in c.detail
    assert arch(VOLTA, V100).status == "ok"


def test_ptx_needs_a_driver_that_knows_its_cuda():
    """J11: the V100 image's compute_90 PTX (CUDA 12.9) on a B200: R570 (CUDA 12.8) cannot JIT it, R575 can."""
    c = arch(VOLTA, B200, driver="570.148.08")
    assert c.status == "fail" and "only as PTX from CUDA 12.9.1" in c.detail and "up to CUDA 12.8" in c.detail
    assert arch(VOLTA, B200, driver="575.51.03").status == "ok"
    assert arch(VOLTA, V100, driver="535.183.01").status == "ok"        # SASS: no JIT, any R525+ driver


def test_an_image_with_only_the_union_label_is_judged_by_it():
    only_union = {k: v for k, v in VOLTA.items() if "nccl-tests." not in k and "nvbandwidth." not in k}
    only_union["io.imagekit.components"] = "cuda"
    assert fabric.binary_archs(image_facts.from_labels(only_union, ref="x")) == {"cuda": ["70", "80", "90"]}
