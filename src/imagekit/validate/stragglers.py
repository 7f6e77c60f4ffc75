"""Stragglers and spikes from nccl-tests' per-iteration timing (``-I 1``).

The -J JSON holds, per size, every iteration's time for every MPI process
(``per_process_max_times_us``: the slowest GPU of that process). A process or a
node whose average time is out of line with the median of all processes is a
straggler; an iteration whose time is far above the median iteration is a spike,
attributed to the processes (and node) that spiked, or system-wide when all did
(the same reading as nccl-tests' tools/analyze_perf_json.py). The text table
only has i_min/i_max/i_p99/i_cv% per size: spikes show there, stragglers do not.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional

from imagekit.validate.model import NcclTestsRun, Row
from imagekit.util.sizes import format_size

DEFAULT_THRESHOLD = 0.15  # a process 15 % slower than the median is out of line
DEFAULT_SPIKE = 1.5  # an iteration 1.5 x the median iteration is a spike (analyze_perf_json's default)


@dataclass
class Straggler:
    who: str  # "node gpu-07" | "process 3 (rank 3 on gpu-07)"
    host: Optional[str]
    ratio: float  # its time / a healthy process's time (see find_stragglers), averaged over the sizes looked at
    sizes: list[int]


def process_hosts(run: NcclTestsRun, nprocs: int) -> list[Optional[str]]:
    """Host of each MPI process: ranks are numbered process by process (rank = proc x ranks-per-process + i)."""
    ranks = sorted(run.ranks, key=lambda r: r.rank)
    if not ranks or len(ranks) % nprocs:
        return [None] * nprocs
    per = len(ranks) // nprocs
    return [ranks[p * per].host for p in range(nprocs)]


def _rows_with_processes(run: NcclTestsRun, min_size: int) -> list[Row]:
    rows = [r for r in run.rows if r.out_of_place and r.out_of_place.iters and r.out_of_place.iters.per_process_us]
    big = [r for r in rows if r.size >= min_size]
    if big:
        return big
    return [r for r in rows if r.size == max(x.size for x in rows)] if rows else []


def _label(p: int, host: Optional[str], run: NcclTestsRun, nprocs: int) -> str:
    ranks = sorted(run.ranks, key=lambda r: r.rank)
    if host is None or not ranks:
        return f"process {p}"
    per = len(ranks) // nprocs
    first = ranks[p * per].rank
    span = f"rank {first}" if per == 1 else f"ranks {first}-{first + per - 1}"
    return f"process {p} ({span} on {host})"


def find_stragglers(run: NcclTestsRun, min_size: int, threshold: float = DEFAULT_THRESHOLD) -> list[Straggler]:
    """Processes (grouped into nodes when a node's processes all stand out) slower than the median."""
    rows = _rows_with_processes(run, min_size)
    if not rows:
        return []
    nprocs = len(rows[0].out_of_place.iters.per_process_us)  # type: ignore[union-attr]
    if nprocs < 2:
        return []
    hosts = process_hosts(run, nprocs)
    ratios: list[list[float]] = [[] for _ in range(nprocs)]
    for row in rows:
        it = row.out_of_place.iters  # type: ignore[union-attr]
        if len(it.per_process_us) != nprocs:
            continue
        avgs = [statistics.fmean(t[it.skipped:] or t) for t in it.per_process_us]
        # The reference is what a healthy process takes: the median process, or the median of the fastest
        # node when a whole node is slow (with 2 nodes the overall median would sit between them).
        per_host: dict[Optional[str], list[float]] = {}
        for p, a in enumerate(avgs):
            per_host.setdefault(hosts[p], []).append(a)
        med = min([statistics.median(avgs)] + [statistics.median(v) for h, v in per_host.items()
                                                if h is not None and len(per_host) > 1])
        if med <= 0:
            continue
        for p, a in enumerate(avgs):
            ratios[p].append(a / med)
    mean = [statistics.fmean(r) if r else 1.0 for r in ratios]
    slow = {p for p in range(nprocs) if mean[p] > 1 + threshold}
    if not slow:
        return []
    sizes = [r.size for r in rows]
    out: list[Straggler] = []
    by_host: dict[Optional[str], list[int]] = {}
    for p, h in enumerate(hosts):
        by_host.setdefault(h, []).append(p)
    done: set[int] = set()
    for host, procs in by_host.items():
        if host is not None and len(procs) > 1 and set(procs) <= slow and len(by_host) > 1:
            out.append(Straggler(f"node {host}", host, statistics.fmean(mean[p] for p in procs), sizes))
            done |= set(procs)
    for p in sorted(slow - done, key=lambda p: -mean[p]):
        out.append(Straggler(_label(p, hosts[p], run, nprocs), hosts[p], mean[p], sizes))
    return out


def find_spikes(run: NcclTestsRun, factor: float = DEFAULT_SPIKE, limit: int = 5) -> list[str]:
    """Human lines for iterations far above their size's median iteration."""
    out: list[str] = []
    nprocs = 0
    for row in run.rows:
        it = row.out_of_place.iters if row.out_of_place else None
        if it is None:
            continue
        where = f"{format_size(row.size)} (out-of-place)"
        if it.times_us:
            med = statistics.median(it.times_us[it.skipped:] or it.times_us)
            for i, t in enumerate(it.times_us):
                if i < it.skipped or med <= 0 or t <= factor * med:
                    continue
                who = "system-wide"
                if it.per_process_us:
                    nprocs = len(it.per_process_us)
                    hosts = process_hosts(run, nprocs)
                    spiked = [p for p, times in enumerate(it.per_process_us)
                              if i < len(times) and times[i] > factor * statistics.median(times)]
                    if spiked and len(spiked) < nprocs:
                        on = {hosts[p] for p in spiked}
                        who = (f"process {spiked[0]}" if len(spiked) == 1 else f"{len(spiked)}/{nprocs} processes") \
                            + (f" on {on.pop()}" if len(on) == 1 and None not in on else "")
                out.append(f"spike at {where}, iteration {i}: {t:.1f} us, {t / med:.1f}x the median {med:.1f} us "
                           f"({who})")
        elif it.max_us > factor * row.out_of_place.time_us:  # type: ignore[union-attr]
            out.append(f"spike at {where}: slowest iteration {it.max_us:.1f} us, "
                       f"{it.max_us / row.out_of_place.time_us:.1f}x the average "  # type: ignore[union-attr]
                       f"{row.out_of_place.time_us:.1f} us (i_cv {it.cv_pct:.1f}%)")  # type: ignore[union-attr]
        if len(out) >= limit:
            break
    return out
