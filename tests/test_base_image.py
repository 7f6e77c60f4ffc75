"""Offline base images: mirror discovery (unit), a real bootstrap reused on the second call, and
``imagekit base debian:bookworm --engine podman`` run as the unprivileged test user (mmdebstrap's
unshare mode streamed into ``podman import``) giving the Docker base image's config and tree."""


import json
import os
import subprocess
from pathlib import Path

import pytest

from imagekit import base_image as base_mod
from imagekit.engines import docker as engine
from imagekit.util.errors import UsageError
from helpers.users import other_python  # noqa: F401 - the fixture
from helpers.podman_user import user  # noqa: F401 - the fixture


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


def test_unknown_bootstrapper_is_a_usage_error_before_anything_runs():
    with pytest.raises(UsageError, match="bootstrapper 'cdebootstrap'") as err:
        base_mod.ensure(base_mod.BaseRequest("debian:bookworm", mirror="http://x", bootstrapper="cdebootstrap"))
    assert "mmdebstrap" in err.value.hint and "debootstrap" in err.value.hint


@pytest.mark.parametrize("euid, mode", [(0, "--mode=auto"), (1001, "--mode=unshare")])
def test_mmdebstrap_mode_is_unshare_for_a_user(monkeypatch, euid, mode):
    """As a user the mode is named: auto would fall back to fakechroot (wrong owners) where the
    subordinate ids are missing, instead of failing."""
    monkeypatch.setattr(base_mod.os, "geteuid", lambda: euid)
    argv = base_mod.mmdebstrap_argv(base_mod.parse("debian:bookworm", mirror="http://x"))
    assert mode in argv and argv[-3:] == ["bookworm", "-", "http://x"]


@pytest.mark.engine
def test_base_image_has_cmd_path_and_labels_and_is_reused(base_image):
    attrs = engine.client().images.get(base_image).attrs["Config"]
    assert attrs["Cmd"] == ["/bin/bash"], "Enroot and Pyxis refuse an image without a CMD"
    assert any(e.startswith("PATH=/usr/local/sbin:") for e in attrs["Env"])
    assert attrs["Labels"]["io.imagekit.base"] == "debian:bookworm"
    said = []
    before = engine.client().images.get(base_image).id
    assert base_mod.ensure(base_mod.BaseRequest("debian:bookworm"), log=said.append) == base_image
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
    from imagekit import build, checks, stack
    from imagekit.checks import runner

    tag = base_mod.ensure(base_mod.BaseRequest("debian:trixie", components=("main", "contrib", "non-free")),
                          log=lambda *_: None)
    sources = subprocess.run([engine.docker_cli(), "run", "--rm", tag, "sh", "-c",
                              "cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null; true"],
                             capture_output=True, text=True, check=True).stdout
    assert "trixie main contrib non-free" in sources
    assert engine.image_labels(tag)["io.imagekit.base.components"] == "main,contrib,non-free"
    s = stack.load(write_stack(TRIXIE))
    assert [s.get(n).version for n in ("openmpi", "pmix", "ucx")] == ["5.0.7", "5.0.7", "1.18.1"]
    image = build.build(s, build.BuildRequest(log_dir=tmp_path)).tags[0]
    report = runner.run(image, checks.stack_checks(s))
    assert not report.failed, [(o.id, o.detail) for o in report.failed]
    # Open MPI 5's PMIx check reads the configure line: an internal PMIx must fail it.
    (tmp_path / "Dockerfile").write_text(
        f"FROM {image}\nRUN printf '#!/bin/sh\\necho \"config:cli:\x27--with-pmix=internal\x27\"\\n' "
        "> /usr/local/bin/ompi_info && chmod 755 /usr/local/bin/ompi_info\n")
    broken = "imagekit-test/trixie-internal-pmix:latest"
    subprocess.run([engine.docker_cli(), "build", "-q", "-t", broken, str(tmp_path)], check=True,
                   capture_output=True, env={**os.environ, "DOCKER_BUILDKIT": "1"})
    try:
        outcomes = {o.id: o.status for o in runner.run(broken, checks.stack_checks(s)).outcomes}
        assert outcomes["openmpi.pmix_external"] == "failed"
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", image, broken], capture_output=True)


# --- rootless: `imagekit base --engine podman` as the test user ---------------------------------

