"""One policy for stop signals: turn them into KeyboardInterrupt while work runs, so its ``finally`` cleans up.

A launcher takes SIGINT, SIGTERM and SIGHUP (:func:`interruptible`); an export takes SIGTERM, Slurm's and
systemd's stop signal, like Ctrl-C (:func:`interrupt_on_sigterm`), so its temporary file goes.
"""

from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread when the process receives one of the signals it was told to take."""

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = int(signum)


def describe(exc: KeyboardInterrupt) -> str:
    """What stopped the command, for its last line: Ctrl-C raises a bare KeyboardInterrupt whose text is
    empty (an exception is always true, so ``exc or 'SIGINT'`` printed ``interrupted ()``)."""
    return str(exc) or "Ctrl-C, SIGINT"


def exit_status(exc: KeyboardInterrupt) -> int:
    """The shell's convention for a process a signal ended: 128 + the signal (Ctrl-C: 130)."""
    return 128 + getattr(exc, "signum", int(signal.SIGINT))


@contextlib.contextmanager
def interruptible(signals: tuple[signal.Signals, ...] = SIGNALS):
    """The first of ``signals`` raises Interrupted; later ones are ignored until the block ends.

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
            raise Interrupted(f"received {signal.Signals(signum).name}", signum)

    # A signal already ignored (nohup's SIGHUP, SIGINT in a background job) stays ignored.
    previous = {s: signal.signal(s, handler) for s in signals if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def interrupt_on_sigterm():
    """Treat SIGTERM (Slurm's and systemd's stop signal) like Ctrl-C while exporting."""
    return interruptible((signal.SIGTERM,))


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
