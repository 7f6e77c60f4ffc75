"""The ticker that lets a quiet step speak (imagekit.util.ticker): it calls until stopped, then never again."""

from __future__ import annotations

from helpers.polling import wait_for
from imagekit.util.ticker import Ticker


def test_it_ticks_until_stopped_and_not_after():
    seen: list[float] = []
    with Ticker(seen.append, period=0.01) as ticker:
        wait_for(lambda: len(seen) >= 3, "three ticks", seconds=30)
    count = len(seen)
    assert ticker._thread is not None and not ticker._thread.is_alive()
    assert len(seen) == count and seen == sorted(seen)


def test_a_tick_may_stop_its_own_ticker():
    """ProgressLine.close() runs on the ticker's thread when a heartbeat ends an export's line."""
    seen: list[float] = []

    def tick(now: float) -> None:
        seen.append(now)
        ticker.stop()

    ticker = Ticker(tick, period=0.01).start()
    wait_for(lambda: ticker._thread is not None and not ticker._thread.is_alive(), "the ticker to end", seconds=30)
    assert len(seen) == 1
