"""openmpi: wiring to the stack's UCX, PMIx, CUDA and Slurm; the distro flavour; labels."""

from __future__ import annotations

import re

import pytest

from imagekit import stack
from helpers.stack_helpers import CUDA, DEBIAN, expect_error, line_of, load_text, render_text, stage, write

UPSTREAM = CUDA + """\
components:
  cuda: {}
  ucx: {version: "1.18.1", cuda: true, ofed: false}
  pmix: {version: "4.2.9"}
  openmpi: {version: "4.1.7", pmix: true, cuda: true, slurm: true}
"""


def configure_line(text: str) -> str:
    return next(l for l in text.splitlines() if "./configure --prefix=/usr/local/openmpi" in l)


def test_upstream_uses_the_stacks_ucx_and_external_pmix(tmp_path):
    text = render_text(tmp_path, UPSTREAM)
    flags = configure_line(text).split()
    for flag in ("--with-ucx=/usr/local/ucx", "--with-pmix=/usr/local/pmix", "--with-cuda=/usr/local/cuda",
                 "--with-slurm", "--disable-static", "--disable-mpi-fortran",
                 # 4.x: prefix in containers, no openib and no UCX BTL next to pml ucx.
                 "--enable-orterun-prefix-by-default", "--without-verbs", "--enable-mca-no-build=btl-uct"):
        assert flag in flags, flag
    assert "--without-slurm" not in flags
    # PMIx's hwloc and libevent, named explicitly (not whatever configure happens to probe first).
    assert any(f.startswith("--with-hwloc") for f in flags) and any(f.startswith("--with-libevent") for f in flags)


def test_upstream_needs_no_fortran_compiler(tmp_path):
    # FC=gfortran without gfortran in the image aborts configure ("Could not run a simple Fortran program").
    devel = stage(render_text(tmp_path, UPSTREAM), "devel")
    assert "--disable-mpi-fortran" in configure_line(devel).split()
    assert "gfortran" not in devel and "FC=" not in devel


def test_upstream_without_the_pmix_component_passes_no_pmix_flag(tmp_path):
    # Open MPI then uses its own bundled PMIx; there is no "internal" option to spell.
    text = render_text(tmp_path, CUDA + "components:\n  openmpi: {version: '4.1.7', ucx: false}\n")
    flags = configure_line(text).split()
    assert not any(f.startswith("--with-pmix") for f in flags)
    # Slurm support is on by default: Open MPI 4.x needs it to recognise srun direct launch.
    assert "--with-slurm" in flags and "--without-cuda" in flags
    assert not any(f.startswith("--with-ucx") for f in flags)
    runtime = stage(text, "runtime")
    assert "COPY --from=devel /usr/local/openmpi /usr/local/openmpi" in runtime
    # The HTML manual (69 MB in Open MPI 5) and man pages go in the install step, so no image has them.
    assert "rm -rf /usr/local/openmpi/share/doc /usr/local/openmpi/share/man" in stage(text, "devel")
    assert "libhwloc15" in runtime and "openssh-client" in runtime


def test_openmpi_5_drops_the_4x_only_flags(tmp_path):
    text = CUDA + """\
components:
  cuda: {}
  ucx: {version: "1.18.1", cuda: true, ofed: false}
  pmix: {version: "5.0.7"}
  openmpi: {version: "5.0.7", pmix: true, cuda: true}
"""
    flags = configure_line(render_text(tmp_path, text)).split()
    assert "--with-pmix=/usr/local/pmix" in flags and "--with-cuda=/usr/local/cuda" in flags
    for flag in ("--enable-orterun-prefix-by-default", "--without-verbs", "--enable-mca-no-build=btl-uct"):
        assert flag not in flags, flag


def test_openmpi_provides_the_stacks_mpi(tmp_path):
    stack = load_text(tmp_path, UPSTREAM)
    assert type(stack.get("openmpi")).provides == ("mpi",)
    assert stack.provider("mpi") is stack.get("openmpi") and stack.provider("mpi").home == "/usr/local/openmpi"


def test_labels_record_the_wiring(tmp_path):
    mpi = load_text(tmp_path, UPSTREAM).get("openmpi")
    assert mpi.labels() == {"ucx": "true", "pmix": "true", "cuda": "true", "slurm": "true", "pmi2": "false"}
    assert mpi.home == "/usr/local/openmpi"


def test_distro_openmpi_packages_and_home(tmp_path):
    text = DEBIAN + "  arch: aarch64\ncomponents:\n  openmpi: {source: distro, ucx: false}\n"
    s = load_text(tmp_path, text)
    assert s.get("openmpi").home == "/usr/lib/aarch64-linux-gnu/openmpi"
    assert s.get("openmpi").version == "4.1.4"
    rendered = render_text(tmp_path, text)
    assert "libopenmpi-dev libopenmpi3 openmpi-bin" in stage(rendered, "devel")
    runtime = stage(rendered, "runtime")
    assert "libopenmpi3 openmpi-bin" in runtime and "libopenmpi-dev" not in runtime


def test_checks_follow_the_options(tmp_path):
    ids = {c.id: c for c in load_text(tmp_path, UPSTREAM).get("openmpi").checks()}
    assert set(ids) == {"openmpi.version", "openmpi.runs", "openmpi.ring", "openmpi.pml_ucx",
                        "openmpi.pmix_external", "openmpi.cuda", "openmpi.cuda_ring", "openmpi.cuda_probe",
                        "openmpi.slurm", "openmpi.srun_direct_launch"}
    assert ids["openmpi.cuda_ring"].needs == "gpu" and ids["openmpi.cuda_probe"].needs is None
    assert re.search(ids["openmpi.version"].expect, "mpirun (Open MPI) 4.1.7")
    assert re.search(ids["openmpi.pmix_external"].expect, "MCA pmix: ext3x (MCA v2.1.0)")
    plain = load_text(tmp_path, CUDA + "components:\n  openmpi: {version: '4.1.7', ucx: false, slurm: false}\n")
    assert {c.id for c in plain.get("openmpi").checks()} == {"openmpi.version", "openmpi.runs", "openmpi.ring"}


