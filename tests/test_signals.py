"""Signals while a launcher runs: the first interrupts, none aborts the cleanup that follows."""

from __future__ import annotations

import signal

import pytest

from imagekit.util import signals


def test_the_first_signal_interrupts_and_a_second_cannot_abort_the_way_to_the_cleanup():
    before = {s: signal.getsignal(s) for s in signals.SIGNALS}
    steps = []
    with pytest.raises(signals.Interrupted, match="received SIGTERM"):
        with signals.interruptible():
            try:
                signal.raise_signal(signal.SIGTERM)   # its handler has run when this returns
                steps.append("not interrupted")
            finally:
                signal.raise_signal(signal.SIGINT)    # a second Ctrl-C before the cleanup started
                with signals.shielded():
                    signal.raise_signal(signal.SIGTERM)
                    steps.append("cleaned up")
    assert steps == ["cleaned up"]
    assert {s: signal.getsignal(s) for s in signals.SIGNALS} == before


def test_a_signal_ignored_before_stays_ignored():
    """nohup ignores SIGHUP, a shell's background job SIGINT: the launcher must keep it so."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals.interruptible():
            signal.raise_signal(signal.SIGHUP)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
