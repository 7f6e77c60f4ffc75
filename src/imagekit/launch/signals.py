"""Turn SIGTERM/SIGHUP into KeyboardInterrupt while a launcher runs, so its ``finally`` cleans up."""

from __future__ import annotations

import contextlib
import signal
import threading


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread when the launcher receives SIGTERM or SIGHUP."""


@contextlib.contextmanager
def interruptible():
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        raise Interrupted(f"received {signal.Signals(signum).name}")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def shielded():
    """Ignore SIGINT/SIGTERM during cleanup: a second Ctrl-C must not leave containers behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
