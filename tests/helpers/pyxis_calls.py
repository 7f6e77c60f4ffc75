"""The Pyxis importer, called exactly as Pyxis 0.24.0 calls it (importer.c, importers/README.md).

What Pyxis does around the importer is small and fixed: fork and exec the executable with
``get URI`` or ``release``, as the job's user, stdin on /dev/null, stdout a pipe of which it
keeps the first line (the squashfs path), stderr into a log it prints only on failure, the
environment of Enroot plus ``PYXIS_RUNTIME_PATH``, ``PYXIS_VERSION`` and
``SLURM_JOB_ID``/``SLURM_STEP_ID``/``SLURM_JOB_UID``; a non-zero exit is a failure; ``release``
follows twice (after ``enroot create`` and at task cleanup). tests/export/test_pyxis_cluster.py
runs it under the real Pyxis.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

EXE = Path(sys.executable).parent / "imagekit-pyxis-importer"


@dataclass
class Call:
    rc: int
    path: str          # the first line of stdout, as Pyxis reads it
    log: str           # stderr


def job_env(store: Path, runtime: Path, step: int, **extra: str) -> dict[str, str]:
    """This process's environment as a job step's (no SLURM_/PYXIS_ of the caller), with its own store."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PYXIS_"))}
    env.update(IMAGEKIT_STORE=str(store), PYXIS_RUNTIME_PATH=str(runtime), PYXIS_VERSION="0.24.0",
               SLURM_JOB_ID="4242", SLURM_STEP_ID=str(step), SLURM_JOB_UID=str(os.getuid()),
               SLURM_JOB_GID=str(os.getgid()), **extra)
    return env


def run(args: list[str], env: dict[str, str], argv: list[str] | None = None, cwd: Path | None = None) -> Call:
    """``importer ARGS`` (``argv``: another way to start it, e.g. as another user) in ``cwd`` (Pyxis's:
    the job's working directory)."""
    if argv is None:
        if not EXE.is_file():
            pytest.fail(f"{EXE} is missing: reinstall imagekit (pip install -e .) so its console scripts exist")
        argv = [str(EXE)]
    proc = subprocess.run([*argv, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          env=env, close_fds=True, timeout=600, cwd=cwd)
    first = proc.stdout.split("\n", 1)[0]
    return Call(proc.returncode, first, proc.stderr)


def pyxis_get(uri: str, env: dict[str, str], argv: list[str] | None = None) -> Call:
    return run(["get", uri], env, argv)


def pyxis_release(env: dict[str, str], argv: list[str] | None = None) -> Call:
    return run(["release"], env, argv)


def is_squashfs(path: str) -> bool:
    return subprocess.run(["unsquashfs", "-s", path], capture_output=True).returncode == 0
