"""PXS3-3 (issue 34): scripts/check-shared-python.sh, which scripts/setup.sh runs, says in one line when
other users cannot run the venv's python with imagekit's importer (Pyxis runs it as each job's user).

Real interpreters, run as ``nobody``: a venv inside a directory only root may enter (as a pyenv
python under /root is), and the export tests' venv of Debian's python3 that every user can run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers.users import other_python  # noqa: F401 - the fixture

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check-shared-python.sh"


def check(python: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), str(python)], capture_output=True, text=True, timeout=120)


def test_a_python_under_a_private_directory_is_named_in_one_line():
    if os.geteuid() != 0:
        pytest.skip("becoming another user needs root")
    private = Path(tempfile.mkdtemp(prefix="imagekit-private-", dir="/var/tmp"))
    try:
        os.chmod(private, 0o700)
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(private / "venv")], check=True)
        proc = check(private / "venv" / "bin" / "python")
        assert proc.returncode == 1
        lines = proc.stdout.splitlines()
        assert lines == [f"other users cannot run {private}/venv/bin/python with imagekit's importer "
                         f"({private}/venv/bin/python: Permission denied): Pyxis runs the importer as each job's "
                         "user; make it with an interpreter they can run, e.g. PYTHON=/usr/bin/python3 "
                         "VENV=/opt/imagekit/venv bash scripts/setup.sh"], proc.stdout + proc.stderr
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_a_python_every_user_can_run_passes_quietly(other_python):  # noqa: F811 - the fixture
    proc = check(other_python.python)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
