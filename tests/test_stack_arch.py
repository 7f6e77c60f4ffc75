"""Stacks for several architectures (unit): ``base.arch`` as a list, the platform a load picks,
``per_arch`` overlays, tags that carry the architecture, and the errors for a platform a stack
does not offer or a component that does not build there (each naming file, line and key)."""

import pytest
from helpers.stack_helpers import CUDA, DEBIAN, expect_error, line_of, render_text, write

from imagekit import pipeline, render
from imagekit.util import platforms
from imagekit import stack as stack_mod
from imagekit.util.errors import StackError
from imagekit.util.platforms import PlatformError

TWO = DEBIAN.replace("  distro: debian12\n", "  distro: debian12\n  arch: [x86_64, aarch64]\n") + """\
components:
  ofed: {flavor: inbox}
  nccl: {source: pypi, version: "2.21.5", cuda: "12"}
per_arch:
  aarch64:
    components:
      nccl: {version: "2.23.4"}
tags: ["site/mpi:1", "site/mpi:1-{arch}", "site/mpi-arm64:1"]
"""


@pytest.fixture(autouse=True)
def x86_host(monkeypatch):
    monkeypatch.setattr(platforms, "host_machine", lambda: "x86_64")


def test_a_list_offers_each_arch_and_the_hosts_is_the_default(tmp_path, monkeypatch):
    path = write(tmp_path, TWO)
    here = stack_mod.load(path)
    assert (here.base.arch, here.arches, here.image) == ("x86_64", ("x86_64", "aarch64"), "imagekit/t:latest")
    monkeypatch.setattr(platforms, "host_machine", lambda: "aarch64")
    grace = stack_mod.load(path)
    assert (grace.base.arch, grace.image) == ("aarch64", "imagekit/t:latest-arm64")


def test_the_arm64_build_has_its_own_base_tags_and_per_arch_pins(tmp_path):
    s = stack_mod.load(write(tmp_path, TWO), platform="linux/arm64")
    assert (s.base.image, s.base.runtime) == ("imagekit/debian:bookworm-arm64",) * 2
    assert s.get("nccl").version == "2.23.4", "the aarch64 overlay's pin"
    assert stack_mod.load(write(tmp_path, TWO)).get("nccl").version == "2.21.5", "x86_64 keeps its pin"
    # Tags carry the arch unless they name it already: the arm64 build never takes an amd64 tag.
    assert s.tags == ["site/mpi:1-arm64", "site/mpi:1-aarch64", "site/mpi-arm64:1"]
    assert stack_mod.load(write(tmp_path, TWO)).tags == ["site/mpi:1", "site/mpi:1-x86_64", "site/mpi-arm64:1"]
    text = render.render(s, "docker")
    assert "FROM imagekit/debian:bookworm-arm64 AS devel" in text
    assert 'io.imagekit.arch="aarch64"' in text


def test_a_platform_the_stack_does_not_offer_is_refused_at_its_arch_line(tmp_path):
    path = write(tmp_path, DEBIAN + "components:\n  ofed: {flavor: inbox}\n")
    with pytest.raises(PlatformError) as err:
        stack_mod.load(path, platform="linux/arm64")
    assert str(err.value).startswith(f"{path}:2: base.arch: t does not build for linux/arm64; it offers "
                                     "linux/amd64 (x86_64)")
    assert "add aarch64 to base.arch" in err.value.hint
    with pytest.raises(PlatformError, match="imagekit builds linux images for linux/amd64, linux/arm64"):
        stack_mod.load(path, platform="linux/s390x")


def test_a_component_with_no_build_for_the_arch_is_named(tmp_path):
    """PyPI has no aarch64 wheel of nvidia-nccl-cu12 2.21.5 (nor 2.22.3): the stack fails at nccl's
    version line, naming the component and the wheels that exist."""
    text = TWO.split("per_arch:")[0]
    path = write(tmp_path, text)
    err = expect_error(lambda: stack_mod.load(path, platform="linux/arm64"), path,
                       line_of(path, "nccl:"), "components.nccl.version",
                       "nccl does not build for aarch64: PyPI has no aarch64 wheel of nvidia-nccl-cu12 2.21.5")
    assert 'per_arch: {aarch64: {components: {nccl: {version: "2.23.4"}}}}' in err.hint
    stack_mod.load(path)   # x86_64 builds


def test_a_matrix_builds_only_the_variants_offering_the_platform(tmp_path):
    path = write(tmp_path, CUDA + "components:\n  cuda: {}\nmatrix:\n  arch:\n    x86_64:\n    sbsa:\n"
                                  "      base: {arch: aarch64}\n")
    assert [s.name for s in stack_mod.load_all(path, "linux/arm64")] == ["g-sbsa"]
    with pytest.raises(PlatformError, match="g-sbsa does not build for linux/amd64; it offers linux/arm64"):
        stack_mod.load(path, "g-sbsa", platform="linux/amd64")


@pytest.mark.parametrize("text, key, fragment", [
    ("  arch: []\n", "base.arch", "an empty list of architectures"),
    ("  arch: [x86_64, arm64]\n", "base.arch", "invalid value 'arm64'"),
    ("  arch: [x86_64, x86_64]\n", "base.arch", "names an architecture twice"),
])
def test_bad_arch_lists(tmp_path, text, key, fragment):
    path = write(tmp_path, DEBIAN + text)
    expect_error(lambda: stack_mod.load(path), path, 5, key, fragment, fix=False)


