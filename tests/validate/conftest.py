"""Markers for the validate tests (generators live in validate_gen.py)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mpi: runs Debian's Open MPI (mpirun) and mpi4py on this host; "
                                       "CI fails, never skips, when they are missing")
