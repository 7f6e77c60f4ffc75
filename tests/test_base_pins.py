"""Base images pinned by digest (``name:tag@sha256:…``): the pin is held against what the tag names before a
build, in a real local registry (docker-registry) holding a multi-platform image, the case where a digest is
most often copied wrong (one platform's manifest instead of the index)."""

from __future__ import annotations

import pytest

from imagekit import base_pins
from imagekit import stack as stack_mod
from imagekit.engines import docker as docker_engine
from imagekit.engines.image import Image, ImageMissing
from imagekit.util.errors import StackError
from imagekit.registry import RegistryClient
from helpers.local_registry import push_test_image
from helpers.stack_helpers import write


class _Store:
    """An engine store that holds ``digests`` for every tag (None: holds no copy). Stands in for the engine
    only in what verify() asks of it (inspect's RepoDigests), so a test can give the tag any digest."""

    def __init__(self, digests):
        self.digests = digests

    def inspect(self, ref):
        if self.digests is None:
            raise ImageMissing(ref)
        return Image(ref=ref, id="sha256:" + "0" * 64, labels={}, size=0, config={},
                     attrs={"RepoDigests": [f"{ref.partition(':')[0]}@{d}" for d in self.digests]})


def _stack(tmp_path, image: str):
    return stack_mod.load(write(tmp_path, f"name: p\nbase:\n  image: {image}\n  distro: ubuntu22\n"))


def test_parse_keeps_the_tag_for_reading():
    pin = base_pins.parse("nvidia/cuda:12.9.1-devel-ubuntu22.04@sha256:" + "a" * 64)
    assert (pin.name, pin.tag, pin.tagged) == ("nvidia/cuda", "12.9.1-devel-ubuntu22.04",
                                               "nvidia/cuda:12.9.1-devel-ubuntu22.04")
    assert base_pins.parse("nvidia/cuda:12.9.1-devel-ubuntu22.04") is None


def test_a_pin_is_verified_against_its_tag_in_the_registry(registry, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))          # no credentials of this machine's user
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    client = RegistryClient(registry, env={"HOME": str(tmp_path), "DOCKER_CONFIG": str(tmp_path / "docker")})
    pushed = push_test_image(client, "ik-gpu/cuda", "1", architectures=("amd64", "arm64"))
    right = _stack(tmp_path, f"{registry}/ik-gpu/cuda:1@{pushed['index']}")
    assert base_pins.verify(right, docker_engine.ENGINE) == []
    wrong = _stack(tmp_path, f"{registry}/ik-gpu/cuda:1@{pushed['digest']}")   # amd64's manifest
    with pytest.raises(StackError) as info:
        base_pins.verify(wrong, docker_engine.ENGINE)
    text = str(info.value) + info.value.hint
    assert pushed["digest"] in text and pushed["index"] in text and "base.image" in text
    assert "one platform's manifest" in text


def test_a_pin_nothing_can_verify_says_so(tmp_path):
    """No engine copy and no registry in reach (the case on this machine for nvidia/cuda)."""
    s = _stack(tmp_path, "127.0.0.1:9/none/cuda:1@sha256:" + "b" * 64)
    notes = base_pins.verify(s, _Store(None))
    assert len(notes) == 1 and "not verified" in notes[0]


def test_the_engines_copy_of_the_tag_is_asked_first(tmp_path):
    s = _stack(tmp_path, "site/cuda:1@sha256:" + "c" * 64)
    assert base_pins.verify(s, _Store(["sha256:" + "c" * 64]),
                            registry_digest=lambda _ref: pytest.fail("the registry was asked")) == []
    with pytest.raises(StackError, match="the local engine's copy of the tag"):
        base_pins.verify(s, _Store(["sha256:" + "d" * 64]))
