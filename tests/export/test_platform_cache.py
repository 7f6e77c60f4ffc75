"""The importer reads a plain manifest's platform from its config once per user and image
(:mod:`imagekit.export.platform_cache`), against a real registry, and the node's check runs on what it
recorded; a record that is not a platform, or not in a directory only this user can change, is passed over."""

from __future__ import annotations

import json
import os
import stat

import pytest

from imagekit import registry as reg
from imagekit.export import platform_cache, pyxis_importer
from imagekit.export.push import push_image
from imagekit.util import platforms
from imagekit.util.errors import ImagekitError

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def plain(registry, base_image):
    """The base image pushed as a plain manifest (no index: its platform is in its config)."""
    push_image(base_image, f"{registry}/imagekit-test/platform-cache:1")
    return f"docker://{registry}#imagekit-test/platform-cache:1"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "imagekit" / "platforms"


def resolve(uri: str, reads: list[str]) -> reg.Resolved:
    """``resolve_for_node`` as the importer calls it, counting the config reads (the registry's own)."""
    ref = reg.parse(uri)
    client = reg.RegistryClient.for_reference(ref, env=dict(os.environ))
    read = client.image_platform

    def counted(resolved: reg.Resolved) -> platforms.Platform:
        reads.append(resolved.config_digest)
        return read(resolved)

    client.image_platform = counted   # type: ignore[method-assign]
    return pyxis_importer.resolve_for_node(client, ref, uri)


def test_the_config_is_read_once_per_user_and_image(plain, cache):
    reads: list[str] = []
    first = resolve(plain, reads)
    second = resolve(plain, reads)
    assert reads == [first.config_digest] and second.config_digest == first.config_digest
    record = cache / f"{first.config_digest.split(':')[1]}.json"
    assert json.loads(record.read_text()) == platforms.host().as_dict()
    assert stat.S_IMODE(record.stat().st_mode) == 0o600 and stat.S_IMODE(cache.stat().st_mode) == 0o700


def test_the_node_check_runs_on_the_record(plain, cache):
    """A record saying arm64 is refused on an amd64 node as the config would be for an arm64 image: the
    check reads the record, so what it records is what it checks."""
    if platforms.host().architecture != "amd64":
        pytest.skip("an amd64 node's view")
    reads: list[str] = []
    digest = resolve(plain, reads).config_digest
    (cache / f"{digest.split(':')[1]}.json").write_text('{"os": "linux", "architecture": "arm64"}')
    with pytest.raises(ImagekitError, match="is a linux/arm64 image, but this node is linux/amd64"):
        resolve(plain, reads)
    assert reads == [digest]


@pytest.mark.parametrize("record", ['{"os": "linux", "architecture": "arm64", "note": 1}',
                                    '{"os": "linux", "architecture": "arm 64"}', "not json", "[]"])
def test_a_record_that_is_not_a_platform_is_passed_over(plain, cache, record):
    reads: list[str] = []
    digest = resolve(plain, reads).config_digest
    path = cache / f"{digest.split(':')[1]}.json"
    path.write_text(record)
    resolve(plain, reads)
    assert reads == [digest, digest]                       # asked the registry again
    assert json.loads(path.read_text()) == platforms.host().as_dict()   # and put the truth back


def test_a_record_others_could_change_is_passed_over(plain, cache, tmp_path):
    reads: list[str] = []
    digest = resolve(plain, reads).config_digest
    cache.chmod(0o777)
    assert platform_cache.known(digest) is None
    resolve(plain, reads)
    assert reads == [digest, digest]
    cache.chmod(0o700)
    path = cache / f"{digest.split(':')[1]}.json"
    path.unlink()
    elsewhere = tmp_path / "arm64.json"
    elsewhere.write_text('{"os": "linux", "architecture": "arm64"}')
    path.symlink_to(elsewhere)                             # a link is not a record
    assert platform_cache.known(digest) is None
