"""One reference, several platforms, against a real registry (Debian's docker-registry) and engine.

``imagekit push IMAGE... --to REF`` writes one OCI image index; each platform's exports are
referrers of that platform's own manifest; ``imagekit export REF --platform`` and ``imagekit pull
--platform`` pick from the index; a push that fails half-way leaves the tag as it was. The images
are one-layer images whose config names their architecture (tests/helpers/arch_images.py): what an
index does with them never runs them.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers.arch_images import make
from click.testing import CliRunner

from imagekit.util import platforms
from imagekit.engines import docker as engine
from imagekit.cli import main
from imagekit.util.errors import EngineError, ImagekitError, UsageError
from imagekit.export import artifacts as art
from imagekit.export import push as push_mod
from imagekit.util.platforms import Platform, PlatformError
from imagekit.registry import RegistryClient, parse
from imagekit.registry.client import MANIFEST_TYPES, OCI_INDEX

pytestmark = pytest.mark.engine

AMD, ARM = "ik-arch-test/multi:amd64", "ik-arch-test/multi:arm64"


@pytest.fixture(scope="module")
def images(tmp_path_factory, registry):
    """(amd64 image ID, arm64 image ID); the engine tags this module made are removed after it."""
    tmp = tmp_path_factory.mktemp("arch-images")
    ids = make(AMD, "amd64", tmp), make(ARM, "arm64", tmp)
    yield ids
    docker = engine.docker_cli()
    tags = subprocess.run([docker, "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                          text=True).stdout.split()
    mine = [t for t in tags if t.startswith(("ik-arch-test/", f"{registry}/imagekit-test/arch"))]
    subprocess.run([docker, "rmi", *mine], capture_output=True)


def cli(*args: str):
    result = CliRunner().invoke(main, list(args), prog_name="imagekit")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_one_index_names_each_platforms_own_manifest(images, registry):
    amd_id, arm_id = images
    res = cli("push", AMD, ARM, "--to", f"{registry}/imagekit-test/arch:1", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert (doc["pyxis"], doc["media_type"]) == (f"{registry}#imagekit-test/arch:1", OCI_INDEX)
    client = RegistryClient(registry)
    index = client.get_manifest("imagekit-test/arch", "1")
    assert (index.media_type, index.digest) == (OCI_INDEX, doc["digest"])
    entries = index.json()["manifests"]
    assert [e["platform"] for e in entries] == [{"os": "linux", "architecture": "amd64"},
                                                {"os": "linux", "architecture": "arm64"}]
    # Each entry is the manifest pushed under its own tag, and that manifest is the local image.
    for entry, own, image_id in zip(entries, ("1-amd64", "1-arm64"), (amd_id, arm_id)):
        assert client.get_manifest("imagekit-test/arch", own, ", ".join(MANIFEST_TYPES)).digest == entry["digest"]
        resolved = client.resolve(parse(f"{registry}#imagekit-test/arch@{entry['digest']}"))
        assert resolved.config_digest == image_id
    # A client resolves the tag to its own platform's image.
    ref = parse(f"{registry}#imagekit-test/arch:1")
    assert client.resolve(ref, Platform("linux", "arm64")).config_digest == arm_id
    assert client.resolve(ref, Platform("linux", "amd64")).config_digest == amd_id


def test_each_platforms_exports_are_referrers_of_its_own_manifest(images, registry, tmp_path):
    """Never one export for the whole index: a node pulls the squashfs of the image it runs."""
    amd_id, arm_id = images
    result, made = art.push_platforms_with_artifacts([AMD, ARM], f"{registry}/imagekit-test/arch-art:1",
                                                     art.ArtifactPlan.of(["enroot"], {"enroot": "fast"}))
    client = RegistryClient(registry)
    assert client.referrers("imagekit-test/arch-art", result.digest)[0] == [], "nothing names the index"
    for one, image_id in zip(result.platforms, (amd_id, arm_id)):
        listed, _ = client.referrers("imagekit-test/arch-art", one.digest)
        assert [e["digest"] for e in listed] == [a.digest for a in made[one.platform]]
        manifest = client.get_manifest("imagekit-test/arch-art", listed[0]["digest"]).json()
        assert manifest["subject"]["digest"] == one.digest
        assert manifest["annotations"][art.A_CONFIG] == image_id
    # `imagekit pull --platform` fetches that platform's file; the default is this machine's.
    for platform, arch in (("linux/arm64", "arm64"), (None, platforms.host().architecture)):
        out = tmp_path / f"{arch}.sqsh"
        args = ["pull", f"{registry}#imagekit-test/arch-art:1", "--to", "enroot", "-o", str(out), "-q"]
        assert cli(*args, *(["--platform", platform] if platform else [])).exit_code == 0
        said = subprocess.run(["unsquashfs", "-cat", str(out), "etc/imagekit-test-arch"], capture_output=True,
                              text=True, check=True).stdout
        assert said.split()[0] == arch


def test_export_picks_the_platform_from_the_index(images, registry, tmp_path):
    cli("push", AMD, ARM, "--to", f"{registry}/imagekit-test/arch-export:1", "-q")
    for platform, arch in (("linux/arm64", "arm64"), ("linux/amd64", "amd64")):
        out = tmp_path / f"{arch}.sqsh"
        res = cli("export", f"{registry}#imagekit-test/arch-export:1", "--to", "enroot", "--platform", platform,
                  "-o", str(out), "-q", "--no-store")
        assert res.exit_code == 0, res.output
        said = subprocess.run(["unsquashfs", "-cat", str(out), "etc/imagekit-test-arch"], capture_output=True,
                              text=True, check=True).stdout
        assert said.split()[0] == arch
    res = cli("export", f"{registry}#imagekit-test/arch-export:1", "--to", "enroot", "--platform", "linux/s390x",
              "-o", str(tmp_path / "x.sqsh"), "-q", "--no-store")
    assert res.exit_code == 2 and "has no linux/s390x image (it has: linux/amd64, linux/arm64)" in res.output
    assert not (tmp_path / "x.sqsh").exists()


def test_platform_expands_one_image_to_its_builds_local_tags(images, registry, docker_bin):
    """`imagekit build X --platform linux/amd64,linux/arm64` tags imagekit/X:latest and
    imagekit/X:latest-arm64; push --platform finds them by the same rule."""
    subprocess.run([docker_bin, "tag", AMD, "ik-arch-test/built:latest"], check=True)
    subprocess.run([docker_bin, "tag", ARM, "ik-arch-test/built:latest-arm64"], check=True)
    assert push_mod.platform_images(["ik-arch-test/built:latest"], platforms.parse_list("linux/amd64,linux/arm64")) \
        == ["ik-arch-test/built:latest", "ik-arch-test/built:latest-arm64"]
    res = cli("push", "ik-arch-test/built:latest", "--platform", "linux/amd64,linux/arm64",
              "--to", f"{registry}/imagekit-test/arch-built:2")
    assert res.exit_code == 0, res.output
    assert "OCI image index of 2 platforms" in res.stdout and "linux/arm64" in res.stdout


def test_a_push_that_fails_half_way_leaves_the_tag_as_it_was(images, registry, tmp_path, monkeypatch):
    """The second platform's push fails (here: push_image raises, as a dropped connection would make
    docker push fail after the first platform went up). The tag keeps its previous index, and
    every manifest that index names is still in the registry."""
    first = push_mod.push_platforms([AMD, ARM], f"{registry}/imagekit-test/arch-half:1")
    newer_amd = "ik-arch-test/multi:amd64-v2"
    make(newer_amd, "amd64", tmp_path, note="v2")
    real = push_mod.push_image
    calls = []

    def fails_on_arm64(image, to=None, log=None):
        calls.append(image)
        if image == ARM:
            raise EngineError(f"docker push {to} failed: connection reset by peer")
        return real(image, to, log=log)

    monkeypatch.setattr(push_mod, "push_image", fails_on_arm64)
    with pytest.raises(EngineError, match="connection reset"):
        push_mod.push_platforms([newer_amd, ARM], f"{registry}/imagekit-test/arch-half:1")
    assert calls == [newer_amd, ARM], "the amd64 image went up before the failure"
    monkeypatch.setattr(push_mod, "push_image", real)
    client = RegistryClient(registry)
    index = client.get_manifest("imagekit-test/arch-half", "1")
    assert index.digest == first.digest
    for entry in index.json()["manifests"]:
        client.get_manifest("imagekit-test/arch-half", entry["digest"], ", ".join(MANIFEST_TYPES))
    # A failure after the manifests (an artifact the registry refuses) writes no index either.

    def refuses(*_args):
        raise ImagekitError("the registry refused the artifact")

    with pytest.raises(ImagekitError, match="refused the artifact"):
        push_mod.push_platforms([newer_amd, ARM], f"{registry}/imagekit-test/arch-half:1", before_index=refuses)
    assert client.get_manifest("imagekit-test/arch-half", "1").digest == first.digest


def test_an_index_without_the_nodes_platform_is_an_error_naming_both(images, registry):
    push_mod.push_platforms([ARM], f"{registry}/imagekit-test/arch-armonly:1")
    client = RegistryClient(registry)
    with pytest.raises(PlatformError, match=r"has no linux/amd64 image \(it has: linux/arm64\)"):
        client.resolve(parse(f"{registry}#imagekit-test/arch-armonly:1"), Platform("linux", "amd64"))


@pytest.mark.parametrize("args, error, said", [
    ([AMD, "ik-arch-test/multi:amd64-v2"], UsageError, "are both linux/amd64 images"),
    (["ik-arch-test/missing:latest", ARM], EngineError, "is not in the local engine"),
])
def test_bad_platform_sets_are_refused_before_anything_is_pushed(images, registry, tmp_path, args, error, said):
    make("ik-arch-test/multi:amd64-v2", "amd64", tmp_path, note="v2")
    with pytest.raises(error, match=said):
        push_mod.push_platforms(args, f"{registry}/imagekit-test/arch-bad:1")
    with pytest.raises(Exception):
        RegistryClient(registry).get_manifest("imagekit-test/arch-bad", "1-amd64")


def test_cli_refuses_a_multi_platform_push_without_to_or_with_platform_and_several_images(images):
    res = cli("push", AMD, ARM)
    assert res.exit_code == 2 and "needs --to" in res.output
    res = cli("push", AMD, ARM, "--platform", "linux/arm64", "--to", "127.0.0.1:1/x:1")
    assert res.exit_code == 2 and "--platform names the platforms of one local IMAGE" in res.output
    res = cli("push", AMD, "--platform", "linux/riscv64", "--to", "127.0.0.1:1/x:1")
    assert res.exit_code == 2 and "imagekit builds linux images for linux/amd64, linux/arm64" in res.output


def test_an_index_of_images_pushed_by_other_machines(images, registry):
    """Each arch's native builder pushed its own image (TAG-amd64, TAG-arm64); one index names both
    as they are. A reference from another repository, or an index, is refused."""
    amd_id, arm_id = images
    repo = f"{registry}/imagekit-test/arch-merge"
    push_mod.push_image(AMD, f"{repo}:7-amd64")
    push_mod.push_image(ARM, f"{repo}:7-arm64")
    res = cli("push", f"docker://{repo}:7-amd64", f"{registry}#imagekit-test/arch-merge:7-arm64", "--to", f"{repo}:7",
              "--json")
    assert res.exit_code == 0, res.output
    client = RegistryClient(registry)
    ref = parse(f"{registry}#imagekit-test/arch-merge:7")
    assert client.resolve(ref, Platform("linux", "arm64")).config_digest == arm_id
    assert client.resolve(ref, Platform("linux", "amd64")).config_digest == amd_id
    with pytest.raises(UsageError, match="an index names manifests of its own repository"):
        push_mod.push_platforms([f"docker://{repo}:7-amd64"], f"{registry}/imagekit-test/elsewhere:7")
    with pytest.raises(UsageError, match="is an index itself"):
        push_mod.push_platforms([f"docker://{repo}:7"], f"{repo}:8")
