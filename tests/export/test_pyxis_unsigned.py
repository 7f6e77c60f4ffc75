"""Unsigned by omission is said: the plain importer warns once per job when its wrapper leaves out the
policy the site keeps in its usual place (review 4, Task 4 gap 3)."""

from __future__ import annotations

import subprocess
import sys

from imagekit.export import pyxis_importer, pyxis_unsigned


def _policy(tmp_path):
    path = tmp_path / "etc-imagekit" / "policy.yaml"
    path.parent.mkdir()
    path.write_text("version: 1\nkeys: {}\nrepositories: []\n")
    return path


def test_said_once_per_job_when_the_site_has_a_policy_the_wrapper_left_out(tmp_path):
    policy = _policy(tmp_path)
    said: list[str] = []
    env = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"}
    for _ in range(3):   # get, and the next steps' gets
        pyxis_unsigned.warn_once(env, said.append, files=(policy,), markers=tmp_path)
    assert len(said) == 1
    assert said[0].startswith("warning: no signature policy is in force (IMAGEKIT_POLICY is not set")
    assert f"export IMAGEKIT_POLICY={policy}" in said[0] and "imagekit doctor" in said[0]
    # The next job hears it again; a wrapper that sets the policy, or a site with none, hears nothing.
    pyxis_unsigned.warn_once({**env, "SLURM_JOB_ID": "4243"}, said.append, files=(policy,), markers=tmp_path)
    pyxis_unsigned.warn_once({**env, "SLURM_JOB_ID": "4244", "IMAGEKIT_POLICY": str(policy)}, said.append,
                             files=(policy,), markers=tmp_path)
    pyxis_unsigned.warn_once({**env, "SLURM_JOB_ID": "4245"}, said.append, files=(tmp_path / "none.yaml",),
                             markers=tmp_path)
    assert len(said) == 2


def test_the_plain_importer_says_it_on_stderr_before_serving(tmp_path, monkeypatch):
    """As Pyxis runs it: `get URI` with the job's ids set; the warning is one stderr line, and the
    importer goes on (here to a registry that is down: its own error, exit 4)."""
    policy = _policy(tmp_path)
    code = ("import sys; from pathlib import Path; from imagekit.export import pyxis_importer, pyxis_unsigned; "
            f"pyxis_unsigned.SITE_POLICY_FILES = (Path({str(policy)!r}),); "
            "sys.exit(pyxis_importer.main(['get', 'docker://127.0.0.1:1#site/mpi:1']))")
    env = {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "IMAGEKIT_STORE": str(tmp_path / "store"),
           "HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)}
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert first.stderr.count("no signature policy is in force") == 1, first.stderr
    assert "no signature policy is in force" not in again.stderr
    assert first.returncode == again.returncode == 4
    assert first.stdout == ""
    assert pyxis_importer.PROG in first.stderr
