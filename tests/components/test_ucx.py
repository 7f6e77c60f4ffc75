"""ucx: configure flags from options, KNEM/XPMEM blocks, the distro packages."""

from __future__ import annotations

from imagekit.image_facts import writer
from helpers.stack_helpers import CUDA, DEBIAN, load_text, render_text, stage

FULL = CUDA + """\
components:
  cuda: {}
  ofed: {flavor: doca, version: "2.9.1"}
  gdrcopy: {version: "2.4.4"}
  ucx: {version: "1.18.1", cuda: true, gdrcopy: true, knem: true, xpmem: true}
"""


def configure_line(text: str) -> list[str]:
    return next(l for l in text.splitlines() if "./configure --prefix=/usr/local/ucx" in l).split()


def test_all_options_on(tmp_path):
    text = render_text(tmp_path, FULL)
    flags = configure_line(text)
    for flag in ("--with-cuda=/usr/local/cuda", "--with-gdrcopy=/usr/local/gdrcopy", "--with-knem=/usr/local/knem",
                 "--with-xpmem=/usr/local/xpmem", "--with-verbs", "--with-rdmacm", "--disable-static",
                 "--enable-mt"):
        assert flag in flags, flag
    devel, runtime = stage(text, "devel"), stage(text, "runtime")
    # KNEM and XPMEM user-space parts are built before UCX, and copied to the runtime.
    assert devel.index("knem") < devel.index("ucx-1.18.1") and devel.index("xpmem") < devel.index("ucx-1.18.1")
    for prefix in ("/usr/local/knem", "/usr/local/xpmem", "/usr/local/ucx"):
        assert f"COPY --from=devel {prefix} {prefix}" in runtime


def test_all_options_off(tmp_path):
    flags = configure_line(render_text(tmp_path, CUDA + "components:\n  ucx: {version: '1.18.1', ofed: false}\n"))
    for flag in ("--without-cuda", "--without-gdrcopy", "--without-knem", "--without-xpmem", "--without-verbs"):
        assert flag in flags, flag
    # Thread-safe always: without it Open MPI's pml ucx refuses MPI_THREAD_MULTIPLE and falls back to TCP.
    assert "--enable-mt" in flags


def test_builds_only_the_libraries_and_tools(tmp_path):
    devel = stage(render_text(tmp_path, FULL), "devel")
    build = next(l for l in devel.splitlines() if "for d in " in l)
    assert "src/ucp" in build and "src/tools/info" in build and "test/" not in build and "examples" not in build
    assert devel.index("sha256sum -c") < devel.index("./configure --prefix=/usr/local/ucx")


def test_cuda_13_compat_define_before_ucx_1_19(tmp_path):
    # UCX < 1.19 names a CUDA typedef that CUDA 13 only has under its versioned name.
    define = "CPPFLAGS=-DPFN_cuMemGetHandleForAddressRange=PFN_cuMemGetHandleForAddressRange_v11070"
    ucx = "  ucx: {version: '1.18.1', cuda: true, ofed: false}\n"
    cuda13 = DEBIAN + "components:\n  cuda: {source: pypi, version: '13.0.2'}\n" + ucx.replace(
        "ofed: false", "ofed: false, accept: [ucx-before-cuda13]")  # refused otherwise: test_rules
    assert define in stage(render_text(tmp_path, cuda13), "devel")
    labels = writer.recipe_labels(load_text(tmp_path, cuda13))
    assert labels["io.imagekit.component.ucx.accepted"] == "ucx-before-cuda13"  # the image says what it took on
    cuda12 = CUDA + "components:\n  cuda: {}\n" + ucx
    assert "PFN_cuMemGetHandleForAddressRange" not in render_text(tmp_path, cuda12)


def test_labels(tmp_path):
    ucx = load_text(tmp_path, FULL).get("ucx")
    assert ucx.labels() == {"cuda": "true", "gdrcopy": "true", "knem": "true", "xpmem": "true", "ofed": "true"}
    assert ucx.prefix == "/usr/local/ucx"


def test_distro_ucx(tmp_path):
    text = DEBIAN + "components:\n  ofed: {}\n  ucx: {source: distro}\n"
    ucx = load_text(tmp_path, text).get("ucx")
    assert (ucx.version, ucx.prefix) == ("1.13.1", "/usr")
    rendered = render_text(tmp_path, text)
    assert "libucx-dev libucx0 ucx-utils" in stage(rendered, "devel")
    assert "libucx0 ucx-utils" in stage(rendered, "runtime") and "libucx-dev" not in stage(rendered, "runtime")


def test_checks(tmp_path):
    checks = {c.id: c for c in load_text(tmp_path, FULL).get("ucx").checks()}
    assert checks["ucx.cuda"].needs == "gpu" and checks["ucx.verbs"].needs == "fabric"
    assert checks["ucx.version"].needs is None
    assert checks["ucx.mt"].run == "ucx_info -b" and "ENABLE_MT" in checks["ucx.mt"].expect
