"""pmix: prefix per source and arch; the major version label that preflight compares with Slurm's."""

from __future__ import annotations

import pytest

from helpers.stack_helpers import CUDA, DEBIAN, load_text, render_text, stage


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_distro_prefix_follows_the_arch(tmp_path, arch):
    pmix = load_text(tmp_path, DEBIAN + f"  arch: {arch}\ncomponents:\n  pmix: {{source: distro}}\n").get("pmix")
    assert pmix.prefix == f"/usr/lib/{arch}-linux-gnu/pmix2"
    assert pmix.labels() == {"major": "4", "prefix": pmix.prefix}


def test_upstream(tmp_path):
    text = CUDA + "components:\n  pmix: {version: '5.0.7'}\n"
    pmix = load_text(tmp_path, text).get("pmix")
    assert pmix.labels() == {"major": "5", "prefix": "/usr/local/pmix"}
    rendered = render_text(tmp_path, text)
    devel = stage(rendered, "devel")
    assert "https://github.com/openpmix/openpmix/releases/download/v5.0.7/pmix-5.0.7.tar.bz2" in devel
    assert devel.index("sha256sum -c") < devel.index("./configure --prefix=/usr/local/pmix")
    assert "COPY --from=devel /usr/local/pmix /usr/local/pmix" in stage(rendered, "runtime")
    checks = {c.id: c for c in pmix.checks()}
    assert checks["pmix.version"].run == "/usr/local/pmix/bin/pmix_info"


def test_upstream_builds_against_hwloc_and_libevent_headers(tmp_path):
    # PMIx >= 4 stops at configure without hwloc.h, which ships in libhwloc-dev (not in `hwloc`).
    devel = stage(render_text(tmp_path, CUDA + "components:\n  pmix: {version: '4.2.9'}\n"), "devel")
    install = next(l for l in devel.splitlines() if "apt-get install" in l and "libhwloc-dev" in l)
    assert "libevent-dev" in install and "flex" in install
    assert devel.index(install) < devel.index("./configure --prefix=/usr/local/pmix")
    flags = next(l for l in devel.splitlines() if "./configure --prefix=/usr/local/pmix" in l).split()
    assert any(f.startswith("--with-hwloc") for f in flags) and any(f.startswith("--with-libevent") for f in flags)


@pytest.mark.parametrize("image, distro, suffix", [
    ("nvidia/cuda:12.4.1-devel-ubuntu22.04", "ubuntu22", ""),
    ("nvidia/cuda:12.6.3-devel-ubuntu24.04", "ubuntu24", "t64"),  # renamed in the 64-bit time_t transition
])
def test_upstream_runtime_libraries(tmp_path, image, distro, suffix):
    text = f"name: p\nbase:\n  image: {image}\n  distro: {distro}\ncomponents:\n  pmix: {{version: '4.2.9'}}\n"
    runtime = stage(render_text(tmp_path, text), "runtime")
    assert f"libevent-core-2.1-7{suffix} libevent-pthreads-2.1-7{suffix} libhwloc15" in runtime
    assert "libhwloc-dev" not in runtime and "libevent-dev" not in runtime


@pytest.mark.parametrize("source", ["{version: '4.2.9'}", "{source: distro}"])
def test_gds_hash_in_both_stages(tmp_path, source):
    # The shared-memory dstore fails between a container's PMIx and the host Slurm's.
    text = render_text(tmp_path, DEBIAN + f"components:\n  pmix: {source}\n")
    for name in ("devel", "runtime"):
        assert "ENV PMIX_MCA_gds=hash" in stage(text, name), name


def test_distro_packages(tmp_path):
    rendered = render_text(tmp_path, DEBIAN + "components:\n  pmix: {source: distro}\n")
    assert "libpmix-bin libpmix-dev libpmix2" in stage(rendered, "devel")
    assert "libpmix-bin libpmix2" in stage(rendered, "runtime")