def test_bad_per_arch_overlays(tmp_path):
    path = write(tmp_path, DEBIAN + "per_arch:\n  aarch64:\n    components: {}\n")
    expect_error(lambda: stack_mod.load(path), path, 6, "per_arch.aarch64", "which base.arch does not offer")
    path = write(tmp_path, DEBIAN.replace("debian12\n", "debian12\n  arch: [x86_64, aarch64]\n")
                 + "per_arch:\n  aarch64:\n    distro: debian13\n")
    expect_error(lambda: stack_mod.load(path), path, 8, "per_arch.aarch64.distro", "unknown key")


def test_a_build_request_refuses_a_platform_before_anything_is_built(tmp_path):
    with pytest.raises(PlatformError, match="linux/riscv64"):
        pipeline.PipelineRequest(str(write(tmp_path, TWO)), platforms=("linux/riscv64",))
    request = pipeline.PipelineRequest("x", platforms=("linux/arm64", "arm64", "linux/amd64"))
    assert [str(p) for p in request.platforms] == ["linux/arm64", "linux/amd64"]


# -- the shipped stacks ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, platform, gpu", [
    ("debian-mpi", "linux/arm64", None),
    ("debian-cuda", "linux/arm64", ["90", "100", "103"]),
    ("debian-pytorch", "linux/arm64", ["90", "100", "103"]),
    ("grace-pytorch", None, ["90", "100", "103"]),
    ("debian-grace", None, ["90", "100", "103"]),
    ("nccl-tests", "linux/arm64", None),
])
def test_the_arm64_stacks_render_in_both_formats(name, platform, gpu):
    for s in stack_mod.load_all(stack_mod.find(name)[0], platform):
        assert s.base.arch == "aarch64" and platforms.names_arch(s.image, "aarch64")
        if gpu is not None:
            assert s.get("cuda").opts["arch_list"] == gpu, "Grace's GPUs: GH200, GB200, GB300"
        for fmt in render.FORMATS:
            assert render.render(s, fmt)


def test_the_grace_stack_is_cuda13_nccl_openmpi_ucx_and_pytorch_for_aarch64():
    s = stack_mod.load("grace-pytorch")
    assert s.base.arch == "aarch64" and s.arches == ("aarch64",)
    assert s.get("cuda").version.startswith("13.2") and s.get("pytorch").version == "2.15.0"
    assert s.has("ucx") and s.has("openmpi") and s.get("ofed").opts["flavor"] == "doca"
    text = render.render(s, "docker")
    assert "/arm64-sbsa/" in text, "DOCA's arm64-sbsa repository"
    assert "torch==2.15.0" in text and "nvidia-nvjitlink==13.2.*" in text
    # One reference for both: the x86_64 pytorch and grace-pytorch tags differ only by the suffix.
    assert s.tags == [t + "-arm64" for t in stack_mod.load("pytorch").tags]
    with pytest.raises(PlatformError, match="pytorch does not build for linux/arm64"):
        stack_mod.load("pytorch", platform="linux/arm64")   # grace-pytorch is its aarch64 build


def test_the_offline_grace_stack_runs_no_compiler_in_its_build():
    """debian-grace builds under emulation in about an hour because nothing is compiled: Debian's
    packages and wheels only (a source build through QEMU takes days on 2 cores)."""
    s = stack_mod.load("debian-grace")
    assert s.arches == ("aarch64",) and s.image == "imagekit/debian-grace:latest-arm64"
    assert all(c.source in ("distro", "pypi") for c in s.components.values())
    assert s.get("nccl").version == s.get("pytorch").labels()["nccl"] == "2.30.7", "one NCCL: torch's"
    text = render.render(s, "docker")
    assert "./configure" not in text and "make -j" not in text


def test_pytorch_for_aarch64_comes_from_pypis_cuda_wheel_only(tmp_path):
    base = DEBIAN.replace("  distro: debian12\n", "  distro: debian12\n  arch: aarch64\n") + """\
components:
  cuda:    {source: pypi, version: "13.2.2"}
  nccl:    {source: pypi, version: "2.30.7"}
  python:  {}
  pytorch: {version: "2.15.0", index: pypi}
"""
    assert "torch==2.15.0" in render_text(tmp_path, base)
    path = write(tmp_path, base.replace("index: pypi", "index: pytorch"))
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "pytorch:"), "components.pytorch.version",
                 "pytorch does not build for aarch64: imagekit knows PyTorch 2.15.0's aarch64 CUDA wheels from "
                 "index: pypi only")


def test_the_shipped_x86_64_renders_are_unchanged_by_the_arch_lists():
    """debian-mpi and debian-cuda offer aarch64 now; their x86_64 image stays the one every other
    test builds (same recipe, same tag)."""
    for name in ("debian-mpi", "debian-cuda"):
        s = stack_mod.load(name, platform="linux/amd64")
        assert s.image == f"imagekit/{name}:latest" and s.base.image == "imagekit/debian:bookworm"
        assert "aarch64" not in render.render(s, "docker")


def test_an_unknown_arch_key_in_the_stack_file_is_refused_by_the_schema(tmp_path):
    path = write(tmp_path, DEBIAN + "per_arch: []\n")
    with pytest.raises(StackError, match="expected a mapping"):
        stack_mod.load(path)
