"""Offline base images: mirror discovery (unit) and a real bootstrap reused on the second call."""


import os
import subprocess

import pytest

from imagekit import base_image as base_mod
from imagekit import engine
from imagekit.errors import UsageError


def test_host_mirror_reads_deb822_and_one_line_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example.org/debian\nSuites: bookworm\nComponents: main\n")
    assert base_mod.host_mirror("debian", tmp_path) == "http://mirror.example.org/debian"
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://m.example.net/ubuntu jammy main\n")
    assert base_mod.host_mirror("ubuntu", tmp_path) == "http://m.example.net/ubuntu"
    assert base_mod.host_mirror("fedora", tmp_path) is None


def test_unknown_base_and_suite_are_usage_errors():
    with pytest.raises(UsageError, match="unknown base"):
        base_mod.parse("centos:7", mirror="http://x")
    with pytest.raises(UsageError, match="debian suite 'buster'") as err:
        base_mod.parse("debian:buster", mirror="http://x")
    assert "bookworm" in err.value.hint


def test_default_tag_is_what_stacks_refer_to():
    assert base_mod.parse("debian:bookworm", mirror="http://x").tag == "imagekit/debian:bookworm"


@pytest.mark.engine
def test_base_image_has_cmd_path_and_labels_and_is_reused(base_image):
    attrs = engine.client().images.get(base_image).attrs["Config"]
    assert attrs["Cmd"] == ["/bin/bash"], "Enroot and Pyxis refuse an image without a CMD"
    assert any(e.startswith("PATH=/usr/local/sbin:") for e in attrs["Env"])
    assert attrs["Labels"]["io.imagekit.base"] == "debian:bookworm"
    said = []
    before = engine.client().images.get(base_image).id
    assert base_mod.ensure("debian:bookworm", log=said.append) == base_image
    assert "reusing" in said[0] and engine.client().images.get(base_image).id == before


TRIXIE = """\
name: trixie-mpi
base: {image: imagekit/debian:trixie, distro: debian13}
components:
  ofed:    {flavor: inbox}
  ucx:     {source: distro}
  pmix:    {source: distro}
  openmpi: {source: distro, ucx: true, pmix: true}
"""


@pytest.mark.engine
def test_trixie_base_with_non_free_builds_a_debian13_stack(write_stack, tmp_path):
    """Debian 13: contrib/non-free in the image's apt sources; its OpenMPI 5.0.7, PMIx 5.0.7, UCX 1.18."""
    from imagekit import build, check, stack

    tag = base_mod.ensure("debian:trixie", components=("main", "contrib", "non-free"), log=lambda *_: None)
    sources = subprocess.run([engine.docker_cli(), "run", "--rm", tag, "sh", "-c",
                              "cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null; true"],
                             capture_output=True, text=True, check=True).stdout
    assert "trixie main contrib non-free" in sources
    assert engine.image_labels(tag)["io.imagekit.base.components"] == "main,contrib,non-free"
    s = stack.load(write_stack(TRIXIE))
    assert [s.get(n).version for n in ("openmpi", "pmix", "ucx")] == ["5.0.7", "5.0.7", "1.18.1"]
    image = build.build(s, build.BuildRequest(log_dir=tmp_path)).tags[0]
    report = check.run(image, check.stack_checks(s))
    assert not report.failed, [(o.id, o.detail) for o in report.failed]
    # Open MPI 5's PMIx check reads the configure line: an internal PMIx must fail it.
    (tmp_path / "Dockerfile").write_text(
        f"FROM {image}\nRUN printf '#!/bin/sh\\necho \"config:cli:\x27--with-pmix=internal\x27\"\\n' "
        "> /usr/local/bin/ompi_info && chmod 755 /usr/local/bin/ompi_info\n")
    broken = "imagekit-test/trixie-internal-pmix:latest"
    subprocess.run([engine.docker_cli(), "build", "-q", "-t", broken, str(tmp_path)], check=True,
                   capture_output=True, env={**os.environ, "DOCKER_BUILDKIT": "1"})
    try:
        outcomes = {o.id: o.status for o in check.run(broken, check.stack_checks(s)).outcomes}
        assert outcomes["openmpi.pmix_external"] == "failed"
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", image, broken], capture_output=True)
