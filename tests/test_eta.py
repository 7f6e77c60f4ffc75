"""The time left that a long step shows (imagekit.util.eta), replayed against recorded exports.

Each recording (tests/data/progress/, made by bench/progress_record.py) holds every report an export of
debian-mpi made, ``(seconds since it began, bytes)``, and when it ended. Replaying one through the
estimator gives, at each tenth of the bytes, the time left it would have shown, to compare with the time
that really was left. The bound, in shares of the export's whole duration T:

- never short by half T or more (the line said "about 0 s left" for three quarters of a SIF export);
- from six tenths of the bytes on, within 0.25 T either way (before that, the content's mix of small
  files and large ones, and on a shared machine the other jobs, make any rate a guess);
- an estimate at 6 or more of the 9 tenths (none at all would pass the first two).

The SIF recording made before the squashfs tool's read-ahead was bounded (its bytes ran 80 s ahead of
the compression) fails the bound; that shows it can fail. No clock is read: the recording is the clock.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagekit.util.eta import Eta

RECORDINGS = Path(__file__).resolve().parent / "data" / "progress"
SHORT, LATE, SHOWN = 0.5, 0.25, 6


def replay(recording: dict) -> list[tuple[int, float | None, float]]:
    """(tenth, time left shown, time left) at the first report reaching each tenth of the bytes."""
    events = recording["events"]
    end, final = events[-1][0], events[-1][1]
    out = []
    for k in range(1, 10):
        i = next(i for i, (_t, done) in enumerate(events) if done >= final * k / 10)
        eta = Eta(recording["expected"])
        for t, done in events[:i + 1]:
            eta.add(t, done)
        now = events[i][0]
        out.append((k, eta.left(now), end - now))
    return out


def violations(recording: dict) -> list[str]:
    total = recording["events"][-1][0]
    found, shown = [], 0
    for k, shown_left, left in replay(recording):
        if shown_left is None:
            continue
        shown += 1
        error = shown_left - left
        if error < -SHORT * total:
            found.append(f"{k}0%: showed {shown_left:.0f} s left, {left:.0f} s were (short by {-error:.0f} s)")
        if k >= 6 and abs(error) > LATE * total:
            found.append(f"{k}0%: showed {shown_left:.0f} s left, {left:.0f} s were")
    if shown < SHOWN:
        found.append(f"an estimate at {shown} of 9 tenths")
    return found


def _load(name: str) -> dict:
    return json.loads((RECORDINGS / name).read_text())


@pytest.mark.parametrize("name", ["sif-gzip.json", "enroot-small.json"])
def test_the_time_left_holds_its_bound_over_a_recorded_export(name):
    recording = _load(name)
    assert violations(recording) == [], [f"{k}0%: {s} vs {a:.0f}" for k, s, a in replay(recording)]


@pytest.mark.parametrize("name", ["sif-gzip-unbounded-read-ahead.json", "enroot-small-unbounded-read-ahead.json"])
def test_the_bound_fails_an_export_whose_bytes_ran_ahead_of_its_work(name):
    """Before the read-ahead bound: every byte read by 26 s of a 110 s SIF export, by 100 s of a 525 s
    zstd-19 one."""
    recording = _load(name)
    found = violations(recording)
    assert any("short by" in v for v in found), found


def test_no_estimate_until_the_step_has_run_and_done_a_share():
    eta = Eta(1000, min_elapsed=5.0, min_share=0.1)
    eta.add(100.0, 0)
    eta.add(101.0, 10)
    assert eta.left(101.0) is None          # 1 s in, 1 % done
    eta.add(106.0, 50)
    assert eta.left(106.0) is None          # 6 s in, 5 % done
    eta.add(107.0, 100)
    assert eta.left(107.0) == pytest.approx((1000 - 100) / (100 / 7))
    eta.add(200.0, 1000)
    assert eta.left(200.0) is None          # done what was expected: the tool is finishing


def test_the_rate_is_the_recent_one():
    eta = Eta(10_000, window=10.0)
    for t in range(0, 60, 2):               # a slow minute: 10 bytes a second
        eta.add(float(t), t * 10)
    for t in range(60, 80, 2):              # then 100 a second
        eta.add(float(t), 580 + (t - 58) * 100)
    assert eta.rate() == pytest.approx(100.0)
