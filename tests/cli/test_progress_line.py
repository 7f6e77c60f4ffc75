"""The export progress line: total, share, rate and time left on a terminal; plain lines in a log."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from imagekit.cli import options
from imagekit.export.output import Progress, expected_bytes

MIB = 1 << 20


def _fed(line, samples):
    """A line that has seen ``samples`` (seconds after its start, bytes) as reports."""
    for at, total in samples:
        line.eta.add(line.started + at, total)
        line.total = total
    return line


def test_text_gives_the_total_the_share_the_recent_rate_and_the_time_left():
    line = options.ProgressLine(tty=True, heartbeat=False)
    line.begin(1024 * MIB)
    # A slow start (the engine's container) is not carried into the estimate: the recent rate is.
    _fed(line, [(1.0, 1 * MIB), (5.0, 16 * MIB), (10.0, 512 * MIB)])
    assert line.text(512 * MIB, False, 10.0) == "exported 512.0 MiB of ~1.0 GiB (50%), 56.8 MiB/s, about 9 s left"
    # Past the expected size there is no estimate, and never 100 % before the end.
    _fed(line, [(12.0, 2048 * MIB)])
    assert line.text(2048 * MIB, False, 12.0) == "exported 2.0 GiB of ~1.0 GiB (99%), 186.1 MiB/s"
    assert line.text(2048 * MIB, True, 20.0) == "exported 2.0 GiB in 20 s (102.4 MiB/s)"


def test_no_estimate_from_a_first_trickle():
    """Review 4: the first report of every export was "512 B of ~700.8 MiB (0%), 508 B/s, about 24114 min left"."""
    line = options.ProgressLine(tty=False, heartbeat=False)
    line.begin(700 * MIB)
    _fed(line, [(0.5, 0), (1.0, 512)])
    assert line.text(512, False, 1.0) == "exported 512 B of ~700.0 MiB (0%), 1.0 KiB/s"


def test_it_says_what_it_waits_for_before_the_first_byte_and_after_the_last():
    line = options.ProgressLine(tty=False, heartbeat=False)
    line.begin(100 * MIB)
    assert line.text(0, False, 4.0) == "exporting: waiting for the image's first bytes (4 s)"
    _fed(line, [(10.0, 100 * MIB)])
    line.ended_at = line.started + 10.0
    assert line.text(100 * MIB, False, 17.0) == "exported 100.0 MiB; the squashfs tool is finishing (7 s)"


def test_without_a_known_size_only_the_bytes_and_the_rate():
    line = options.ProgressLine(tty=False, heartbeat=False)
    line.begin(None)
    _fed(line, [(1.0, 0), (3.0, 300 * MIB)])
    assert line.text(300 * MIB, False, 3.0) == "exported 300.0 MiB, 150.0 MiB/s"


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = _Clock()
    monkeypatch.setattr(options.time, "monotonic", c)
    return c


def test_on_a_terminal_one_line_is_rewritten_and_ended_when_done(clock, capsys):
    line = options.ProgressLine(tty=True, heartbeat=False)
    meter = Progress(line, interval=0.0, expected=100 * MIB)
    for _ in range(8):
        clock.now += 1
        meter.add(10 * MIB)
    meter.done()
    err = capsys.readouterr().err
    assert err.count("\r\x1b[K") == 9 and err.count("\n") == 1 and err.endswith("\n")
    assert "exported 80.0 MiB of ~100.0 MiB (80%), 10.0 MiB/s, about 2 s left" in err
    assert err.rstrip("\n").rsplit("\r\x1b[K", 1)[1] == "exported 80.0 MiB in 8 s (10.0 MiB/s)"


def test_off_a_terminal_a_plain_line_every_interval_and_one_at_the_end(clock, capsys):
    line = options.ProgressLine(tty=False, interval=5.0, heartbeat=False)
    meter = Progress(line, interval=0.0, expected=None)
    for _ in range(12):   # 12 s, a report a second
        clock.now += 1
        meter.add(MIB)
    meter.done()
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["exported 5.0 MiB, 1.0 MiB/s", "exported 10.0 MiB, 1.0 MiB/s",
                     "exported 12.0 MiB in 12 s (1.0 MiB/s)"]
    assert not any("\r" in x or "\x1b" in x for x in lines)


def test_a_quiet_export_still_says_what_it_does_every_interval(capsys):
    """No bytes for a while (the engine creating the container, the tool writing its tables): a line
    anyway, at least every interval (5 s in a log; shortened here)."""
    from helpers.polling import wait_for

    line = options.ProgressLine(tty=False, interval=0.05)
    meter = Progress(line, expected=100 * MIB)
    seen: list[str] = []

    def said(what: str):
        def seen_it() -> bool:
            seen.extend(capsys.readouterr().err.splitlines())
            return any(what in s for s in seen)
        return seen_it

    wait_for(said("waiting for the image's first bytes"), "a heartbeat line before the first byte", seconds=30)
    meter.add(100 * MIB)
    meter.ended()
    wait_for(said("the squashfs tool is finishing"), "a heartbeat line while the tool finishes", seconds=30)
    meter.done()
    assert line.ticker is None   # the thread is told to stop with the last line


def test_one_line_serving_exports_in_turn_starts_each_one_s_clock_and_total(clock):
    line = options.ProgressLine(tty=False, heartbeat=False)
    Progress(line, expected=50 * MIB)
    clock.now += 100
    Progress(line, expected=None)   # the next export: a registry's, no total known
    assert line.expected is None and line.started == clock.now


def test_only_the_engine_s_image_size_is_taken_as_the_stream_s():
    info = {"Size": 3_000_000_000}
    assert expected_bytes(SimpleNamespace(engine_image="imagekit/debian-mpi:latest"), info) == 3_000_000_000
    # A registry's or layout's Size is its compressed layers: no total rather than a wrong one.
    assert expected_bytes(SimpleNamespace(engine_image=None), info) is None
    assert expected_bytes(SimpleNamespace(engine_image="x"), {}) is None
