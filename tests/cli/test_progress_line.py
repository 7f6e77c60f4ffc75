"""The export progress line: total, share, rate and time left on a terminal; plain lines in a log."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from imagekit.cli import options
from imagekit.export.output import Progress, expected_bytes

MIB = 1 << 20


def test_text_gives_the_total_the_share_the_rate_and_the_time_left():
    line = options.ProgressLine(tty=True)
    line.begin(1024 * MIB)
    assert line.text(512 * MIB, False, 10.0) == "exported 512.0 MiB of ~1.0 GiB (50%), 51.2 MiB/s, about 10 s left"
    # Long waits in minutes; the estimate never claims 100 % before the end.
    assert line.text(10 * MIB, False, 10.0).endswith("1.0 MiB/s, about 17 min left")
    assert line.text(2048 * MIB, False, 10.0) == "exported 2.0 GiB of ~1.0 GiB (99%), 204.8 MiB/s"
    assert line.text(2048 * MIB, True, 20.0) == "exported 2.0 GiB in 20 s (102.4 MiB/s)"


def test_without_a_known_size_only_the_bytes_and_the_rate():
    line = options.ProgressLine(tty=False)
    line.begin(None)
    assert line.text(300 * MIB, False, 3.0) == "exported 300.0 MiB, 100.0 MiB/s"


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
    line = options.ProgressLine(tty=True)
    meter = Progress(line, interval=0.0, expected=100 * MIB)
    clock.now += 1
    meter.add(10 * MIB)
    clock.now += 1
    meter.add(10 * MIB)
    meter.done()
    err = capsys.readouterr().err
    assert err.count("\r\x1b[K") == 3 and err.count("\n") == 1 and err.endswith("\n")
    assert "exported 10.0 MiB of ~100.0 MiB (10%), 10.0 MiB/s, about 9 s left" in err
    assert err.rstrip("\n").rsplit("\r\x1b[K", 1)[1] == "exported 20.0 MiB in 2 s (10.0 MiB/s)"


def test_off_a_terminal_a_plain_line_every_interval_and_one_at_the_end(clock, capsys):
    line = options.ProgressLine(tty=False, interval=10.0)
    meter = Progress(line, interval=0.0, expected=None)
    for _ in range(25):   # 25 s, a report a second
        clock.now += 1
        meter.add(MIB)
    meter.done()
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["exported 10.0 MiB, 1.0 MiB/s", "exported 20.0 MiB, 1.0 MiB/s",
                     "exported 25.0 MiB in 25 s (1.0 MiB/s)"]
    assert not any("\r" in x or "\x1b" in x for x in lines)


def test_one_line_serving_exports_in_turn_starts_each_one_s_clock_and_total(clock):
    line = options.ProgressLine(tty=False)
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
