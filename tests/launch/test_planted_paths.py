"""Generated scripts never write into, chmod or remove a path another user planted (issue 33, G2's rule
for every generated script; the rank wrapper's own sweep runs under the real Enroot in
test_enroot_runtime.py).

The inside-out sbatch script keeps the job's ssh keys in ``$SLURM_SUBMIT_DIR/.imagekit-JOBID``: a
predictable name in a directory others may write (a project's scratch). It used ``install -d``, which
follows a link planted there and chmods its target, then wrote the private key through it.

The script runs for real under bash as root, as sbatch would start it, with stubs for srun, docker
and scontrol (nothing past the key directory is under test); the attacker is a real other user
(uid 2001, under setpriv).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

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
    proc = subprocess.run(["setpriv", "--reuid=2001", "--regid=2001", "--clear-groups", "--", "ln", "-s",
                           str(victim), str(link)], capture_output=True, text=True)
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
