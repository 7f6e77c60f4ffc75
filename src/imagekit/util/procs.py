"""Child processes and the pipes between them, handled the same way everywhere."""

from __future__ import annotations

import fcntl
import subprocess

PIPE_BYTES = 1 << 20


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


def widen_pipe(fd: int, size: int = PIPE_BYTES) -> None:
    """Make the pipe ``fd`` hold ``size`` bytes where the kernel lets this user (Linux's
    F_SETPIPE_SZ, up to /proc/sys/fs/pipe-max-size). A 64 KiB pipe hands over every 64 KiB, and each
    hand-over waits for the other side to be scheduled, which a loaded machine makes slow."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except OSError:
        pass    # not a pipe, or more than this user may have: the default pipe works, slower
