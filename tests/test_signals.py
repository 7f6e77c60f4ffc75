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


@pytest.mark.parametrize("exc, line", [(KeyboardInterrupt(), "interrupted (Ctrl-C, SIGINT);"),
                                       (signals.Interrupted("received SIGTERM", signal.SIGTERM),
                                        "interrupted (received SIGTERM);")])
def test_the_last_line_names_what_stopped_the_command(monkeypatch, exc, line):
    """Review 4 E5: a real Ctrl-C printed `imagekit: interrupted ()`; the status is 128 + the signal."""
    from click.testing import CliRunner

    from imagekit.cli import main
    from imagekit.cli import catalog_cmds

    def stop(*_a, **_k):
        raise exc

    monkeypatch.setattr(catalog_cmds.stack_mod, "available", stop)
    result = CliRunner().invoke(main, ["stacks"])
    assert line in result.output and "()" not in result.output
    assert result.exit_code == signals.exit_status(exc)
