"""Upstream artifacts from a site mirror: pins, lookups, errors before any build step."""

from __future__ import annotations

import hashlib

import pytest
from click.testing import CliRunner

from imagekit import render, sources, stack
from imagekit.cli import main

GDRCOPY = "gdrcopy-2.5.1.tar.gz"


def _stack_text(sha: str) -> str:
    return f"""\
name: gdr
base: {{image: imagekit/debian:bookworm, distro: debian12}}
components:
  cuda: {{source: pypi, version: "13.0.2"}}
  gdrcopy: {{version: "2.5.1", sha256: "{sha}"}}
"""


def _pin(site_mirror) -> str:
    for line in (site_mirror / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        if name == GDRCOPY:
            return digest
    raise AssertionError("the mirror lists no gdrcopy 2.5.1")


def test_a_mirror_file_is_verified_and_staged_into_the_build_context(site_mirror, write_stack, tmp_path):
    s = stack.load(write_stack(_stack_text(_pin(site_mirror))), mirror=str(site_mirror))
    staged = sources.stage(s, tmp_path / "ctx")
    assert [p.name for p in staged] == [GDRCOPY]
    assert hashlib.sha256(staged[0].read_bytes()).hexdigest() == _pin(site_mirror)
    text = render.render(s)
    assert f"COPY sources/{GDRCOPY} /var/tmp/{GDRCOPY}" in text
    assert f"echo '{_pin(site_mirror)}  /var/tmp/{GDRCOPY}' | sha256sum -c -" in text  # checked in the build too


def test_without_a_mirror_the_recipe_downloads_upstream_and_checks_the_pin(write_stack):
    s = stack.load(write_stack(_stack_text("ab" * 32)))
    text = render.render(s)
    assert "wget -q -nc -P /var/tmp https://github.com/NVIDIA/gdrcopy/archive/v2.5.1.tar.gz" in text
    assert f"echo '{'ab' * 32}  /var/tmp/v2.5.1.tar.gz' | sha256sum -c -" in text


def test_a_file_missing_from_the_mirror_names_component_url_and_path(write_stack, tmp_path):
    empty = tmp_path / "mirror"
    empty.mkdir()
    s = stack.load(write_stack(_stack_text("ab" * 32)), mirror=str(empty))
    with pytest.raises(sources.SourceError) as err:
        sources.stage(s, tmp_path / "ctx")
    text = str(err.value)
    assert "gdrcopy: gdrcopy-2.5.1.tar.gz is not in the mirror" in text
    assert "https://github.com/NVIDIA/gdrcopy/archive/v2.5.1.tar.gz" in text
    assert str(empty / GDRCOPY) in text


def test_a_checksum_mismatch_names_both_digests_and_the_fix(site_mirror, write_stack, tmp_path):
    altered = tmp_path / "mirror"
    altered.mkdir()
    (altered / GDRCOPY).write_bytes((site_mirror / GDRCOPY).read_bytes() + b"\0")
    s = stack.load(write_stack(_stack_text(_pin(site_mirror))), mirror=str(altered))
    with pytest.raises(sources.SourceError) as err:
        sources.stage(s, tmp_path / "ctx")
    text = str(err.value)
    assert "checksum mismatch" in text and _pin(site_mirror) in text and str(altered / GDRCOPY) in text
    assert "sha256:" in text  # the fix for a deliberately rebuilt file
    assert not (tmp_path / "ctx" / "sources" / GDRCOPY).exists()


def test_a_url_mirror_is_fetched_once_into_the_cache(site_mirror, write_stack, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    s = stack.load(write_stack(_stack_text(_pin(site_mirror))), mirror=site_mirror.as_uri())
    staged = sources.stage(s, tmp_path / "ctx")
    cached = tmp_path / "cache" / "imagekit" / "sources" / _pin(site_mirror) / GDRCOPY
    assert cached.is_file() and staged[0].read_bytes() == cached.read_bytes()
    assert not list(cached.parent.glob(".*.part"))


def test_mirror_precedence_flag_over_environment_over_stack_file(write_stack, tmp_path, monkeypatch):
    path = write_stack(_stack_text("ab" * 32).replace("components:", "mirror: site-mirror\ncomponents:"))
    assert stack.load(path).mirror == str(path.parent / "site-mirror")  # relative to the stack file
    monkeypatch.setenv("IMAGEKIT_MIRROR", "https://mirror.example.org/src/")
    assert stack.load(path).mirror == "https://mirror.example.org/src"
    assert stack.load(path, mirror=str(tmp_path)).mirror == str(tmp_path)


def test_an_unpinned_upstream_version_is_refused_with_the_fix(write_stack):
    path = write_stack(_stack_text("x").replace(', sha256: "x"', "").replace("2.5.1", "2.4.2"))
    result = CliRunner().invoke(main, ["render", str(path)])
    assert result.exit_code == 2
    assert "no sha256 pin for gdrcopy 2.4.2" in result.output and "sha256:" in result.output
    assert "2.4.4, 2.5.1" in result.output  # the pinned versions


def test_render_with_a_mirror_stages_verified_files_beside_the_recipe(site_mirror, write_stack, tmp_path):
    path = write_stack(_stack_text(_pin(site_mirror)))
    out = tmp_path / "ctx" / "Dockerfile"
    result = CliRunner().invoke(main, ["render", str(path), "--mirror", str(site_mirror), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert (out.parent / "sources" / GDRCOPY).is_file() and "COPY sources/" in out.read_text()


def test_every_builtin_pin_is_a_sha256():
    assert sources.PINS and all(len(v) == 64 and int(v, 16) >= 0 for v in sources.PINS.values())


def test_the_shipped_cuda_stack_pins_match_the_mirror(site_mirror):
    """debian-cuda's pins are the stand-in mirror's files (SHA256SUMS), which differ from upstream's."""
    sums = dict(reversed(line.split()) for line in (site_mirror / "SHA256SUMS").read_text().splitlines())
    for artifact in sources.artifacts(stack.load("debian-cuda", mirror=str(site_mirror))):
        assert sums.get(artifact.filename) == artifact.sha256, artifact.filename
