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


def log_tail(path: str, lines: int = 8) -> str:
    """The last ``lines`` lines of a child's log file (its stderr), for an error message; "" if unreadable."""
    try:
        with open(path, errors="replace") as fh:
            return "\n".join(fh.read().strip().splitlines()[-lines:])
    except OSError:
        return ""
