"""Stopping child processes the same way everywhere."""

from __future__ import annotations

import subprocess


def stop(proc: subprocess.Popen, grace: float = 10.0) -> int:
    """SIGTERM, then SIGKILL after ``grace`` seconds (at once when ``grace`` is 0); reap it; its exit code."""
    if proc.poll() is None:
        if grace > 0:
            proc.terminate()
            try:
                return proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        proc.kill()
    return proc.wait()
