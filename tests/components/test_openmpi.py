"""openmpi: wiring to the stack's UCX, PMIx, CUDA and Slurm; the distro flavour; labels."""

from __future__ import annotations

import re

from stack_helpers import CUDA, DEBIAN, load_text, render_text, stage

UPSTREAM = CUDA + """\
components:
  cuda: {}
  ucx: {version: "1.17.0", cuda: true, ofed: false}
  pmix: {version: "4.2.9"}
  openmpi: {version: "4.1.7", pmix: true, cuda: true, slurm: true}
"""


def configure_line(text: str) -> str:
    return next(l for l in text.splitlines() if "./configure --prefix=/usr/local/openmpi" in l)


def test_upstream_uses_the_stacks_ucx_and_external_pmix(tmp_path):
    line = configure_line(render_text(tmp_path, UPSTREAM))
    for flag in ("--with-ucx=/usr/local/ucx", "--with-pmix=/usr/local/pmix", "--with-cuda", "--with-slurm",
                 "--disable-static", "--enable-orterun-prefix-by-default"):
        assert flag in line.split(), flag
    assert "--without-slurm" not in line


def test_upstream_defaults_internal_pmix_and_no_slurm(tmp_path):
    text = render_text(tmp_path, CUDA + "components:\n  openmpi: {version: '4.1.7', ucx: false}\n")
    line = configure_line(text)
    assert "--with-pmix=internal" in line and "--without-slurm" in line and "--with-ucx" not in line
    assert "--with-cuda" not in line.split()
    assert "COPY --from=devel /usr/local/openmpi /usr/local/openmpi" in stage(text, "runtime")


def test_labels_record_the_wiring(tmp_path):
    mpi = load_text(tmp_path, UPSTREAM).get("openmpi")
    assert mpi.labels() == {"ucx": "true", "pmix": "true", "cuda": "true", "slurm": "true"}
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
    assert set(ids) == {"openmpi.version", "openmpi.runs", "openmpi.pml_ucx", "openmpi.pmix_external",
                        "openmpi.cuda", "openmpi.slurm"}
    assert re.search(ids["openmpi.version"].expect, "mpirun (Open MPI) 4.1.7")
    assert re.search(ids["openmpi.pmix_external"].expect, "MCA pmix: ext3x (MCA v2.1.0)")
    plain = load_text(tmp_path, CUDA + "components:\n  openmpi: {version: '4.1.7', ucx: false}\n").get("openmpi")
    assert {c.id for c in plain.checks()} == {"openmpi.version", "openmpi.runs"}