# Every path of the image below /, with its owner, group, mode and type; what the engine itself
# mounts into a container (and the volatile /var/log, /var/cache) is left out.
TREE = r"""find / -xdev -mindepth 1 \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp \
  -o -path /var/log -o -path /var/cache -o -path /etc/hosts -o -path /etc/hostname -o -path /etc/resolv.conf \
  -o -path /.dockerenv -o -path /.containerenv \) -prune -o -printf '%u:%g %m %y %p\n' | LC_ALL=C sort -k4
"""
# apt's and dpkg's own bookkeeping, which the two bootstrappers write differently (debootstrap:
# dpkg's available/cmethopt; mmdebstrap: dpkg's arch, apt's extended_states and the lists' lock
# and partial/ apt made itself); nothing a build or a check reads.
BOOKKEEPING = {"/var/lib/apt/extended_states", "/var/lib/apt/lists/lock", "/var/lib/apt/lists/partial",
               "/var/lib/dpkg/available", "/var/lib/dpkg/cmethopt", "/var/lib/dpkg/arch"}
FACTS = ("dpkg-query -W; echo ---; cat /etc/apt/apt.conf.d/01imagekit-keep-debs; echo ---; "
         "find /var/lib/apt/lists -type f ! -name lock")


@pytest.fixture(scope="module")
def rootless_base(user, base_image):
    """``imagekit base debian:bookworm --engine podman`` as the user, from the mirror the Docker
    base came from, under a tag of this test's own: the user's ``imagekit/debian:bookworm`` is
    left alone (other builds of the user use it). (tag, the command's stderr)."""
    mirror = engine.image_labels(base_image)["io.imagekit.base.mirror"]
    tag = f"imagekit-test/rootless-base-{os.getpid()}:bookworm"
    try:
        proc = user.imagekit("base", "debian:bookworm", "--engine", "podman", "--mirror", mirror, "--tag", tag)
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert proc.stdout.strip() == tag
        yield tag, proc.stderr
    finally:
        user.podman("rmi", "-f", tag)


def _config(config: dict) -> dict:
    labels = dict(config.get("Labels") or {})
    assert labels.pop("org.opencontainers.image.created")
    return {"Cmd": config.get("Cmd"), "Env": config.get("Env"), "Labels": labels}


def _in_docker(image: str, script: str) -> str:
    return subprocess.run([engine.docker_cli(), "run", "--rm", "-i", "--network", "none", image, "sh", "-s"],
                          input=script, capture_output=True, text=True, check=True).stdout


def _in_podman(user, image: str, script: str) -> str:
    proc = user.podman("run", "--rm", "-i", "--network", "none", image, "sh", "-s", input=script)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.engine
def test_rootless_base_has_the_docker_base_config_and_shows_its_progress(user, base_image, rootless_base):
    tag, stderr = rootless_base
    proc = user.podman("image", "inspect", "--format", "{{json .Config}}", tag)
    assert proc.returncode == 0, proc.stderr
    docker_config = engine.client().images.get(base_image).attrs["Config"]
    assert _config(json.loads(proc.stdout)) == _config(docker_config)
    # Progress: mmdebstrap's stages as they happen, in the mode a user needs.
    assert "with mmdebstrap (rootless, unshare mode" in stderr
    for stage in ("downloading packages", "installing essential packages", "creating tarball"):
        assert f"mmdebstrap: {stage}" in stderr, stderr
    assert f"imported {tag}" in stderr


@pytest.mark.engine
def test_rootless_base_has_the_docker_base_packages_and_tree(user, base_image, rootless_base):
    """The same packages, the keep-debs apt setting, no apt lists; every path with the same owner,
    group and mode (the unshare mode's id mapping lands on Podman's: /etc/shadow stays
    root:shadow, /var/mail root:mail)."""
    tag, _ = rootless_base
    podman_facts, docker_facts = _in_podman(user, tag, FACTS), _in_docker(base_image, FACTS)
    packages, keep, lists = podman_facts.split("---\n")
    assert packages == docker_facts.split("---\n")[0] and len(packages.splitlines()) > 50
    assert "usrmerge" not in packages and "\nperl\t" not in packages
    assert keep == base_mod.APT_KEEP and lists == ""
    assert docker_facts.split("---\n")[1:] == [keep, lists]

    def tree(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.split(" ", 3)[3] not in BOOKKEEPING]
    podman_tree, docker_tree = tree(_in_podman(user, tag, TREE)), tree(_in_docker(base_image, TREE))
    assert "root:shadow 640 f /etc/shadow" in podman_tree and len(podman_tree) > 5000
    assert podman_tree == docker_tree


