"""pmix: prefix per source and arch; the major version label that preflight compares with Slurm's."""

from __future__ import annotations

import pytest

from stack_helpers import CUDA, DEBIAN, load_text, render_text, stage


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_distro_prefix_follows_the_arch(tmp_path, arch):
    pmix = load_text(tmp_path, DEBIAN + f"  arch: {arch}\ncomponents:\n  pmix: {{source: distro}}\n").get("pmix")
    assert pmix.prefix == f"/usr/lib/{arch}-linux-gnu/pmix2"
    assert pmix.labels() == {"major": "4", "prefix": pmix.prefix}


def test_upstream(tmp_path):
    text = CUDA + "components:\n  pmix: {version: '5.0.3'}\n"
    pmix = load_text(tmp_path, text).get("pmix")
    assert pmix.labels() == {"major": "5", "prefix": "/usr/local/pmix"}
    rendered = render_text(tmp_path, text)
    assert "pmix-5.0.3.tar.gz" in stage(rendered, "devel")
    assert "COPY --from=devel /usr/local/pmix /usr/local/pmix" in stage(rendered, "runtime")
    checks = {c.id: c for c in pmix.checks()}
    assert checks["pmix.version"].run == "/usr/local/pmix/bin/pmix_info"


def test_distro_packages(tmp_path):
    rendered = render_text(tmp_path, DEBIAN + "components:\n  pmix: {source: distro}\n")
    assert "libpmix-bin libpmix-dev libpmix2" in stage(rendered, "devel")
    assert "libpmix-bin libpmix2" in stage(rendered, "runtime")
