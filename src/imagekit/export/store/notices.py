"""Warnings about what the store skipped (a malformed or untrusted entry, a hold it could not
place): one stderr line each, never a traceback, each said once per process.

The Pyxis importer points :data:`sink` at its own log, so that its lines carry its name.
"""

from __future__ import annotations

import sys
from typing import Callable


def _stderr(message: str) -> None:
    print(f"imagekit: warning: {message}", file=sys.stderr, flush=True)


sink: Callable[[str], None] = _stderr
_said: set[str] = set()


def warn(message: str) -> None:
    """Say ``message`` once (a listing that meets the same bad entry twice says it once)."""
    if message in _said:
        return
    _said.add(message)
    sink(message)
