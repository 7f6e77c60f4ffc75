"""Rootless Podman's build cache is each user's own (issue 33: "cache mounts are per user").

Buildah keeps cache mounts (apt's and pip's caches of every build) under ``$TMPDIR``; imagekit gives
a rootless build ``/var/tmp/imagekit-podman-UID``. In the sticky /var/tmp anyone can take that name
first. Before: a link planted there, to a directory the user owns but others may write, was taken as
the user's (``stat`` followed the link), so another user could poison the user's build caches. Now
only a real directory of the user's, opened with O_NOFOLLOW and set back to 0700, is used; a taken
name is skipped for the next. Both users are real processes (setpriv, tests/helpers/users.py); no
Podman is needed for this part (tests/engines/test_podman.py builds with it).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

from helpers.users import ALICE, home_for, other_python, setpriv, shared_dir  # noqa: F401 - fixtures

VICTIM = 2077          # a uid with no Podman state on this machine: its names in /var/tmp are free


def _remove_names(base: Path) -> None:
    for path in base.parent.glob(base.name + "*"):
        if path.is_symlink():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)


def test_a_planted_name_never_becomes_a_users_build_cache(other_python, shared_dir):
    base = Path(f"/var/tmp/imagekit-podman-{VICTIM}")
    _remove_names(base)
    # The victim's own directory that others may write (a group project directory, say).
    shared = shared_dir / "project"
    shared.mkdir()
    os.chown(shared, VICTIM, VICTIM)
    shared.chmod(0o777)
    plant = subprocess.run(setpriv(ALICE, ["ln", "-s", str(shared), str(base)]), capture_output=True, text=True)
    assert plant.returncode == 0, plant.stderr
    try:
        proc = subprocess.run(setpriv(VICTIM, [str(other_python.python), "-c",
                                               "from imagekit.engines import podman; print(podman.build_env()['TMPDIR'])"]),
                              env=other_python.env(HOME=str(home_for(VICTIM, shared_dir))), capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        got = Path(proc.stdout.strip())
        assert got != base and got.parent == base.parent, got
        st = os.lstat(got)
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == VICTIM and stat.S_IMODE(st.st_mode) == 0o700
        assert base.is_symlink() and stat.S_IMODE(shared.stat().st_mode) == 0o777, "the planted link is left alone"
    finally:
        _remove_names(base)


def test_h8_all_the_guessable_names_taken_the_user_still_gets_a_build_cache_of_their_own(other_python, shared_dir):
    """Security-4 H8's class here: another user takes the plain name and ``.2`` to ``.8`` (0777 directories
    of theirs) before the victim's first build; the victim, who cannot remove them from the sticky
    /var/tmp, gets ``…-UID-TOKEN`` (the token in the victim's home), and the taken names are left alone."""
    base = Path(f"/var/tmp/imagekit-podman-{VICTIM}")
    _remove_names(base)
    taken = [base] + [base.with_name(f"{base.name}.{n}") for n in range(2, 9)]
    try:
        for path in taken:
            plant = subprocess.run(setpriv(ALICE, ["mkdir", "-m", "777", str(path)]), capture_output=True, text=True)
            assert plant.returncode == 0, plant.stderr
        home = home_for(VICTIM, shared_dir)
        proc = subprocess.run(setpriv(VICTIM, [str(other_python.python), "-c",
                                               "from imagekit.engines import podman; print(podman.build_env()['TMPDIR'])"]),
                              env=other_python.env(HOME=str(home)), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        got = Path(proc.stdout.strip())
        token = (home / ".config" / "imagekit" / "private-name").read_text().strip()
        assert got == base.with_name(f"{base.name}-{token}"), got
        st = os.lstat(got)
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == VICTIM and stat.S_IMODE(st.st_mode) == 0o700
        assert all(p.stat().st_uid == ALICE for p in taken)
    finally:
        _remove_names(base)
