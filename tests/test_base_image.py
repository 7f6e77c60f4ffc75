"""Offline base images: mirror discovery (unit) and a real bootstrap reused on the second call."""


import pytest

from imagekit import base_image as base_mod
from imagekit import engine
from imagekit.errors import UsageError


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


@pytest.mark.engine
def test_base_image_has_cmd_path_and_labels_and_is_reused(base_image):
    attrs = engine.client().images.get(base_image).attrs["Config"]
    assert attrs["Cmd"] == ["/bin/bash"], "Enroot and Pyxis refuse an image without a CMD"
    assert any(e.startswith("PATH=/usr/local/sbin:") for e in attrs["Env"])
    assert attrs["Labels"]["io.imagekit.base"] == "debian:bookworm"
    said = []
    before = engine.client().images.get(base_image).id
    assert base_mod.ensure("debian:bookworm", log=said.append) == base_image
    assert "reusing" in said[0] and engine.client().images.get(base_image).id == before
