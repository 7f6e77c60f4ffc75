"""imagekit.util.registry_names: one spelling per registry and engine image (security-4 H11)."""

from __future__ import annotations

import pytest

from imagekit.util import registry_names as names


@pytest.mark.parametrize("given, canonical", [
    ("Registry.Example.org.:05000", "registry.example.org:5000"), ("reg.example.org:443", "reg.example.org"),
    ("Docker.IO", "registry-1.docker.io"), ("index.docker.io:443", "registry-1.docker.io"),
    ("[::1]:05000", "[::1]:5000"), ("127.0.0.1:5000", "127.0.0.1:5000"),
    ("*.Example.org", "*.example.org"),                 # a pattern: only lower-cased
])
def test_registry(given, canonical):
    assert names.registry(given) == canonical


@pytest.mark.parametrize("given, canonical", [
    ("docker.io/library/x:1", "x:1"), ("library/x", "x"), ("x:1", "x:1"), ("docker.io/ci/img", "ci/img"),
    ("Reg.Example.org.:05000/ci/img:1", "reg.example.org:5000/ci/img:1"), ("sha256:0123abc", "sha256:0123abc"),
    ("docker.io/library/a/b", "library/a/b"),
])
def test_engine_image(given, canonical):
    assert names.engine_image(given) == canonical
