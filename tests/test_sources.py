"""Upstream artifacts from a site mirror: pins, lookups, errors before any build step."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit import render, sources, stack
from imagekit.cli import main

# The stand-in mirror's own checksums, which tests/conftest.py hands every test as IMAGEKIT_SITE.
SITE_PINS = Path(__file__).resolve().parent / "data" / "site-mirror-pins.yaml"

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
    with pytest.raises(sources.UpstreamSourceError) as err:
        sources.stage(s, tmp_path / "ctx")
    text = str(err.value)
    assert f"gdrcopy 2.5.1: gdrcopy-2.5.1.tar.gz is not in the mirror {empty} (pinned by" in text.splitlines()[0]
    assert "https://github.com/NVIDIA/gdrcopy/archive/v2.5.1.tar.gz" in text
    assert str(empty / GDRCOPY) in text


def test_a_checksum_mismatch_names_both_digests_and_the_fix(site_mirror, write_stack, tmp_path):
    altered = tmp_path / "mirror"
    altered.mkdir()
    (altered / GDRCOPY).write_bytes((site_mirror / GDRCOPY).read_bytes() + b"\0")
    s = stack.load(write_stack(_stack_text(_pin(site_mirror))), mirror=str(altered))
    with pytest.raises(sources.UpstreamSourceError) as err:
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


def _mirror_sums(site_mirror) -> dict[str, str]:
    return dict(reversed(line.split()) for line in (site_mirror / "SHA256SUMS").read_text().splitlines())


def test_the_test_sites_pins_file_is_the_mirrors_sha256sums(site_mirror):
    """tests/data/site-mirror-pins.yaml holds every upstream source tarball SHA256SUMS lists, unchanged."""

    from imagekit.components import pinnable, registry

    import re

    pins = sources._read_site(SITE_PINS, pinnable())
    templates = {}   # pin name -> the mirror file name with {version} (a component's own, or its parts')
    for component, cls in registry().items():
        if cls.upstream_file:
            templates[component] = cls.upstream_file[0].replace("{tag}", "{version}")
        templates.update(getattr(cls, "parts", {}))
    listed = {}
    for name, digest in _mirror_sums(site_mirror).items():
        for component, template in templates.items():
            head, _, tail = template.partition("{version}")
            found = re.fullmatch(re.escape(head) + r"(\d[\w.+-]*?)" + re.escape(tail), name)
            if found:
                listed[(component, found.group(1))] = digest
    assert pins == listed


def test_the_shipped_cuda_stack_carries_upstreams_pins_not_the_mirrors(site_mirror, monkeypatch):
    """Without a site file debian-cuda checks upstream's release files; the stand-in mirror's differ."""
    monkeypatch.delenv("IMAGEKIT_SITE")
    sums = _mirror_sums(site_mirror)
    arts = sources.artifacts(stack.load("debian-cuda", mirror=str(site_mirror)))
    assert arts
    for artifact in arts:
        assert artifact.sha256 == sources.PINS[(artifact.component, artifact.version)], artifact.filename
        assert sums.get(artifact.filename) != artifact.sha256, artifact.filename
    assert "sha256:" not in (stack.SHIPPED_DIR / "debian-cuda.yaml").read_text()


def test_a_mirror_file_matching_neither_pin_fails_once_naming_everything(site_mirror, monkeypatch, tmp_path):
    """The stand-in mirror's gdrcopy is not upstream's file: the shipped stack stops on it before any build
    with one error naming the file, component, expected (and where it came from) and got digests, and
    the site pins file fixes it."""
    monkeypatch.delenv("IMAGEKIT_SITE")
    out = tmp_path / "ctx" / "Dockerfile"
    result = CliRunner().invoke(main, ["render", "debian-cuda", "--mirror", str(site_mirror), "-o", str(out)])
    assert result.exit_code == 2, result.output
    got = _mirror_sums(site_mirror)[GDRCOPY]
    text = result.output
    assert text.count("imagekit: error:") == 1
    assert "gdrcopy: checksum mismatch for gdrcopy-2.5.1.tar.gz" in text
    assert f"expected: {sources.PINS[('gdrcopy', '2.5.1')]} (imagekit's pin of upstream's release file)" in text
    assert f"got:      {got}" in text and str((site_mirror / GDRCOPY).resolve()) in text   # named as read
    assert f'pins: {{gdrcopy: {{"2.5.1": "{got}"}}}}' in text  # the fix, ready to paste
    assert not out.exists()

    site = tmp_path / "site.yaml"
    site.write_text(f'pins:\n  gdrcopy: {{"2.5.1": "{got}"}}\n')
    result = CliRunner().invoke(main, ["--site", str(site), "render", "debian-cuda", "--mirror", str(site_mirror),
                                       "-o", str(out)])
    assert result.exit_code == 2 and "ucx: checksum mismatch" in result.output  # the next file is checked too

    result = CliRunner().invoke(main, ["--site", str(SITE_PINS), "render", "debian-cuda", "--mirror",
                                       str(site_mirror), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert f"echo '{got}  /var/tmp/{GDRCOPY}' | sha256sum -c -" in out.read_text()


def test_a_site_pin_replaces_imagekits_and_a_stack_sha256_replaces_both(write_stack, tmp_path, monkeypatch):
    site = tmp_path / "site.yaml"
    site.write_text('pins:\n  gdrcopy:\n    "2.5.1": "' + "cd" * 32 + '"\n')
    monkeypatch.setenv("IMAGEKIT_SITE", str(site))
    text = _stack_text("x").replace(', sha256: "x"', "")
    s = stack.load(write_stack(text))
    assert s.get("gdrcopy").pin == "cd" * 32 and "site pins file" in s.get("gdrcopy").pin_origin
    assert stack.load(write_stack(_stack_text("ab" * 32), "own.yaml")).get("gdrcopy").pin == "ab" * 32
    monkeypatch.delenv("IMAGEKIT_SITE")
    assert stack.load(write_stack(text, "up.yaml")).get("gdrcopy").pin == sources.PINS[("gdrcopy", "2.5.1")]


@pytest.mark.parametrize("body, where, says", [
    ('pins:\n  gdrcopy:\n    latest: "' + "ab" * 32 + '"\n', ":3: pins.gdrcopy.latest:", "not a release version"),
    ('pins:\n  gdrcopy: {"2.5.1": "abc"}\n', ":2: pins.gdrcopy.2.5.1:", "is not a sha256 digest"),
    ('pins:\n  gdrcpy: {"2.5.1": "' + "ab" * 32 + '"}\n', ":2: pins.gdrcpy:", "did you mean 'gdrcopy'"),
    ('pins:\n  cuda: {"13.0.2": "' + "ab" * 32 + '"}\n', ":2: pins.cuda:", "valid keys: aws-ofi-nccl"),
    ('pin:\n  gdrcopy: {}\n', ":1: pin:", "did you mean 'pins'"),
])
def test_a_bad_site_pins_file_is_refused_with_file_line_and_key(write_stack, tmp_path, body, where, says):
    site = tmp_path / "site.yaml"
    site.write_text(body)
    path = write_stack(_stack_text("x").replace(', sha256: "x"', ""))
    result = CliRunner().invoke(main, ["--site", str(site), "render", str(path)])
    assert result.exit_code == 2, result.output
    assert f"{site}{where}" in result.output and says in result.output


def test_an_unpinned_version_says_how_to_pin_it_in_the_site_file(write_stack, monkeypatch):
    """aws-ofi-nccl's release files have no upstream pin imagekit could read: the error says where one goes."""
    monkeypatch.delenv("IMAGEKIT_SITE")
    path = write_stack("""\
name: efa
base: {image: imagekit/debian:bookworm, distro: debian12}
components:
  cuda: {source: pypi, version: "13.0.2"}
  nccl: {source: pypi, version: "2.28.9"}
  aws-ofi-nccl: {version: "1.21.1"}
""")
    result = CliRunner().invoke(main, ["render", str(path)])
    assert result.exit_code == 2, result.output
    assert ":6: components.aws-ofi-nccl.version: imagekit has no sha256 pin for aws-ofi-nccl 1.21.1" in result.output
    assert '--site FILE or $IMAGEKIT_SITE): `pins: {aws-ofi-nccl: {"1.21.1": "<sha256>"}}`' in result.output
