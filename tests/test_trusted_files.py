"""imagekit.util.trusted_files: a trust file is used only when nobody but root and the caller can change it.

Real inodes, with modes and a real other owner (BOB, a numeric uid: ``chown`` needs root); each case
is one way another user could change the file or what its path leads to (security-4 H10, H14).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.needs import need
from helpers.users import BOB, shared_dir  # noqa: F401 - the fixture

from imagekit.util import trusted_files
from imagekit.util.trusted_files import UntrustedFile


@pytest.fixture
def place(shared_dir):
    """``shared_dir/etc/imagekit/policy.yaml``, root's, 0755 directories and a 0644 file."""
    need(None if os.geteuid() == 0 else "changing owners needs root")
    directory = shared_dir / "etc" / "imagekit"
    directory.mkdir(parents=True)
    for d in (shared_dir / "etc", directory):
        d.chmod(0o755)
    path = directory / "policy.yaml"
    path.write_text("version: 1\n")
    path.chmod(0o644)
    return path


def refusal(path: Path) -> str:
    with pytest.raises(UntrustedFile) as info:
        trusted_files.check(path, "signature policy")
    line = f"{info.value.message} (fix: {info.value.hint})"
    assert "\n" not in line and str(path) in line
    return line


def test_root_s_own_file_below_root_s_directories_is_used(place):
    trusted_files.check(place, "signature policy")
    assert trusted_files.problem(place) is None


@pytest.mark.parametrize("change, said", [
    (lambda p: p.chmod(0o666), "policy.yaml is writable by everyone (owner root, group root, mode 0666)"),
    (lambda p: p.chmod(0o664) or os.chown(p, 0, BOB), "is writable by its group"),
    (lambda p: p.parent.chmod(0o777), "etc/imagekit is writable by everyone"),
    (lambda p: p.parent.chmod(0o775) or os.chown(p.parent, 0, BOB), "etc/imagekit is writable by its group"),
    (lambda p: p.parent.parent.chmod(0o777), "/etc is writable by everyone"),
    (lambda p: os.chown(p, BOB, BOB), f"policy.yaml belongs to {BOB}"),
    (lambda p: os.chown(p.parent, BOB, BOB), f"etc/imagekit belongs to {BOB}"),
])
def test_h14_anything_another_user_can_change_refuses_the_file(place, change, said):
    change(place)
    line = refusal(place)
    assert said in line and "is not used" in line, line


def test_a_sticky_directory_above_is_fine_but_not_as_the_file(place):
    place.parent.parent.chmod(0o1777)          # /tmp-like: only an entry's owner renames it
    trusted_files.check(place, "signature policy")
    place.chmod(0o666)
    assert "is writable by everyone" in refusal(place)


def test_a_link_another_user_owns_or_leads_to_an_open_directory_is_refused(place, shared_dir):
    theirs = shared_dir / "link.yaml"
    theirs.symlink_to(place)
    os.lchown(theirs, BOB, BOB)
    assert f"link.yaml belongs to {BOB}" in refusal(theirs)

    mine = shared_dir / "mine.yaml"
    mine.symlink_to(place)
    trusted_files.check(mine, "signature policy")
    place.parent.chmod(0o777)                 # the link is root's; where it leads is not
    assert "etc/imagekit is writable by everyone" in refusal(mine)


def test_a_missing_file_is_left_to_its_reader(shared_dir):
    assert trusted_files.problem(shared_dir / "nothing.yaml") is None


def test_a_missing_path_is_judged_where_it_would_be_made(place):
    """``made``: whoever can write the deepest directory that is there can make the path first, even
    when that directory is sticky (rootless Podman's store and configuration, security-4's untried surface)."""
    missing = place.parent / "containers" / "storage.conf"
    assert trusted_files.problem(missing, made=True) is None
    place.parent.chmod(0o1777)
    assert trusted_files.problem(missing) is None
    where, _, wrong = trusted_files.problem(missing, made=True)
    assert (where, wrong) == (place.parent, "is writable by everyone")