def test_upstream_with_ucx_asks_for_pml_ucx_and_never_falls_back_silently(tmp_path):
    """Review defect 14: with UCX built in, OMPI_MCA_pml=ucx makes an unusable UCX an error, not ob1 over TCP."""
    s = load_text(tmp_path, CUDA + "components:\n  cuda: {}\n  ucx: {version: '1.18.1', cuda: true, ofed: false}\n"
                  "  openmpi: {version: '4.1.7', cuda: true}\n")
    assert s.get("openmpi").environment()["OMPI_MCA_pml"] == "ucx"
    assert s.get("ucx").environment()["UCX_VFS_ENABLE"] == "no"
    plain = load_text(tmp_path / "plain", DEBIAN + "components:\n  openmpi: {version: '4.1.7', ucx: false}\n")
    assert "OMPI_MCA_pml" not in plain.get("openmpi").environment()


PMI2 = DEBIAN + "components:\n  openmpi: {version: '4.1.4', ucx: false, pmi2: true}\n"


def test_pmi2_builds_open_mpi_4_against_slurms_libpmi2(tmp_path):
    """Review cuda-recipes-2 finding 17: a PMI-2 fallback (`srun --mpi=pmi2`) for sites without
    Slurm's pmix plugin. Open MPI 4.1's configure finds pmi2.h under /usr/include/slurm, and the
    library only through --with-pmi-libdir (Debian's multiarch directory is none of DIR/lib, DIR/lib64)."""
    s = load_text(tmp_path, PMI2)
    text = render_text(tmp_path, PMI2)
    flags = configure_line(text).split()
    assert "--with-pmi=/usr" in flags and "--with-pmi-libdir=/usr/lib/x86_64-linux-gnu" in flags
    devel, runtime = stage(text, "devel"), stage(text, "runtime")
    assert re.search(r"apt-get install [^\n]*\blibpmi2-0-dev\b", devel)
    assert re.search(r"apt-get install [^\n]*\blibpmi2-0\b", runtime) and "libpmi2-0-dev" not in runtime
    openmpi = s.get("openmpi")
    assert openmpi.labels()["pmi2"] == "true"
    pmi2 = next(c for c in openmpi.checks() if c.id == "openmpi.pmi2")
    assert pmi2.command == "ompi_info" and re.search(pmi2.expect, "  MCA pmix: s2 (MCA v2.1.0, API v2.0.0)")
    off = load_text(tmp_path, DEBIAN + "components:\n  openmpi: {version: '4.1.4', ucx: false}\n")
    assert "openmpi.pmi2" not in {c.id for c in off.get("openmpi").checks()}
    assert "--with-pmi=" not in render_text(tmp_path, DEBIAN + "components:\n  openmpi: {version: '4.1.4', ucx: false}\n")


@pytest.mark.parametrize("distro", ["debian13", "ubuntu24"])
def test_pmi2_on_the_64_bit_time_distros_installs_the_renamed_library(tmp_path, distro):
    """Debian 13 (slurm-wlm 24.11) and Ubuntu 24.04 (23.11) ship Slurm's PMI-2 library as libpmi2-0t64
    (the 64-bit time_t rename); no libpmi2-0 exists there, so the runtime stage would not install."""
    text = render_text(tmp_path, PMI2.replace("debian12", distro))
    assert re.search(r"apt-get install [^\n]*\blibpmi2-0-dev\b", stage(text, "devel"))
    runtime = stage(text, "runtime")
    assert re.search(r"apt-get install [^\n]*\blibpmi2-0t64\b", runtime)
    assert not re.search(r"\blibpmi2-0\b(?!t64)", runtime)


def test_pmi2_is_refused_for_open_mpi_5(tmp_path):
    """Open MPI 5 removed PMI-1/PMI-2 (its configure: "--with-pmi options were removed in v5.0"): under
    `srun --mpi=pmi2` every rank would start alone. The error names the launch that works."""
    path = write(tmp_path, DEBIAN + "components:\n  pmix: {version: '5.0.7'}\n"
                 "  openmpi: {version: '5.0.7', ucx: false, pmix: true, pmi2: true}\n")
    err = expect_error(lambda: stack.load(path), path, line_of(path, "pmi2: true"), "components.openmpi.pmi2",
                       "Open MPI 5 removed PMI-1/PMI-2", "PMIx only")
    assert "srun --mpi=pmix" in err.hint and "4.1" in err.hint


@pytest.mark.parametrize("text, fragment", [
    (DEBIAN + "components:\n  openmpi: {source: distro, pmi2: true}\n", "the distro's Open MPI"),
    (DEBIAN.replace("debian:bookworm", "rockylinux:9").replace("debian12", "rockylinux9")
     + "components:\n  openmpi: {version: '4.1.4', ucx: false, pmi2: true}\n", "not known here"),
])
def test_pmi2_is_refused_where_it_cannot_be_built(tmp_path, text, fragment):
    path = write(tmp_path, text)
    err = expect_error(lambda: stack.load(path), path, line_of(path, "pmi2: true"), "components.openmpi.pmi2",
                       fragment)
    assert "srun --mpi=pmix" in err.hint
