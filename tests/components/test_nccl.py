"""nccl: the CUDA suffix always comes from the base image; three sources render differently."""

from __future__ import annotations

import re

import pytest

from imagekit import sources
from helpers.stack_helpers import CUDA, DEBIAN, load_text, render_text, stage

CUDA126 = CUDA.replace("12.4.1", "12.6.3")


def test_repo_pins_the_base_images_cuda_not_the_newest(tmp_path):
    text = render_text(tmp_path, CUDA126 + "components:\n  cuda: {}\n  nccl: {version: '2.23.4-1'}\n")
    assert "libnccl2=2.23.4-1+cuda12.6" in stage(text, "devel")
    assert "libnccl-dev=2.23.4-1+cuda12.6" in stage(text, "devel")
    runtime = stage(text, "runtime")
    assert "libnccl2=2.23.4-1+cuda12.6" in runtime and "libnccl-dev" not in runtime
    # Every pinned package names the same CUDA: HPCCM's default (the newest) never leaks in.
    assert set(re.findall(r"\+cuda(\d+\.\d+)", text)) == {"12.6"}


def test_repo_replaces_the_held_packages_and_holds_the_pin(tmp_path):
    """Review defect 4 (checked against the documented behaviour: no NVIDIA registry here).

    The official CUDA image Dockerfiles run `apt-mark hold libnccl2` (runtime) and `libnccl-dev`
    (devel), with 2.21.5 in 12.4.1; apt then refuses another version with "Held packages were changed
    and -y was used without --allow-change-held-packages" (InternLM/lmdeploy#2240, NVIDIA/MagnumIO#12).
    """
    text = render_text(tmp_path, CUDA + "components:\n  cuda: {}\n  nccl: {version: '2.23.4-1'}\n")
    for name, packages in (("devel", "libnccl2 libnccl-dev"), ("runtime", "libnccl2")):
        lines = [l for l in stage(text, name).splitlines() if "libnccl2=" in l]
        assert len(lines) == 1 and "--allow-change-held-packages --allow-downgrades" in lines[0], name
        assert f"apt-mark hold {packages}" in stage(text, name), name


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_repo_uses_the_base_images_cuda_repo(tmp_path, arch):
    """Review defect 3 (checked against the documented behaviour: no NVIDIA registry here).

    nvidia/cuda images install cuda-keyring, which writes sources.list.d/cuda-*.list with
    signed-by=cuda-archive-keyring.gpg; HPCCM's nccl block added the same repo with another
    signed-by, and apt (2.6.1, reproduced) then stops every update with "Conflicting values set for
    option Signed-By" (NVIDIA/cuda-repo-management#4). The recipe adds no source and checks the
    image's own is there.
    """
    text = render_text(tmp_path, CUDA + f"  arch: {arch}\ncomponents:\n  cuda: {{}}\n  nccl: {{version: '2.23.4-1'}}\n")
    assert "developer.download.nvidia.com" not in text and "signed-by" not in text
    for name in ("devel", "runtime"):
        install = stage(text, name)
        assert install.index("ls /etc/apt/sources.list.d/cuda*.list") < install.index("apt-get update"), name


@pytest.mark.parametrize("version, extra", [("2.23.4-1", ""), ("2.23.4", ", sha256: '" + "ab" * 32 + "'")])
def test_upstream_builds_from_the_release_tag(tmp_path, version, extra):
    text = render_text(tmp_path, CUDA + "components:\n  cuda: {}\n"
                       f"  nccl: {{source: upstream, version: '{version}'{extra}}}\n")
    devel = stage(text, "devel")
    # NCCL's tags carry the revision: v2.23.4-1 (the archive unpacks to nccl-2.23.4-1).
    assert "https://github.com/NVIDIA/nccl/archive/v2.23.4-1.tar.gz" in devel
    assert "cd /var/tmp/nccl-2.23.4-1" in devel
    build = next(l for l in devel.splitlines() if "src.build" in l)
    assert "CUDA_HOME=/usr/local/cuda" in build and "PREFIX=/usr/local/nccl" in devel
    assert 'NVCC_GENCODE="-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90' in build
    assert devel.index("sha256sum -c") < devel.index(build)
    assert "COPY --from=devel /usr/local/nccl" in stage(text, "runtime")


def test_short_version_takes_the_release_tags_pin(tmp_path):
    nccl = load_text(tmp_path, CUDA + "components:\n  cuda: {}\n  nccl: {source: upstream, version: '2.23.4'}\n"
                     ).get("nccl")
    assert nccl.pin == sources.PINS[("nccl", "2.23.4-1")]


