"""aws-ofi-nccl: libfabric's NCCL network plugin, added as one new module and built for real.

It builds on the offline CUDA stack (debian-cuda) from the site mirror's release
tarball and Debian's libfabric. There is no EFA device or GPU here: the checks
prove what can be proved without one (the plugin's library closure, that the
loader resolves the file NCCL_NET_PLUGIN names the way NCCL looks it up, the
plugin interface symbols NCCL binds, libfabric's providers), then fail on a
broken copy.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from helpers.added_alone import assert_added_alone
from imagekit import build, checks, stack
from imagekit.engines import docker as engine
from imagekit.checks import runner
from imagekit.util.errors import StackError
from imagekit.image_facts import writer

PIN = "79f99d3fa604e82ab1b6df57ce63c19bbc53a6b646826bc5fd93c3b422a39961"  # the stand-in mirror's file
EFA = """\
name: debian-cuda-efa
extends: debian-cuda
description: the offline CUDA stack with aws-ofi-nccl over Debian's libfabric
components:
  aws-ofi-nccl: {{version: "1.21.1", sha256: "{pin}", accept: [no-gdr]{extra}}}
"""
CHECKS = {"aws-ofi-nccl.plugin", "aws-ofi-nccl.ldd", "aws-ofi-nccl.nccl_finds_it", "aws-ofi-nccl.interface",
          "aws-ofi-nccl.fi_info"}


def _stack(tmp_path, mirror, extra="", text=None):
    path = tmp_path / "debian-cuda-efa.yaml"
    path.write_text(text or EFA.format(pin=PIN, extra=extra))
    return stack.load(str(path), mirror=str(mirror))


def test_added_as_one_module():
    # CSCS names its NCCL hook after the plugin; the EDF target writes that annotation key, not this component.
    assert_added_alone("aws_ofi_nccl", "aws-ofi-nccl", external=("com.hooks.aws_ofi_nccl",))


def test_it_fills_the_net_plugin_role_and_sets_what_nccl_reads(tmp_path, site_mirror):
    s = _stack(tmp_path, site_mirror)
    # libfabric is the distro's here: the role is the libfabric component's, which this stack does not have.
    assert s.provider("nccl-net-plugin").name == "aws-ofi-nccl" and "libfabric" not in s.roles()
    comp = s.get("aws-ofi-nccl")
    # Open MPI off pml ucx: no mlx device on EFA (review finding 13); AWS's recipe sets the same.
    # NCCL_NET: NCCL fails at init rather than falling back to its IB or sockets when the plugin does not load.
    assert comp.environment() == {"NCCL_NET_PLUGIN": "ofi", "FI_PROVIDER": "efa", "NCCL_NET": "Libfabric",
                                  "OMPI_MCA_pml": "^ucx"}
    assert writer.recipe_labels(s)["io.imagekit.component.aws-ofi-nccl.accepted"] == "no-gdr"
    # With NCCL_NET set, the image fails closed (and, on a GPU, NCCL must load the plugin with GDR).
    assert {c.id for c in comp.checks()} == CHECKS | {"aws-ofi-nccl.fails_closed", "aws-ofi-nccl.nccl_loads_it"}
    from imagekit.components import forwarded_env_prefixes

    assert {"FI_", "OFI_NCCL_"} <= set(forwarded_env_prefixes())  # FI_PROVIDER reaches outside-in ranks


@pytest.mark.parametrize("distro", ["debian12", "ubuntu22"])
def test_the_distros_libfabric_without_gpudirect_rdma_is_refused_unless_accepted(tmp_path, site_mirror, distro):
    """Review findings 2 and 16 (d.yaml): no distro builds libfabric with CUDA, so the plugin would stage every
    transfer through host memory; refused at the component's line, with `accept: [no-gdr]` as the way out."""
    text = EFA.format(pin=PIN, extra="").replace(", accept: [no-gdr]", "")
    if distro == "ubuntu22":
        text = (f"name: efa-ubuntu\nbase: {{image: nvidia/cuda:12.6.3-devel-ubuntu22.04, distro: ubuntu22}}\n"
                'components:\n  cuda: {}\n  nccl: {version: "2.23.4-1", source: repo}\n'
                f'  aws-ofi-nccl: {{version: "1.21.1", sha256: "{PIN}"}}\n')
    with pytest.raises(StackError, match=f"over {distro}'s libfabric .* has no GPUDirect RDMA") as info:
        _stack(tmp_path, site_mirror, text=text)
    assert info.value.key == "components.aws-ofi-nccl" and "add `accept: [no-gdr]` to aws-ofi-nccl" in info.value.hint
    assert _stack(tmp_path, site_mirror, text=text.replace('"}}\n', '", accept: [no-gdr]}}\n').replace(
        '"}\n', '", accept: [no-gdr]}\n')).get("aws-ofi-nccl").accepted("no-gdr")


