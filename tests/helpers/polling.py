"""Waiting in tests for something another process does (a container appears, a file grows).

A ceiling, never a timed assertion: the condition is what the test asserts, and the
deadline only keeps a broken run from hanging.
"""

from __future__ import annotations

import time
from typing import Callable


def wait_for(condition: Callable[[], object], what: str, seconds: float = 120) -> None:
    """Poll ``condition`` until it is truthy; AssertionError naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"never saw {what}")
