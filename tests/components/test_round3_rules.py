"""Bad input refused before any build, each as one located error with the fix (review 3, H2, H4, H6, H11):
a GPU architecture the stack's CUDA dropped, an NCCL repo package NVIDIA does not build, an NCCL newer than
any release, DOCA or MLNX OFED without ConnectX-8, a fabric component without what it builds on, HPC-X's
two-MPI releases, and a base image digest that is not a digest."""

from __future__ import annotations

from helpers.stack_helpers import CUDA, DEBIAN, expect_error, line_of, load_text, write

from imagekit import stack as stack_mod

CUDA129 = CUDA.replace("12.4.1", "12.9.1")
WHEEL13 = DEBIAN + "components:\n  cuda: {source: pypi, version: '13.2.2', arch_list: ['70', '90']}\n"


def test_sm70_on_cuda13_names_volta_and_the_release_that_dropped_it(tmp_path):
    path = write(tmp_path, WHEEL13)
    err = expect_error(lambda: stack_mod.load(path), path, line_of(path, "arch_list"), "components.cuda.arch_list",
                       "CUDA 13.2.2 cannot compile for sm_70", "CUDA 13.0 dropped Volta")
    assert "nccl-tests-volta" in err.hint
    # nccl-tests' own gencode is held to the same rule, at its own line.
    path = write(tmp_path, DEBIAN + "components:\n  cuda: {source: pypi, version: '13.2.2'}\n  ofed: {flavor: inbox}\n"
                 "  openmpi: {source: distro, ucx: false}\n  nccl: {source: pypi, version: '2.30.7'}\n"
                 "  nccl-tests: {version: '2.19.6', gencode: ['60', '90']}\n", "nt.yaml")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "gencode"), "components.nccl-tests.gencode",
                 "cannot compile for sm_60", "Pascal")


def test_sm70_on_cuda129_loads_and_is_labelled(tmp_path):
    s = load_text(tmp_path, CUDA129 + "components:\n  cuda: {arch_list: ['70', '80', '90']}\n")
    assert s.get("cuda").labels()["archs"] == "70,80,90"


def test_nccl_repo_packages_after_228_exist_for_cuda_129_only(tmp_path):
    path = write(tmp_path, CUDA + "components:\n  cuda: {}\n  nccl: {version: '2.30.4-1'}\n")
    err = expect_error(lambda: stack_mod.load(path), path, line_of(path, "nccl:"), "components.nccl.version",
                       "no libnccl2=2.30.4-1+cuda12.4", "CUDA 12.9 only")
    assert "nvidia/cuda:12.9" in err.hint
    assert load_text(tmp_path, CUDA129 + "components:\n  cuda: {}\n  nccl: {version: '2.30.4-1'}\n")


def test_an_nccl_newer_than_any_release_is_refused(tmp_path):
    path = write(tmp_path, CUDA129 + "components:\n  cuda: {}\n  nccl: {version: '2.40.1-1'}\n")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "nccl:"), "components.nccl.version",
                 "newer than any release imagekit knows (2.32.3)")


OFED = CUDA129.replace("ubuntu22", "ubuntu24").replace("22.04", "24.04") + "components:\n  ofed: {%s}\n"


def test_connectx8_needs_doca_210_or_later(tmp_path):
    path = write(tmp_path, OFED % "flavor: doca, version: '2.9.1', nics: [cx7, cx8]")
    err = expect_error(lambda: stack_mod.load(path), path, line_of(path, "ofed:"), "components.ofed.version",
                       "DOCA 2.9.1 does not support ConnectX-8", "2.10.0")
    assert "3.2.0" in err.hint
    path = write(tmp_path, OFED % "flavor: mlnx, version: '24.10-1.1.4.0', nics: [cx8]", "mlnx.yaml")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "ofed:"), "components.ofed.flavor",
                 "MLNX OFED has no ConnectX-8")
    path = write(tmp_path, OFED % "flavor: doca, version: '3.2.0', nics: [cx9]", "bad.yaml")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "ofed:"), "components.ofed.nics[1]",
                 "invalid value 'cx9'")
    s = load_text(tmp_path, OFED % "flavor: doca, version: '3.2.0', nics: [cx7, cx8]")
    assert s.get("ofed").labels()["nics"] == "cx7,cx8"


def test_shipped_blackwell_benchmark_image_drives_connectx8():
    s = stack_mod.load("nccl-tests-cu129-x86_64")
    ofed = s.get("ofed")
    assert ofed.opts["flavor"] == "doca" and ofed.version.startswith("3.") and "cx8" in ofed.opts["nics"]
    assert s.get("nccl").version == "2.30.4-1" and s.get("cuda").version == "12.9.1"


