"""Architectures and OCI platforms (unit): spellings, local tags, picking an index's entry, and the
refusal of an image the node cannot run, naming both architectures."""

import pytest

from imagekit.util import platforms
from imagekit.util.errors import UsageError
from imagekit.util.platforms import Platform, PlatformError

INDEX = [
    {"digest": "sha256:" + "a" * 64, "platform": {"os": "linux", "architecture": "amd64"}},
    {"digest": "sha256:" + "b" * 64, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
    # An attestation manifest (BuildKit writes them): no image, never picked, never listed.
    {"digest": "sha256:" + "c" * 64, "platform": {"os": "unknown", "architecture": "unknown"}},
]


@pytest.mark.parametrize("text, want", [
    ("linux/arm64", Platform("linux", "arm64")),
    ("linux/aarch64", Platform("linux", "arm64")),
    ("arm64", Platform("linux", "arm64")),
    ("x86_64", Platform("linux", "amd64")),
    ("linux/arm64/v8", Platform("linux", "arm64", "v8")),
])
def test_every_spelling_names_one_platform(text, want):
    assert platforms.parse(text) == want


@pytest.mark.parametrize("text", ["", "linux/", "/arm64", "a/b/c/d"])
def test_a_platform_that_is_not_os_arch_is_a_usage_error(text):
    with pytest.raises(UsageError, match="is not OS/ARCH"):
        platforms.parse(text)


def test_a_list_drops_duplicates_written_two_ways():
    assert platforms.parse_list("linux/amd64,linux/arm64,aarch64") == [Platform("linux", "amd64"),
                                                                      Platform("linux", "arm64")]
    assert platforms.parse_list(("linux/amd64", "linux/arm64")) == platforms.parse_list("amd64,arm64")


def test_only_linux_amd64_and_arm64_are_built():
    assert platforms.buildable(platforms.parse("linux/arm64")) == "aarch64"
    with pytest.raises(PlatformError, match="linux/ppc64le: imagekit builds linux images for linux/amd64, "
                                            "linux/arm64"):
        platforms.buildable(platforms.parse("linux/ppc64le"))


@pytest.mark.parametrize("ref, arch, want", [
    ("imagekit/debian-mpi:latest", "x86_64", "imagekit/debian-mpi:latest"),
    ("imagekit/debian-mpi:latest", "aarch64", "imagekit/debian-mpi:latest-arm64"),
    ("imagekit/debian:bookworm", "arm64", "imagekit/debian:bookworm-arm64"),
    ("imagekit/debian:bookworm-arm64", "aarch64", "imagekit/debian:bookworm-arm64"),
    ("127.0.0.1:5000/hpc/mpi", "aarch64", "127.0.0.1:5000/hpc/mpi:latest-arm64"),
    ("r.example/hpc/mpi@sha256:" + "d" * 64, "aarch64", "r.example/hpc/mpi@sha256:" + "d" * 64),
])
def test_local_tags_carry_the_architecture_except_x86_64s(ref, arch, want):
    assert platforms.local_tag(ref, arch) == want


def test_pick_takes_the_nodes_entry_and_ignores_attestations():
    assert platforms.pick(INDEX, Platform("linux", "arm64"), "r#x:1")["digest"].endswith("b" * 64)
    assert platforms.pick(INDEX, Platform("linux", "amd64"), "r#x:1")["digest"].endswith("a" * 64)
    # A variant is matched only when asked for.
    with pytest.raises(PlatformError):
        platforms.pick(INDEX, Platform("linux", "arm64", "v9"), "r#x:1")


def test_an_index_with_no_entry_for_the_node_names_both():
    with pytest.raises(PlatformError) as err:
        platforms.pick(INDEX[1:], Platform("linux", "amd64"), "r#hpc/mpi:1")
    assert str(err.value).startswith("r#hpc/mpi:1 has no linux/amd64 image (it has: linux/arm64/v8)")
    assert err.value.exit_code == 2


def test_the_default_is_this_machines_platform(monkeypatch):
    monkeypatch.setattr(platforms, "host_machine", lambda: "aarch64")
    assert platforms.host() == Platform("linux", "arm64")
    assert platforms.pick(INDEX, None, "r#x:1")["digest"].endswith("b" * 64)


def test_an_image_of_another_architecture_is_refused_naming_both():
    with pytest.raises(PlatformError) as err:
        platforms.check_runs_here(Platform("linux", "arm64"), "r#hpc/mpi:1", node=Platform("linux", "amd64"))
    message = str(err.value)
    assert "r#hpc/mpi:1 is a linux/arm64 image, but this node is linux/amd64 (x86_64)" in message
    assert "--platform linux/amd64,linux/arm64" in err.value.hint
    platforms.check_runs_here(Platform("linux", "amd64"), "r#hpc/mpi:1", node=Platform("linux", "amd64"))
    platforms.check_runs_here(Platform("linux", ""), "an image that names none", node=Platform("linux", "amd64"))


def test_a_config_or_inspect_document_gives_its_platform():
    assert Platform.of({"architecture": "arm64", "os": "linux", "variant": "v8"}) == Platform("linux", "arm64", "v8")
    assert Platform.of({"Architecture": "amd64", "Os": "linux"}) == Platform("linux", "amd64")
    assert Platform.of({"architecture": "aarch64"}).arch == "aarch64"
