"""Turn SIGINT/SIGTERM/SIGHUP into KeyboardInterrupt while a launcher runs, so its ``finally`` cleans up."""

from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread when the launcher receives SIGINT, SIGTERM or SIGHUP."""


@contextlib.contextmanager
def interruptible():
    """The first signal raises Interrupted; later ones are ignored until the block ends.

    A launcher's cleanup belongs inside the block: a second Ctrl-C or a scheduler's repeated
    SIGTERM while it unwinds towards the cleanup must not abort that, and default handlers,
    restored on leaving the block, would let SIGTERM kill it outright.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def handler(signum, _frame):
        nonlocal raised
        if not raised:
            raised = True
            raise Interrupted(f"received {signal.Signals(signum).name}")

    # A signal already ignored (nohup's SIGHUP, SIGINT in a background job) stays ignored.
    previous = {s: signal.signal(s, handler) for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}
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
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