def test_pypi_wheel_on_a_base_without_cuda(tmp_path):
    s = load_text(tmp_path, DEBIAN + "components:\n  nccl: {source: pypi, version: '2.21.5', cuda: '12.4'}\n")
    nccl = s.get("nccl")
    assert nccl.wheel == "nvidia-nccl-cu12==2.21.5", "the wheel is per CUDA major"
    assert nccl.labels() == {"cuda": "12", "prefix": "/usr/local/nccl"}


def test_pypi_wheel_takes_the_major_from_the_cuda_component(tmp_path):
    s = load_text(tmp_path, CUDA + "components:\n  cuda: {}\n  nccl: {source: pypi, version: '2.21.5'}\n")
    assert s.get("nccl").wheel == "nvidia-nccl-cu12==2.21.5"


@pytest.mark.parametrize("fmt", ["docker", "singularity"])
def test_pypi_unpacks_the_wheel_and_registers_the_library(tmp_path, fmt):
    text = render_text(tmp_path, DEBIAN + "components:\n  nccl: {source: pypi, version: '2.21.5', cuda: '12'}\n",
                       fmt)
    devel, runtime = stage(text, "devel"), stage(text, "runtime")
    assert "pip download --no-deps --only-binary=:all: --dest /var/tmp/nccl-wheel nvidia-nccl-cu12==2.21.5" in devel
    assert "echo /usr/local/nccl/lib > /etc/ld.so.conf.d/nccl.conf" in devel
    assert "rm -rf /var/tmp/nccl-wheel" in devel
    # The runtime gets the libraries only (headers stay in devel), registered with the loader.
    assert "/usr/local/nccl/lib" in runtime and "/usr/local/nccl/include" not in runtime
    assert "ldconfig" in runtime and "pip" not in runtime
    if fmt == "docker":
        assert "--mount=type=secret,id=ca-bundle" in devel and "PIP_CERT=/run/secrets/ca-bundle" in devel
    else:
        assert "--mount" not in text and "rm -rf /root/.cache/pip" in devel


def test_version_check_reads_the_version_string_from_the_loaded_library(tmp_path):
    """NCCL's VERSION_STRING ("NCCL version 2.21.5+cuda12.4") is text in libnccl.so.2: no Python needed."""
    s = load_text(tmp_path, DEBIAN + "components:\n  nccl: {source: pypi, version: '2.21.5', cuda: '12'}\n")
    check = {c.id: c for c in s.get("nccl").checks()}["nccl.version"]
    assert "ldconfig -p" in check.run and "python" not in check.run
    assert re.search(check.expect, "NCCL version 2.21.5")
    assert not re.search(check.expect, "NCCL version 2.21.50") and not re.search(check.expect, "NCCL version 2.21.4")


def test_a_post_release_wheel_is_a_version_and_checks_its_release(tmp_path):
    """Review 4 E2b: `pip index versions nvidia-nccl-cu12` lists 2.26.2.post1, a repackaged 2.26.2 wheel;
    it was refused as "not a version". The library inside reports NCCL 2.26.2."""
    s = load_text(tmp_path, DEBIAN + "components:\n  nccl: {source: pypi, version: '2.26.2.post1', cuda: '12'}\n")
    nccl = s.get("nccl")
    assert nccl.wheel == "nvidia-nccl-cu12==2.26.2.post1"
    expect = {c.id: c for c in nccl.checks()}["nccl.version"].expect
    assert re.search(expect, "NCCL version 2.26.2+cuda12.9") and not re.search(expect, "NCCL version 2.26.5")


def test_a_post_release_is_refused_for_the_repo_naming_its_release(tmp_path):
    from helpers.stack_helpers import expect_error, write

    path = write(tmp_path, CUDA + "components:\n  cuda: {}\n  nccl: {source: repo, version: '2.26.2.post1'}\n")
    from imagekit import stack
    expect_error(lambda: stack.load(path), path, 8, "components.nccl.version", "names a PyPI wheel",
                 'write "2.26.2" for source: repo')


@pytest.mark.parametrize("version", ["2.26.2.post1", "2.0rc1", "1.0.dev3", "2.5.1+cu121", "4.1.7", "2.23.4-1"])
def test_pep_440_and_upstream_versions_are_versions(version):
    from imagekit.components._base import _VERSION

    assert _VERSION.match(version)
