"""Generated scripts never write into, chmod or remove a path another user planted (issue 33, G2's rule
for every generated script; the rank wrapper's own sweep runs under the real Enroot in
test_enroot_runtime.py).

The inside-out sbatch script keeps the job's ssh keys in ``$SLURM_SUBMIT_DIR/.imagekit-JOBID``: a
predictable name in a directory others may write (a project's scratch). It used ``install -d``, which
follows a link planted there and chmods its target, then wrote the private key through it.

The script runs for real under bash as root, as sbatch would start it, with stubs for srun, docker
and scontrol (nothing past the key directory is under test); the attacker is a real other user
(a numeric uid no account has, under setpriv).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers.users import ALICE, BOB, setpriv
from imagekit.launch import inside_out
from helpers.launch_jobs import inside_out_job

STUBS = {"srun": "exit 0", "docker": "exit 0", "scontrol": "echo localhost"}


def _stubs(directory: Path) -> Path:
    directory.mkdir()
    for name, body in STUBS.items():
        path = directory / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return directory


def _tree(top: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(top)): (p.lstat().st_uid, p.lstat().st_mode) for p in [top, *top.rglob("*")]}


@pytest.fixture
def shared_tmp():
    """A directory another user can reach (pytest's own tmp_path is under root's 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="imagekit-test-", dir="/var/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_inside_out_keys_never_go_through_a_planted_link(shared_tmp):
    """Another user plants `.imagekit-4242` in the shared submit directory, a link to a directory of
    root's. The job refuses to start (its mkdir fails), the target keeps its mode and gets no key, and
    the link is left as it was (the cleanup removes only what the job made)."""
    tmp_path = shared_tmp
    submit = tmp_path / "scratch"
    submit.mkdir()
    submit.chmod(0o1777)
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o755)
    (victim / "data").write_text("root's\n")
    link = submit / ".imagekit-4242"
    proc = subprocess.run(setpriv(ALICE, ["ln", "-s", str(victim), str(link)]), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    before = _tree(victim)
    script = tmp_path / "io.sbatch"
    script.write_text(inside_out.render_sbatch(inside_out_job(
        image="img", nodes=1, slots=1, scheduler="slurm", command=["true"])))
    env = {"PATH": f"{_stubs(tmp_path / 'stubs')}:/usr/bin:/bin", "SLURM_JOB_ID": "4242",
           "SLURM_SUBMIT_DIR": str(submit), "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "localhost",
           "HOME": str(tmp_path)}
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120,
                         cwd=submit)
    assert run.returncode != 0, run.stdout + run.stderr
    assert _tree(victim) == before and not (victim / "id_ed25519").exists()
    assert link.is_symlink() and os.readlink(link) == str(victim)


def _private_dir_part() -> str:
    """``private_token`` and ``private_dir`` as data/enroot-node.sh defines them (the rank wrapper's own text)."""
    from importlib import resources

    text = (resources.files("imagekit") / "data" / "enroot-node.sh").read_text()
    return text[text.index("private_token() {"):text.index("statedir=$(private_dir)")]


def test_h8_all_eight_guessable_enroot_state_names_taken_the_user_still_gets_a_private_one(shared_tmp):
    """Security-4 H8: another user (ALICE) takes ``/tmp/imagekit-enroot-UID`` and ``.2`` to ``.8`` (0777
    directories of theirs) for a victim (BOB) who cannot remove them from the sticky /tmp. The rank
    wrapper's ``private_dir`` (its own text, run by bash as the victim) gives ``…-UID-TOKEN``, the token
    the victim's home keeps, the same on every call (so every rank of a node meets there), 0700; the taken
    names are left alone. Without a home it stops with one line saying what can be done."""
    victim = BOB
    base = Path(f"/tmp/imagekit-enroot-{victim}")
    names = [base] + [base.with_name(f"{base.name}.{n}") for n in range(2, 9)]
    home = shared_tmp / "home"
    home.mkdir(mode=0o700)
    os.chown(home, victim, victim)
    script = _private_dir_part() + "private_dir\n"
    run = setpriv(victim, ["bash", "-c", script])
    try:
        for path in names:
            subprocess.run(setpriv(ALICE, ["mkdir", "-m", "777", str(path)]), check=True)
        got = [subprocess.run(run, env={"PATH": "/usr/bin:/bin", "HOME": str(home)}, capture_output=True, text=True)
               for _ in range(2)]
        assert [g.returncode for g in got] == [0, 0], got[0].stderr
        token = (home / ".config" / "imagekit" / "private-name").read_text().strip()
        assert [g.stdout.strip() for g in got] == [f"{base}-{token}"] * 2
        st = os.lstat(f"{base}-{token}")
        assert st.st_uid == victim and stat.S_IMODE(st.st_mode) == 0o700
        assert all(p.lstat().st_uid == ALICE and stat.S_IMODE(p.lstat().st_mode) == 0o777 for p in names)

        homeless = subprocess.run(run, env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
        # (`id -un` also says that the victim's uid has no name: a numeric test user)
        said = [line for line in homeless.stderr.splitlines() if line.startswith("imagekit:")]
        assert homeless.returncode == 1 and len(said) == 1, homeless.stderr
        assert "an admin removes those names, or the job sets HOME" in homeless.stderr
    finally:
        for path in base.parent.glob(base.name + "*"):
            shutil.rmtree(path, ignore_errors=True)