def test_platform_aws_needs_a_newer_libfabric_than_bookworm(tmp_path, site_mirror):
    with pytest.raises(StackError, match="needs libfabric 1.22 or newer and debian12 has 1.17.0") as info:
        _stack(tmp_path, site_mirror, extra=", platform_aws: true")
    assert info.value.key == "components.aws-ofi-nccl.platform_aws" and "debian13" in info.value.hint


def test_the_provider_filter_is_the_stacks_and_refuses_shell_text(tmp_path, site_mirror):
    """Review finding 2: unfiltered, the plugin would carry an IB cluster's traffic over libfabric's verbs."""
    s = _stack(tmp_path, site_mirror, extra=', provider: "tcp;ofi_rxm"')
    assert s.get("aws-ofi-nccl").environment()["FI_PROVIDER"] == "tcp;ofi_rxm"
    with pytest.raises(StackError, match="libfabric provider names") as info:
        _stack(tmp_path, site_mirror, extra=', provider: "efa; touch /tmp/x"')
    assert info.value.key == "components.aws-ofi-nccl.provider"


def test_it_needs_nccl(tmp_path, site_mirror):
    text = ("name: efa-no-nccl\nextends: debian-cuda\ncomponents:\n  nccl: false\n  nccl-tests: false\n"
            f'  aws-ofi-nccl: {{version: "1.21.1", sha256: "{PIN}", accept: [no-gdr]}}\n')
    with pytest.raises(StackError, match="`aws-ofi-nccl` needs the `nccl` component"):
        _stack(tmp_path, site_mirror, text=text)


# A renamed plugin would still be found: ldconfig links its SONAME back. So the plugin goes, and with
# it every check that reads it; fi_info goes too.
BREAK = """set -e
rm -f /usr/bin/fi_info /opt/amazon/aws-ofi-nccl/lib/libnccl-net-ofi.so
ldconfig
"""


@pytest.mark.engine
@pytest.mark.heavy  # debian-cuda's source builds, cold
def test_it_builds_on_the_offline_cuda_stack_and_its_checks_catch_a_broken_copy(tmp_path, base_image,
                                                                                site_mirror):
    s = _stack(tmp_path, site_mirror)
    result = build.build(s, build.BuildRequest(log_dir=os.environ.get("IMAGEKIT_TEST_LOGS", "build/logs")))
    image = result.tags[0]
    report = runner.run(image, checks.stack_checks(s))
    outcome = {o.id: o for o in report.outcomes}
    assert all(outcome[c].status == "passed" for c in CHECKS), [(o.id, o.detail) for o in report.failed]
    assert report.ok, [(o.id, o.detail) for o in report.failed]

    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "Dockerfile").write_text(f"FROM {image}\nRUN {BREAK.strip().replace(chr(10), ' && ')}\n")
    subprocess.run([engine.docker_cli(), "build", "-q", "-t", "imagekit-test/efa-broken", str(tmp_path / "broken")],
                   check=True, capture_output=True, env={**os.environ, "DOCKER_BUILDKIT": "1"})
    broken = {o.id: o.status for o in runner.run("imagekit-test/efa-broken", checks.stack_checks(s)).outcomes}
    assert {c for c in CHECKS if broken[c] == "failed"} == CHECKS, broken


@pytest.mark.parametrize("distro, refused", [("ubuntu22", "needs libfabric 1.22 or newer and ubuntu22 has 1.11.0"),
                                             ("ubuntu20", "does not know which libfabric ubuntu20 ships")])
def test_ubuntu_bases_are_held_to_their_libfabric(tmp_path, site_mirror, distro, refused):
    """Review finding 16: on the nvidia/cuda Ubuntu 22.04 base `platform_aws` was accepted (its libfabric
    1.11 unknown to the rule); a distro whose libfabric is not known is refused, naming the ones that are."""
    text = (f"name: efa-ubuntu\nbase: {{image: nvidia/cuda:12.6.3-devel-{distro[:6]}{distro[6:]}.04, "
            f"distro: {distro}, arch: x86_64}}\n"
            'components:\n  cuda: {version: "12.6.3"}\n  nccl: {version: "2.23.4-1", source: repo}\n'
            f'  aws-ofi-nccl: {{version: "1.21.1", sha256: "{PIN}", platform_aws: true, accept: [no-gdr]}}\n')
    with pytest.raises(StackError, match=refused) as info:
        _stack(tmp_path, site_mirror, text=text)
    assert info.value.hint and ("debian13" in info.value.hint)
