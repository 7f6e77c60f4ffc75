"""`imagekit launch … --validate`: run the image's benchmark through a launcher and judge its output.

The benchmark is the one the image's facts record (the first component that
offers one: nccl-tests runs ``all_reduce_perf``, one GPU per rank, with
NCCL_DEBUG=INFO so the transport is visible to ``--expect-transport``; a
Python with mpi4py runs its ring test). The output streams to the terminal as usual and is also kept for
``imagekit.validate``.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Callable

from imagekit import image_facts
from imagekit.util.errors import UsageError
from imagekit.image_facts import ImageFacts
from imagekit.validate import evaluate, parse


def default_benchmark(facts: ImageFacts | dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
    """(command, extra environment) for an image, from what its facts (or raw labels) record."""
    if not isinstance(facts, ImageFacts):
        facts = image_facts.from_labels(facts or {})
    if facts.benchmark is None:
        raise UsageError("no benchmark known for this image (it records neither nccl-tests nor mpi4py)",
                         "give the benchmark after `--`, e.g. -- osu_latency")
    return list(facts.benchmark.command), dict(facts.benchmark.env)


class Tee:
    """A pipe whose writer end a subprocess gets; what it writes goes to ``sink`` and is kept."""

    def __init__(self, sink=None) -> None:
        self._sink = sink or sys.stdout
        read_fd, write_fd = os.pipe()
        self.file = os.fdopen(write_fd, "w")
        self._reader = os.fdopen(read_fd, "r", errors="replace")
        self._lines: list[str] = []
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        for line in self._reader:
            self._lines.append(line)
            self._sink.write(line)
            self._sink.flush()

    def close(self) -> str:
        """Close our copy of the writer end, drain, and return everything written."""
        self.file.close()
        self._thread.join()
        self._reader.close()
        return "".join(self._lines)


def run_and_validate(run: Callable[[object], int], gates, *, source: str = "<launch>"):
    """``run(stdout)`` launches the job; returns (job exit code, parsed result, verdict)."""
    tee = Tee()
    try:
        rc = run(tee.file)
    finally:
        text = tee.close()
    result = parse(text, source=source)
    return rc, result, evaluate(result, gates)