@pytest.mark.engine
def test_a_user_without_mmdebstrap_gets_one_error_naming_the_fix(user):
    """mmdebstrap taken off the PATH (every other tool of /usr/bin still there): one error naming
    the package and the copy from Docker, before anything is bootstrapped or imported."""
    bin_dir = user.dir("bin-without-mmdebstrap")
    for entry in Path("/usr/bin").iterdir():
        if entry.name != "mmdebstrap" and not (bin_dir / entry.name).is_symlink():
            (bin_dir / entry.name).symlink_to(entry)
    tag = f"imagekit-test/no-mmdebstrap-{os.getpid()}:bookworm"
    proc = user.imagekit("base", "debian:bookworm", "--engine", "podman", "--tag", tag, env={"PATH": str(bin_dir)})
    assert proc.returncode == 1, proc.stderr
    assert "rootless Podman base image needs mmdebstrap" in proc.stderr
    assert "apt-get install mmdebstrap" in proc.stderr and f"docker save {tag} | podman load" in proc.stderr
    assert "Traceback" not in proc.stderr and "bootstrapping" not in proc.stderr
    assert user.podman("image", "exists", tag).returncode == 1


# -- arm64 ---------------------------------------------------------------------------------------

def test_an_arm64_base_has_its_own_tag_and_bootstraps_arm64():
    spec = base_mod.parse("debian:bookworm", mirror="http://x", arch="arm64")
    assert (spec.tag, spec.arch, spec.debian_arch) == ("imagekit/debian:bookworm-arm64", "aarch64", "arm64")
    assert "--architectures=arm64" in base_mod.mmdebstrap_argv(spec)
    assert base_mod.parse("debian:bookworm", mirror="http://x", arch="aarch64").tag == spec.tag
    with pytest.raises(UsageError, match="unknown architecture 'sparc'") as err:
        base_mod.parse("debian:bookworm", mirror="http://x", arch="sparc")
    assert "arm64 (aarch64)" in err.value.hint


def test_an_arm64_base_with_podman_is_refused_with_the_copy_to_make():
    with pytest.raises(UsageError, match="made with the Docker engine only") as err:
        base_mod.ensure(base_mod.BaseRequest("debian:bookworm", mirror="http://x", arch="arm64", engine_name="podman",
                                             force=True))
    assert "docker save imagekit/debian:bookworm-arm64 | podman load" in err.value.hint


@pytest.mark.engine
@pytest.mark.heavy
def test_the_arm64_base_is_an_arm64_image_that_runs_arm64_programs(base_image_arm64, base_image):
    """Builds the arm64 base (mmdebstrap/debootstrap through QEMU: ~6 min cold on 2 cores).

    Its config says arm64 (so BuildKit takes it for --platform linux/arm64), it keeps the amd64
    base's CMD, PATH and labels, its programs are arm64 (uname in a container reports aarch64,
    through qemu-user-static), and the amd64 base was not replaced."""
    arm, amd = engine.inspect(base_image_arm64), engine.inspect(base_image)
    assert (arm.attrs["Architecture"], amd.attrs["Architecture"]) == ("arm64", "amd64")
    assert arm.config["Cmd"] == ["/bin/bash"] and any(e.startswith("PATH=/usr/local/sbin:") for e in arm.config["Env"])
    assert arm.labels["io.imagekit.base"] == "debian:bookworm"
    out = subprocess.run([engine.docker_cli(), "run", "--rm", "--platform", "linux/arm64", base_image_arm64,
                          "sh", "-c", "uname -m; dpkg --print-architecture"], capture_output=True, text=True)
    assert out.stdout.split() == ["aarch64", "arm64"], out.stderr
    said = []
    assert base_mod.ensure(base_mod.BaseRequest("debian:bookworm", arch="arm64"), log=said.append) == base_image_arm64
    assert "reusing" in said[0]
