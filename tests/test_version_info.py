"""``imagekit --version`` and the ``io.imagekit.version`` label: the package version plus the commit it
came from, passed to the engine as a build-time label and never written into a rendered recipe."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from packaging.version import Version

from imagekit import __version__, build, image_facts, render, stack
from imagekit.util import version_info
from imagekit import engines
from imagekit.engines import docker, podman
from imagekit.cli import main
from imagekit.image_facts import writer

REPO = Path(__file__).resolve().parents[1]
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "-C", str(repo), *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A checkout whose package directory holds a tracked ``__init__.py``."""
    pkg = tmp_path / "repo" / "src" / "imagekit"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '0.1.0'\n")
    _git(tmp_path / "repo", "init", "-q")
    _git(tmp_path / "repo", "add", ".")
    _git(tmp_path / "repo", "commit", "-q", "-m", "first")
    return pkg


def test_the_commit_is_a_pep440_local_part():
    assert version_info.with_commit("0.1.0", COMMIT) == "0.1.0+g0123456789ab"
    assert version_info.with_commit("0.1.0", COMMIT, dirty=True) == "0.1.0+g0123456789ab.dirty"
    assert version_info.with_commit("0.1.0", None) == "0.1.0"
    assert Version(version_info.with_commit("0.1.0", COMMIT, dirty=True)).local == "g0123456789ab.dirty"


def test_a_checkout_gives_its_head_and_dirty_only_for_tracked_changes(checkout):
    head = _git(checkout, "rev-parse", "HEAD")
    assert version_info.checkout_commit(checkout) == (head, False)
    (checkout / "notes.log").write_text("an untracked build output\n")
    assert version_info.checkout_commit(checkout) == (head, False)
    (checkout / "__init__.py").write_text("__version__ = '0.1.0'  # edited\n")
    assert version_info.checkout_commit(checkout) == (head, True)


def test_an_untracked_package_inside_another_repository_is_not_a_checkout(checkout):
    # As a virtual environment's site-packages sitting inside some unrelated repository.
    other = checkout.parent / "venv" / "imagekit"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    assert version_info.checkout_commit(other) is None
    assert version_info.checkout_commit(checkout.parent.parent.parent / "nowhere") is None


class _Dist:
    def __init__(self, text: str | None) -> None:
        self.text = text

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return self.text


@pytest.mark.parametrize("direct_url, commit", [
    ({"url": "https://git.example/imagekit.git", "vcs_info": {"vcs": "git", "commit_id": COMMIT}}, COMMIT),
    ({"url": "file:///tmp/imagekit", "dir_info": {}}, None),
    ({"url": "file:///tmp/imagekit-0.1.0-py3-none-any.whl", "archive_info": {}}, None),
    ({"vcs_info": {"vcs": "git", "commit_id": "not a commit"}}, None),
    (None, None),
])
def test_an_install_without_git_falls_back_to_what_pep610_recorded(monkeypatch, direct_url, commit):
    text = None if direct_url is None else json.dumps(direct_url)
    monkeypatch.setattr(version_info.metadata, "distribution", lambda _name: _Dist(text))
    assert version_info.installed_commit() == commit


def test_without_a_checkout_or_a_recorded_commit_it_is_the_version_alone(monkeypatch):
    monkeypatch.setattr(version_info, "checkout_commit", lambda *a: None)
    monkeypatch.setattr(version_info, "installed_commit", lambda *a: None)
    version_info.full_version.cache_clear()
    try:
        assert version_info.full_version() == __version__
    finally:
        version_info.full_version.cache_clear()


def test_cli_version_names_this_checkouts_commit():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"imagekit, version {version_info.full_version()}\n"
    found = version_info.checkout_commit()
    if found is None:
        if os.environ.get("CI"):   # CI runs in a clone: a missing commit there is the defect itself
            pytest.fail("CI runs from a git checkout, yet the version names no commit", pytrace=False)
        pytest.skip("not run from a git checkout: the version carries no commit to compare")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert result.output.split()[-1].startswith(f"{__version__}+g{head.strip()[:12]}")


@pytest.fixture
def committed(monkeypatch) -> str:
    """full_version as a build at commit COMMIT with local changes would see it."""
    full = version_info.with_commit(__version__, COMMIT, dirty=True)
    monkeypatch.setattr(version_info, "full_version", lambda: full)
    return full


@pytest.mark.parametrize("fmt", render.FORMATS)
def test_the_rendered_recipe_is_the_same_at_every_commit(monkeypatch, committed, fmt):
    s = stack.load("debian-mpi")
    at_commit = render.render(s, fmt)
    assert COMMIT[:12] not in at_commit and committed not in at_commit
    monkeypatch.setattr(version_info, "full_version", lambda: __version__)
    assert render.render(s, fmt) == at_commit, "the recipe (and its hash) must not depend on the commit"


def test_the_build_labels_carry_the_version_with_its_commit(committed):
    s = stack.load("debian-mpi")
    labels = writer.build_labels(s, "runtime", "ab" * 32)
    assert labels[image_facts.VERSION] == committed
    # The build's label wins over the recipe's: the image reads the commit back.
    facts = image_facts.from_labels({**writer.recipe_labels(s), **labels})
    assert facts.imagekit_version == committed


def test_docker_and_podman_get_the_version_as_a_build_label(monkeypatch, tmp_path, committed):
    s = stack.load("debian-mpi")
    labels = writer.build_labels(s, "runtime", "ab" * 32)
    monkeypatch.setattr(docker, "docker_cli", lambda: "docker")
    monkeypatch.setattr(podman, "cli", lambda: "podman")
    seen = [engines.of(name).build_argv(build.build_command(str(tmp_path), s, build.BuildRequest(ca_bundle="none",
                                                                                                engine_name=name),
                                                            tmp_path / "iid", labels, None))
            for name in engines.ENGINES]
    assert [argv[0] for argv in seen] == ["docker", "podman"]
    for argv in seen:
        pairs = list(zip(argv, argv[1:]))
        assert ("--label", f"{image_facts.VERSION}={committed}") in pairs, argv


def test_a_base_image_keeps_the_version_alone(committed):
    """A commit in the base's labels would change its id at every commit, and miss every stack's cache."""
    assert writer.base_labels("debian", "bookworm", "http://mirror", ["main"])[image_facts.VERSION] == __version__