FABRIC = DEBIAN + "components:\n  cuda: {source: pypi, version: '13.2.2'}\n%s"


def test_libfabric_without_its_prerequisites(tmp_path):
    # efa builds on rdma-core's verbs: no RDMA user space in the stack.
    path = write(tmp_path, FABRIC % "  libfabric: {version: '2.5.0', providers: [efa, tcp]}\n")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "libfabric:"), "components.libfabric.providers",
                 "the efa provider builds on rdma-core", "ofed")
    # gdrcopy: true without the gdrcopy component.
    path = write(tmp_path, FABRIC % "  ofed: {flavor: inbox}\n  libfabric: {version: '2.5.0', gdrcopy: true}\n",
                 "g.yaml")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "libfabric:"), "components.libfabric.gdrcopy",
                 "needs the `gdrcopy` component")
    # cxi without HPE's libcxi in the base: both halves must be said.
    path = write(tmp_path, FABRIC % "  ofed: {flavor: inbox}\n  libfabric: {version: '2.5.0', providers: [cxi]}\n",
                 "c.yaml")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "libfabric:"), "components.libfabric.providers",
                 "`cxi: true` and the `cxi` provider go together")


def test_libfabric_renders_cuda_gdrcopy_and_only_the_providers_asked(tmp_path):
    s = load_text(tmp_path, FABRIC % "  ofed: {flavor: inbox}\n  gdrcopy: {version: '2.5.1'}\n"
                  "  libfabric: {version: '2.5.0', gdrcopy: true, providers: [verbs, shm]}\n")
    opts = s.get("libfabric").configure_opts()
    assert {"--enable-only", "--enable-verbs", "--enable-shm", "--with-cuda=/usr/local/cuda", "--enable-cuda-dlopen",
            "--with-gdrcopy=/usr/local/gdrcopy", "--enable-gdrcopy-dlopen"} <= set(opts)
    assert not any(o.startswith("--enable-cxi") for o in opts)
    cxi = load_text(tmp_path, FABRIC % "  ofed: {flavor: inbox}\n  libfabric: {version: '2.5.0', cxi: true, "
                    "cxi_prefix: /opt/cray, providers: [cxi, shm]}\n").get("libfabric").configure_opts()
    # configure adds DIR/include itself (prov/cxi/configure.m4): the prefix, not its include directory.
    assert "--enable-cxi=/opt/cray" in cxi and "--with-cassini-headers=/opt/cray" in cxi


HPCX = CUDA.replace("12.4.1", "12.9.1") + """components:
  cuda: {}
  ofed: {flavor: doca, version: "3.2.0"}
  hpcx: {version: "%s", sha256: "%s"%s}
"""
PIN = "0" * 64


def test_hpcx_226_and_250_carry_both_open_mpis(tmp_path):
    s = load_text(tmp_path, HPCX % ("2.26", PIN, ""))
    hpcx = s.get("hpcx")
    assert (hpcx.ompi_series, hpcx.home) == ("4.1", "/opt/hpcx/ompi4")
    assert hpcx.url_fields()["directory"] == "v2.26_cuda12"
    five = load_text(tmp_path, HPCX % ("2.26", PIN, ", ompi: '5'")).get("hpcx")
    assert (five.ompi_series, five.home, five.role_versions()["mpi"]) == ("5.0", "/opt/hpcx/ompi5", "5.0")
    assert "/opt/hpcx/ompi5/lib" in five._lib_dirs()
    fifty = load_text(tmp_path, HPCX % ("2.50", PIN, "")).get("hpcx")
    assert (fifty.ompi_series, fifty.home, fifty.labels()["ompi"]) == ("5.0", "/opt/hpcx/ompi5", "5.0")
    path = write(tmp_path, HPCX % ("2.22.1", PIN, ", ompi: '5'"), "one.yaml")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "hpcx:"), "components.hpcx.ompi",
                 "HPC-X 2.22.1 ships one Open MPI")


def test_a_base_digest_that_is_not_a_digest(tmp_path):
    path = write(tmp_path, CUDA129.replace("devel-ubuntu22.04\n", "devel-ubuntu22.04@sha256:abc\n", 1)
                 + "components:\n  cuda: {}\n")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "@sha256"), "base.image",
                 "has an '@' but no sha256 digest")
    pinned = CUDA129.replace("devel-ubuntu22.04\n", "devel-ubuntu22.04@sha256:" + "a" * 64 + "\n", 1)
    s = load_text(tmp_path, pinned + "components:\n  cuda: {}\n")
    assert s.get("cuda").version == "12.9.1"   # the tag is still read for the CUDA version
