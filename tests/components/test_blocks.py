"""_blocks: BuildKit cache mounts and the CA-bundle secret for Docker; clean layers for Singularity."""

from __future__ import annotations

import re
import subprocess
from types import SimpleNamespace

import pytest

from imagekit import render
from imagekit.engines import docker as engine
from imagekit import stack as stack_mod
from imagekit.components import _blocks
from helpers.stack_helpers import render_text


DEB = SimpleNamespace(base=stack_mod.Base(image="x", runtime="x", distro="debian12", arch="x86_64"))


def shipped():
    return [v for p in stack_mod.shipped() for v in stack_mod.load_all(p)]


@pytest.mark.parametrize("fmt", ["docker", "singularity"])
def test_no_secret_ever_lands_in_a_layer(fmt):
    for s in shipped():
        text = render.render(s, fmt)
        assert "ca-certificates.crt" not in text
        for line in text.splitlines():
            if "PIP_CERT" in line:
                assert "PIP_CERT=/run/secrets/ca-bundle" in line and "--mount=type=secret,id=ca-bundle" in line
        assert "ENV PIP_CERT" not in text and "export PIP_CERT=/etc" not in text


def runs(text: str) -> list[str]:
    """The RUN instructions of a Dockerfile, continuation lines joined."""
    return [r for r in re.split(r"\n(?=[A-Z]+ )", text.replace("\\\n", " ")) if r.startswith("RUN ")]


@pytest.mark.parametrize("variant", [v for p in stack_mod.shipped() for v in stack_mod.load_all(p)],
                         ids=lambda v: v.name)
def test_every_docker_apt_run_uses_the_cache_mounts(variant):
    """Every apt step (HPCCM's DOCA block and NCCL's repo install included: review cuda-recipes-2
    finding 12) runs under the cache mounts; with docker-clean removed, a step without them would
    keep its .debs in the layer."""
    text = render.render(variant, "docker")
    assert "rm -f /etc/apt/apt.conf.d/docker-clean" in text
    apt = [r for r in runs(text) if re.search(r"apt-get (-\S+ )*install", r)]
    assert apt
    for run in apt:
        assert _blocks.apt_cache(variant) in run, run[:300]


def test_apt_caches_are_kept_apart_per_distro_release_and_arch(tmp_path):
    """One cache id per distro release and arch (review cuda-recipes-2 finding 18): Debian 12 renders
    with HPCCM's ubuntu22, but its cache is debian12's; only the lists are cached from /var/lib/apt,
    so extended_states stays in the image."""
    ids = {}
    for name, distro, arch in (("d12", "debian12", "x86_64"), ("d12a", "debian12", "aarch64"),
                               ("d13", "debian13", "x86_64"), ("u22", "ubuntu22", "x86_64")):
        text = render_text(tmp_path, f"name: {name}\nbase:\n  image: x/y:1\n  distro: {distro}\n  arch: {arch}\n"
                           "components:\n  ofed: {}\n")
        mounts = set(re.findall(r"--mount=type=cache,\S+", text)) - {"--mount=type=cache,target=/root/.cache/pip"}
        assert mounts == {f"--mount=type=cache,id=imagekit-apt-cache-{distro}-{arch},target=/var/cache/apt,"
                          "sharing=locked",
                          f"--mount=type=cache,id=imagekit-apt-lists-{distro}-{arch},target=/var/lib/apt/lists,"
                          "sharing=locked"}, text
        ids[name] = mounts
    assert len(set.union(*ids.values())) == 2 * len(ids)


def test_singularity_cleans_up_instead_of_mounting():
    import hpccm.config
    from hpccm.common import container_type

    render.reset_hpccm("singularity")
    assert hpccm.config.g_ctype == container_type.SINGULARITY
    apt = "\n".join(str(b) for b in _blocks.apt_install(DEB, ["b", "a", "a"]))
    assert "apt-get install -y --no-install-recommends a b" in apt and "rm -rf /var/lib/apt/lists/*" in apt
    assert "apt-get clean" in apt, "the base keeps .debs (no docker-clean): they would stay in the SIF"
    assert "--mount" not in apt
    assert _blocks.apt_cache_setup() == []
    pip = "\n".join(str(b) for b in _blocks.pip_run(["pip install x"], env={"B": "2 3", "A": "1"}))
    assert pip.index("export A=1") < pip.index("export B='2 3'") < pip.index("pip install x")
    assert "rm -rf /root/.cache/pip" in pip and "PIP_CERT" not in pip
    render.reset_hpccm("docker")
    assert _blocks.apt_install(DEB, []) == []


def test_build_tools_fetch_with_wget_only_without_a_mirror():
    # A source build needs a C toolchain (none of the bases is guaranteed to have one); a mirror's
    # files arrive through the build context, so the download tools are left out.
    render.reset_hpccm("docker")
    upstream = "\n".join(str(b) for b in _blocks.build_tools(SimpleNamespace(mirror=None, base=DEB.base),
                                                               ["libhwloc-dev"], "x"))
    assert "bzip2 ca-certificates file g++ gcc libhwloc-dev make tar wget" in upstream
    assert "# x" in upstream and _blocks.apt_cache(DEB) in upstream
    mirrored = "\n".join(str(b) for b in _blocks.build_tools(SimpleNamespace(mirror="/site/mirror", base=DEB.base)))
    assert "bzip2 file g++ gcc make tar" in mirrored and "wget" not in mirrored and "ca-certificates" not in mirrored


@pytest.mark.engine
def test_apt_marks_reach_the_built_image(mpi_image):
    """Only /var/lib/apt/lists is a cache mount: apt's auto/manual marks (extended_states) are
    written into the image, so `apt-get autoremove` in a derived image sees which packages came only
    as dependencies. Under a cache mount of all /var/lib/apt they stayed in the shared cache."""
    out = subprocess.run([engine.docker_cli(), "run", "--rm", "--entrypoint", "apt-mark", mpi_image, "showauto"],
                         check=True, capture_output=True, text=True).stdout.split()
    # Dependencies of what the recipe installs by name, so marked automatic.
    assert {"openmpi-common", "libhwloc15"} <= set(out), out
    assert "openmpi-bin" not in out and "libopenmpi3" not in out, "installed by name: manual"
