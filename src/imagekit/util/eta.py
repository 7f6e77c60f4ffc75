"""Time left for a long step, from the bytes it still has to process, or no estimate at all.

The rate is the recent one (the last ``window`` seconds), not the average since the start: a container
to create, a cache to warm or a stretch of small files makes the start slow, and an average carries that
into every later estimate. Until the step has run ``min_elapsed`` seconds and done ``min_share`` of its
bytes there is no estimate (the first report of an export was "512 B, about 24114 min left"), nor once
it has done what was expected (the rest is the tool finishing: the line says what it is doing instead).

The bytes must be ones the step has processed, not merely read ahead: the export's squashfs tool gets
a bounded read-ahead for that reason (imagekit.export.squash.READ_AHEAD). tests/test_progress.py
replays recorded exports and holds the estimate to the time that was really left.
"""

from __future__ import annotations

from collections import deque


class Eta:
    """Feed it ``(time, bytes done)`` with :meth:`add`; :meth:`left` is the time left, or None."""

    def __init__(self, expected: int | None, *, window: float = 30.0, min_elapsed: float = 5.0,
                 min_share: float = 0.1) -> None:
        self.expected = expected
        self.window, self.min_elapsed, self.min_share = window, min_elapsed, min_share
        self.started: float | None = None
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, t: float, done: int) -> None:
        if self.started is None:
            self.started = t
        self.samples.append((t, done))
        # Keep one sample at or before the window's start, so the window is always covered.
        while len(self.samples) > 2 and self.samples[1][0] <= t - self.window:
            self.samples.popleft()

    @property
    def done(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def rate(self) -> float | None:
        """Bytes a second over the recent window (None before two samples a moment apart)."""
        if len(self.samples) < 2:
            return None
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else None

    def left(self, now: float) -> float | None:
        """Seconds left at ``now``, or None when there is no honest estimate."""
        if not self.expected or self.started is None:
            return None
        done = self.done
        if done >= self.expected or now - self.started < self.min_elapsed or done < self.min_share * self.expected:
            return None
        rate = self.rate()
        if not rate or rate <= 0:
            return None
        since = now - self.samples[-1][0]
        return max(0.0, (self.expected - done) / rate - since)
