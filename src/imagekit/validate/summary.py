"""Figures derived from a parsed run: peak, saturation size, small-size latency.

Definitions (documented in ``imagekit validate --help``):

* peak busbw: the largest bus bandwidth of any row, out-of-place or in-place.
* saturation size: the smallest message size whose best busbw (the larger of
  out-of-place and in-place) reaches ``fraction`` (default 0.9) of the peak.
* small sizes: non-zero sizes <= ``small_size`` bytes (default 1 KiB); when a run
  has none, its smallest non-zero size. Latency there is the printed time (us).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from imagekit.validate.model import MpiBenchRun, MpiPoint, NcclTestsRun, Row

DEFAULT_SMALL_SIZE = 1024
DEFAULT_SATURATION = 0.9


@dataclass
class Peak:
    busbw: float
    size: int
    figure: str  # out-of-place | in-place


def peak(run: NcclTestsRun) -> Optional[Peak]:
    best: Optional[Peak] = None
    for row in run.rows:
        for name, m in row.named_halves():
            if best is None or m.busbw > best.busbw:
                best = Peak(m.busbw, row.size, name)
    return best


def saturation_size(run: NcclTestsRun, fraction: float = DEFAULT_SATURATION) -> Optional[int]:
    top = peak(run)
    if top is None or top.busbw <= 0:
        return None
    for row in sorted(run.rows, key=lambda r: r.size):
        if row.halves() and row.busbw() >= fraction * top.busbw:
            return row.size
    return None


def small_rows(run: NcclTestsRun, small_size: int = DEFAULT_SMALL_SIZE) -> list[Row]:
    rows = [r for r in run.rows if 0 < r.size <= small_size]
    if rows:
        return rows
    nonzero = [r for r in run.rows if r.size > 0]
    if not nonzero:
        return []
    smallest = min(r.size for r in nonzero)
    return [r for r in nonzero if r.size == smallest]


def mpi_peak_bw(run: MpiBenchRun) -> Optional[MpiPoint]:
    pts = [p for p in run.points if p.bandwidth_mbps is not None]
    return max(pts, key=lambda p: p.bandwidth_mbps or 0.0) if pts else None


def mpi_small_points(run: MpiBenchRun, small_size: int = DEFAULT_SMALL_SIZE) -> list[MpiPoint]:
    pts = [p for p in run.points if p.latency_us is not None]
    if run.benchmark == "ringtest":
        return pts  # ringtest reports one figure per run: its time per loop
    small = [p for p in pts if p.size <= small_size]
    if small:
        return small
    return [min(pts, key=lambda p: p.size)] if pts else []


def mpi_saturation_size(run: MpiBenchRun, fraction: float = DEFAULT_SATURATION) -> Optional[int]:
    top = mpi_peak_bw(run)
    if top is None or not top.bandwidth_mbps:
        return None
    for p in sorted(run.points, key=lambda p: p.size):
        if p.bandwidth_mbps is not None and p.bandwidth_mbps >= fraction * top.bandwidth_mbps:
            return p.size
    return None
