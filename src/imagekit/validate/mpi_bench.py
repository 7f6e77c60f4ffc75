"""Parsers for MPI benchmark output: OSU micro-benchmarks and ``python -m mpi4py.bench``.

OSU prints ``# OSU MPI Latency Test v7.3`` then ``# Size  Latency (us)`` (or
``Bandwidth (MB/s)``, ``Avg Latency(us)  Min Latency(us) ...``) and one row per
size. mpi4py 4 prints ``# MPI PingPong Test`` / ``# Size [B]  Bandwidth [MB/s] |
Time Mean [s] ± StdDev [s]  Samples``; its ringtest prints ``time for L loops =
T seconds (N processes, S bytes)``.
"""

from __future__ import annotations

import re
from typing import Optional

from imagekit.validate.model import MpiBenchRun, MpiPoint
from imagekit.validate.text import Line

_OSU_TITLE = re.compile(r"^#\s*OSU\s+\S+\s+(.+?)\s+Test\b(?:\s+v(\S+))?")
_OSU_COLUMNS = re.compile(r"^#\s*Size\s{2,}(.+)$")
_NUMROW = re.compile(r"^\s*(\d+)((?:\s+[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)*)\s*$")
_PINGPONG_TITLE = re.compile(r"^#\s*MPI PingPong Test")
_PINGPONG_COLUMNS = re.compile(r"^#\s*Size \[B\]\s+Bandwidth \[MB/s\]")
_PINGPONG_ROW = re.compile(
    r"^\s*(\d+)\s+([\d.]+)(?:\s*\|\s*([-+\d.eE]+)\s*(?:±|\+/-|\+-)\s*([-+\d.eE]+)\s+(\d+))?\s*$"
)
_RINGTEST = re.compile(
    r"time for (\d+) loops = ([-+\d.eE]+) seconds \((\d+) processes, (\d+) bytes\)"
)
_OSU_NAMES = {
    "latency": "osu_latency",
    "bandwidth": "osu_bw",
    "bi-directional bandwidth": "osu_bibw",
    "multi-threaded latency": "osu_latency_mt",
    "multiple bandwidth / message rate": "osu_mbw_mr",
}


def osu_name(title: str) -> str:
    key = title.strip().lower()
    if key in _OSU_NAMES:
        return _OSU_NAMES[key]
    key = re.sub(r"\s*latency$", "", key)
    return "osu_" + re.sub(r"[^a-z0-9]+", "_", key).strip("_")


class MpiBenchParser:
    def __init__(self) -> None:
        self.runs: list[MpiBenchRun] = []
        self.run: Optional[MpiBenchRun] = None
        self.mode = "none"  # none | osu-title | osu | pingpong
        self.lat_idx: Optional[int] = None
        self.bw_idx: Optional[int] = None
        self.ncols = 0

    def _new(self, benchmark: str, title: str, no: int) -> MpiBenchRun:
        self.run = MpiBenchRun(benchmark=benchmark, title=title, line=no)
        self.runs.append(self.run)
        return self.run

    def feed(self, line: Line) -> bool:
        text = line.text.strip()
        if not text:
            return False
        if (m := _RINGTEST.search(text)):
            loops, seconds, procs, size = int(m.group(1)), float(m.group(2)), int(m.group(3)), int(m.group(4))
            prev = self.runs[-1] if self.runs else None
            if prev is None or prev.benchmark != "ringtest" or prev.processes != procs:
                prev = self._new("ringtest", "mpi4py ringtest", line.no)
                prev.processes = procs
                prev.columns = ["Size [B]", "Time per loop [us]"]
            prev.points.append(MpiPoint(size, latency_us=seconds / loops * 1e6 if loops else None))
            self.mode = "none"
            return True
        if (m := _OSU_TITLE.match(text)):
            self._new(osu_name(m.group(1)), text.lstrip("# ").strip(), line.no)
            self.mode = "osu-title"
            return True
        if _PINGPONG_TITLE.match(text):
            self._new("pingpong", "mpi4py pingpong", line.no)
            self.mode = "pingpong"
            return True
        if _PINGPONG_COLUMNS.match(text):
            if self.mode != "pingpong" or self.run is None or self.run.points:
                self._new("pingpong", "mpi4py pingpong", line.no)
            self.mode = "pingpong"
            assert self.run is not None
            self.run.columns = ["Size [B]", "Bandwidth [MB/s]"] + (
                ["Time Mean [s]", "StdDev [s]", "Samples"] if "Time Mean" in text else [])
            return True
        if (m := _OSU_COLUMNS.match(text)):
            cols = [c.strip() for c in re.split(r"\s{2,}", m.group(1).strip()) if c.strip()]
            if self.mode != "osu-title" or self.run is None:
                guess = "osu_bw" if any("MB/s" in c for c in cols) else "osu_latency"
                self._new(guess, "", line.no)
            assert self.run is not None
            self.run.columns = ["Size"] + cols
            self.lat_idx = next((i for i, c in enumerate(cols) if "avg latency" in c.lower()), None)
            if self.lat_idx is None:
                self.lat_idx = next((i for i, c in enumerate(cols) if "lat" in c.lower()), None)
            self.bw_idx = next((i for i, c in enumerate(cols) if "bandwidth" in c.lower() or c == "MB/s"), None)
            self.ncols = len(cols)
            self.mode = "osu"
            return True
        if text.startswith("#"):
            if self.mode == "osu-title":  # "# Datatype: MPI_CHAR." between title and columns
                return True
            self.mode = "none"  # any other comment ends the table
            return False
        if self.mode == "pingpong" or (self.mode == "none" and "|" in text):
            m = _PINGPONG_ROW.match(text)
            if m:
                if self.mode == "none":  # --no-header output
                    self._new("pingpong", "mpi4py pingpong", line.no)
                    self.mode = "pingpong"
                assert self.run is not None
                lat = float(m.group(3)) * 1e6 if m.group(3) else None
                self.run.points.append(MpiPoint(int(m.group(1)), latency_us=lat, bandwidth_mbps=float(m.group(2))))
                return True
            if self.mode == "pingpong" and re.match(r"^\s*\d+\s*$", text) and self.run is not None:
                self.run.truncated = True
                self.run.truncation.append(f"line {line.no}: incomplete row {text!r}")
                return True
            return False
        if self.mode == "osu" and self.run is not None:
            m = _NUMROW.match(text)
            if not m:
                return False  # noise between rows
            values = [float(v) for v in m.group(2).split()]
            if len(values) < self.ncols:
                self.run.truncated = True
                self.run.truncation.append(f"line {line.no}: incomplete row {text!r}")
                return True
            point = MpiPoint(int(m.group(1)))
            if self.lat_idx is not None:
                point.latency_us = values[self.lat_idx]
            if self.bw_idx is not None:
                point.bandwidth_mbps = values[self.bw_idx]
            self.run.points.append(point)
            return True
        return False

    def finish(self) -> list[MpiBenchRun]:
        for run in self.runs:
            if not run.points and not run.truncated:
                run.truncated = True
                run.truncation.append("benchmark header without any result row")
        return self.runs
