"""ofed: the flavor decides the source; DOCA/MLNX follow the arch; inbox uses rdma-core."""

from __future__ import annotations

import re

import pytest

from imagekit.components.ofed import DIAGS_TOOLS, DOCA_KEYFILE, DOCA_LIST, INBOX_TOOLS, RUNTIME_PACKAGES
from helpers.stack_helpers import CUDA, DEBIAN, load_text, render_text, stage


def test_inbox_is_the_default_and_is_distro(tmp_path):
    ofed = load_text(tmp_path, DEBIAN + "components:\n  ofed: {}\n").get("ofed")
    assert (ofed.source, ofed.version, ofed.labels()) == ("distro", "44.0", {"flavor": "inbox"})


def test_inbox_packages_and_tools(tmp_path):
    text = render_text(tmp_path, DEBIAN + "components:\n  ofed: {tools: true, diags: true}\n")
    devel, runtime = stage(text, "devel"), stage(text, "runtime")
    assert "libibverbs-dev" in devel and "libibverbs-dev" not in runtime
    for pkg in ("ibverbs-providers", "libibverbs1", "librdmacm1", "perftest", "infiniband-diags"):
        assert pkg in devel and pkg in runtime, pkg


def test_doca_repo_follows_the_arch(tmp_path):
    text = CUDA + "  arch: {arch}\ncomponents:\n  ofed: {{flavor: doca, version: '2.9.1'}}\n"
    x86 = render_text(tmp_path, text.format(arch="x86_64"))
    arm = render_text(tmp_path, text.format(arch="aarch64"))
    assert "/doca/2.9.1/ubuntu22.04/x86_64/" in x86
    assert "/doca/2.9.1/ubuntu22.04/arm64-sbsa/" in arm
    assert "signed-by=" in x86, "DOCA repos are added with signed-by keys"


def test_mlnx(tmp_path):
    s = load_text(tmp_path, CUDA + "components:\n  ofed: {flavor: mlnx, version: '24.10-1.1.4.0'}\n")
    assert s.get("ofed").source == "upstream"
    assert "mlnx_ofed/24.10-1.1.4.0/ubuntu22.04" in render_text(tmp_path, CUDA + "components:\n  ofed: "
                                                                "{flavor: mlnx, version: '24.10-1.1.4.0'}\n")


def test_matching_explicit_source_is_accepted(tmp_path):
    assert load_text(tmp_path, CUDA + "components:\n  ofed: {flavor: doca, version: '2.9.1', source: upstream}\n"
                     ).get("ofed").source == "upstream"


@pytest.mark.parametrize("flavor, version", [("doca", "2.9.1"), ("mlnx", "24.10-1.1.4.0")])
def test_nvidia_runtime_installs_only_runtime_packages(tmp_path, flavor, version):
    text = render_text(tmp_path, CUDA + f"components:\n  ofed: {{flavor: {flavor}, version: '{version}'}}\n")
    devel, runtime = stage(text, "devel"), stage(text, "runtime")
    assert "libibverbs-dev" in devel
    for pkg in RUNTIME_PACKAGES:
        assert pkg in runtime, pkg
    # No headers in the runtime stage (HPCCM's own runtime twin reinstalls the devel set).
    assert not re.search(r"\b\S+-dev\b", runtime.split(" AS runtime", 1)[1])


@pytest.mark.parametrize("fmt", ["docker", "singularity"])
def test_doca_leaves_no_repository_key_gnupg_or_wget(tmp_path, fmt):
    """Review cuda-recipes-2 finding 12: HPCCM's doca_ofed installed gnupg and wget in the runtime
    stage and left NVIDIA's repository in it. The key and the repository line now live for one
    step only, and apt (not wget, not gnupg) fetches and reads the key."""
    text = render_text(tmp_path, CUDA + "components:\n  ofed: {flavor: doca, version: '2.9.1'}\n", fmt)
    for part in (stage(text, "devel"), stage(text, "runtime")):
        assert "/doca/2.9.1/ubuntu22.04/x86_64/" in part
        assert not re.search(r"\b(gnupg|gpg|wget|apt-key)\b", part), part
        assert "hpccm.list" not in part
        step = part[part.index("DOCA OFED 2.9.1"):]
        step = step[:step.index("\n\n", step.index("apt-get install"))]
        # Written, used and removed within the one step.
        assert step.index(f"> {DOCA_LIST}") < step.index("apt-get update -y", step.index(f"> {DOCA_LIST}")) \
            < step.rindex(f"rm -f {DOCA_LIST} {DOCA_KEYFILE}")
        assert f"[signed-by={DOCA_KEYFILE}]" in step and DOCA_KEYFILE.endswith(".asc")
        if fmt == "singularity":
            assert "apt-get clean" in step and "rm -rf /var/lib/apt/lists/*" in step


def test_doca_repository_tree_is_named_after_the_bases_ubuntu(tmp_path):
    text = CUDA.replace("ubuntu22.04", "ubuntu24.04").replace("ubuntu22", "ubuntu24")
    assert "/doca/3.2.0/ubuntu24.04/x86_64/" in render_text(
        tmp_path, text + "components:\n  ofed: {flavor: doca, version: '3.2.0'}\n")


@pytest.mark.parametrize("flavor, version", [("inbox", None), ("doca", "2.9.1"), ("mlnx", "24.10-1.1.4.0")])
def test_ib_diagnostics_are_on_by_default(tmp_path, flavor, version):
    """Review cuda-recipes-2 finding 18: an HPC image without ib_write_bw is hard to debug. ibstat's
    infiniband-diags (with Debian's full perl) is asked for apart, with `diags: true`."""
    spec = f"{{flavor: {flavor}" + (f", version: '{version}'" if version else "") + "}"
    s = load_text(tmp_path, (CUDA if version else DEBIAN) + f"components:\n  ofed: {spec}\n")
    assert s.get("ofed").opts["tools"] is True
    runtime = stage(render_text(tmp_path, (CUDA if version else DEBIAN) + f"components:\n  ofed: {spec}\n"),
                    "runtime")
    for pkg in INBOX_TOOLS:
        assert pkg in runtime, pkg
    assert "infiniband-diags" not in runtime
    assert "ofed.tools" in {c.id for c in s.get("ofed").checks()}
    assert "ofed.diags" not in {c.id for c in s.get("ofed").checks()}
    diags = load_text(tmp_path, (CUDA if version else DEBIAN)
                      + f"components:\n  ofed: {spec[:-1]}, diags: true}}\n")
    assert "ofed.diags" in {c.id for c in diags.get("ofed").checks()}
    assert all(pkg in stage(render_text(tmp_path, (CUDA if version else DEBIAN)
                                        + f"components:\n  ofed: {spec[:-1]}, diags: true}}\n"), "runtime")
               for pkg in DIAGS_TOOLS)
    off = load_text(tmp_path, (CUDA if version else DEBIAN)
                    + f"components:\n  ofed: {spec[:-1]}, tools: false}}\n")
    assert "ofed.tools" not in {c.id for c in off.get("ofed").checks()}
    assert "perftest" not in stage(render_text(tmp_path, (CUDA if version else DEBIAN)
                                               + f"components:\n  ofed: {spec[:-1]}, tools: false}}\n"), "runtime")
