"""_blocks: BuildKit cache mounts and the CA-bundle secret for Docker; clean layers for Singularity."""

from __future__ import annotations

import pytest

from imagekit import render
from imagekit import stack as stack_mod
from imagekit.components import _blocks


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


def test_docker_apt_runs_use_cache_mounts_and_keep_debs():
    text = render.render(stack_mod.load(stack_mod.shipped()[0]), "docker")
    assert "rm -f /etc/apt/apt.conf.d/docker-clean" in text
    for line in text.splitlines():
        if line.startswith("RUN") and "apt-get install" in line and "python3-minimal" not in line:
            assert _blocks.APT_CACHE in line


def test_singularity_cleans_up_instead_of_mounting():
    import hpccm.config
    from hpccm.common import container_type

    render.reset_hpccm("singularity")
    assert hpccm.config.g_ctype == container_type.SINGULARITY
    apt = "\n".join(str(b) for b in _blocks.apt_install(["b", "a", "a"]))
    assert "apt-get install -y --no-install-recommends a b" in apt and "rm -rf /var/lib/apt/lists/*" in apt
    assert "--mount" not in apt
    assert _blocks.apt_cache_setup() == []
    pip = "\n".join(str(b) for b in _blocks.pip_run(["pip install x"], env={"B": "2 3", "A": "1"}))
    assert pip.index("export A=1") < pip.index("export B='2 3'") < pip.index("pip install x")
    assert "rm -rf /root/.cache/pip" in pip and "PIP_CERT" not in pip
    render.reset_hpccm("docker")
    assert _blocks.apt_install([]) == []


def test_build_tools_fetch_with_wget_only_without_a_mirror():
    # A source build needs a C toolchain (none of the bases is guaranteed to have one); a mirror's
    # files arrive through the build context, so the download tools are left out.
    from types import SimpleNamespace

    render.reset_hpccm("docker")
    upstream = "\n".join(str(b) for b in _blocks.build_tools(SimpleNamespace(mirror=None), ["libhwloc-dev"], "x"))
    assert "bzip2 ca-certificates file g++ gcc libhwloc-dev make tar wget" in upstream
    assert "# x" in upstream and _blocks.APT_CACHE in upstream
    mirrored = "\n".join(str(b) for b in _blocks.build_tools(SimpleNamespace(mirror="/site/mirror")))
    assert "bzip2 file g++ gcc make tar" in mirrored and "wget" not in mirrored and "ca-certificates" not in mirrored
