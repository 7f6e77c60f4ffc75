"""A thread that calls a function every second or so, for the long steps that must say what they are
doing when their own output has gone quiet (a build step compiling, a check running, a squashfs tool
writing its tables). The function decides whether to speak; it runs on the ticker's thread, so whatever
it shares with the step's own thread goes under a lock."""

from __future__ import annotations

import threading
import time
from typing import Callable


class Ticker:
    """Calls ``tick(now)`` every ``period`` seconds (``now``: time.monotonic()) from :meth:`start` until
    :meth:`stop`; a context manager does both."""

    def __init__(self, tick: Callable[[float], None], period: float = 1.0, name: str = "imagekit-ticker") -> None:
        self.tick, self.period, self.name = tick, period, name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "Ticker":
        def run() -> None:
            while not self._stop.wait(self.period):
                self.tick(time.monotonic())

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> "Ticker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
