"""What a test needs from the machine: fail in CI (``CI`` set), skip elsewhere, saying what is missing."""

from __future__ import annotations

import os

import pytest


def need(problem: str | None) -> None:
    """Nothing when ``problem`` is None; else fail in CI and skip elsewhere, with ``problem`` as the reason."""
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI needs this and it is missing: {problem}", pytrace=False)
    pytest.skip(problem)
