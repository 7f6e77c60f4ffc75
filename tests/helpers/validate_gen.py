"""Generators of benchmark output in the formats the tools print, for the validate tests.

No GPU or fabric exists here, so nccl-tests and NCCL_DEBUG=INFO output is
generated. The printf layouts follow nccl-tests' sources (src/common.cu,
src/util.cu) for three generations: legacy (max-delta ``error`` column, no
``root``), classic 2.x (``#wrong`` + ``root``, ``%5g`` / ``N/A``) and 2.17+
(version/"Collective test starting" lines, PCI domain in the device list,
``getFloatStr`` number widths, "Collective test concluded" footer). NCCL log
lines follow the ``host:pid:tid [dev] NCCL INFO ...`` shape of real logs.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from dataclasses import dataclass, field
from typing import Optional

import pytest


# -- nccl-tests -------------------------------------------------------------------------------
from imagekit.validate.expect import BUSBW_FACTOR  # noqa: E402 - nccl-tests' getBw factors
REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "reduce": "sum", "all_gather": "none",
         "alltoall": "none", "broadcast": "none", "sendrecv": "sum"}
ROOT = {"broadcast": 0, "reduce": 0}


def _time_str(us: float) -> str:
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def _float_str(value: float, width: int) -> str:
    """nccl-tests 2.17+ getFloatStr: as many decimals as the width allows."""
    power, val = 0, 1
    while value >= val:
        power, val = power + 1, val * 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.0e}"


@dataclass
class Spec:
    coll: str = "all_reduce"
    hosts: tuple = ("node-a",)
    gpus_per_host: int = 8
    minb: int = 8
    maxb: int = 8 << 30
    factor: int = 2
    peak_busbw: float = 180.0  # GB/s, asymptotic
    latency_us: float = 20.0
    check: bool = True  # False: multi-node style "-c 0" -> N/A
    wrong: dict = field(default_factory=dict)  # size -> wrong elements (out-of-place)
    style: str = "classic"  # legacy | classic | new
    stop_after: Optional[int] = None  # rows printed before the output stops
    footer: bool = True
    echo_command: bool = True
    oob: Optional[int] = None
    gpu: str = "NVIDIA H100 80GB HBM3"
    version: str = "2.17.6"  # printed by style "new"
    # -I per-iteration timing (nccl-tests >= 2.19.2): simulated per MPI process (one GPU each)
    per_iter: bool = False
    iters: int = 20
    skip: int = 0  # -K (2.19.6)
    slow: dict = field(default_factory=dict)  # process index or host name -> time factor (a straggler)
    spikes: dict = field(default_factory=dict)  # (size, iteration) -> (process index, time factor)
    noise: float = 0.01  # relative jitter of each iteration

    @property
    def nranks(self) -> int:
        return len(self.hosts) * self.gpus_per_host

    def sizes(self) -> list[int]:
        out, s = [], self.minb
        while s <= self.maxb:
            out.append(s)
            s *= self.factor
        return out


@dataclass
class Expected:
    """What a correct parser must read back (values as printed, i.e. rounded)."""

    sizes: list = field(default_factory=list)
    oop_busbw: list = field(default_factory=list)
    ip_busbw: list = field(default_factory=list)
    oop_time: list = field(default_factory=list)
    wrong: list = field(default_factory=list)


def _percentile_index(n: int, pct: int) -> int:
    return min(n - 1, (n * pct + 99) // 100 - 1)  # nccl-tests src/util.cu percentileIndex


def iter_stats(times: list) -> dict:
    """computeIterStats of nccl-tests (src/util.cu): sorted min/max/p50/p95/p99, mean, population stdev, cv."""
    srt = sorted(times)
    n = len(srt)
    avg = sum(srt) / n
    stdev = math.sqrt(sum((x - avg) ** 2 for x in srt) / n)
    return {"min_us": srt[0], "max_us": srt[-1], "avg_us": avg, "p50_us": srt[n // 2],
            "p95_us": srt[_percentile_index(n, 95)], "p99_us": srt[_percentile_index(n, 99)],
            "stdev_us": stdev, "cv_pct": stdev / avg * 100 if avg > 0 else 0.0}


def simulate_iterations(spec: Spec, size: int, t: float, place: str) -> dict:
    """Per-process iteration times (us) around ``t``: one process per GPU, each iteration jittered;
    ``spec.slow`` slows a process (index) or every process of a host; ``spec.spikes`` plants spikes."""
    rng = random.Random(size * 2 + (place == "ip"))
    per_process = []
    for p in range(spec.nranks):
        host = spec.hosts[p // spec.gpus_per_host]
        factor = spec.slow.get(p, spec.slow.get(host, 1.0))
        row = []
        for i in range(spec.iters):
            x = t * factor * (1 + rng.uniform(-spec.noise, spec.noise))
            if place == "oop" and spec.spikes.get((size, i), (None,))[0] == p:
                x *= spec.spikes[(size, i)][1]
            row.append(x)
        per_process.append(row)
    times = [max(col) for col in zip(*per_process)]  # ReduceProcessMaxIterTimes
    stats = iter_stats(times[spec.skip:])
    stats.update(times_us=times, per_process=per_process, avg_us_all=sum(times) / len(times))
    return stats


def nccl_tests_output(spec: Spec) -> tuple[str, Expected]:
    n = spec.nranks
    fac = BUSBW_FACTOR[spec.coll](n)
    redop, root = REDOP[spec.coll], ROOT.get(spec.coll, -1)
    lines: list[str] = []
    exp = Expected()
    if spec.echo_command:
        lines.append(f"+ srun --mpi=pmix -N {len(spec.hosts)} ./build/{spec.coll}_perf -b {spec.minb} "
                     f"-e {spec.maxb} -f {spec.factor} -c {int(spec.check)}")
    if spec.style == "new":
        lines.append(f"# nccl-tests version {spec.version} nccl-headers=22501 nccl-library=22501")
        lines.append(f"# Collective test starting: {spec.coll}_perf")
    ntl = (f"# nThread 1 nGpus 1 minBytes {spec.minb} maxBytes {spec.maxb} step: {spec.factor}(factor) "
           f"warmup iters: 5 iters: 20 agg iters: 1 validation: {int(spec.check)} graph: 0")
    lines.append(ntl + (" unalign: 0" if spec.style == "new" else ""))
    if spec.per_iter:
        lines.append("# Per-Iteration Report: CUDA event timing; i_* uses max over process rows"
                     + (f"; summary skips first {spec.skip} iterations" if spec.skip else "") + " ")
    lines.append("#")
    lines.append("# Using devices")
    rank = 0
    for h, host in enumerate(spec.hosts):
        for d in range(spec.gpus_per_host):
            bus = 0x07 + 0x10 * d
            if spec.style == "legacy":
                lines.append(f"#   Rank {rank:2d} Pid {1000 + rank:6d} on {host:>10s} device {d:2d} [0x{bus:02x}] Tesla V100-SXM2-16GB")
            elif spec.style == "new":
                lines.append(f"#  Rank {rank:2d} Group {0:2d} Pid {1000 + rank:6d} on {host:>10s} device {d:2d} "
                             f"[{0:04x}:{bus:02x}:{0:02x}] {spec.gpu}")
            else:
                lines.append(f"#  Rank {rank:2d} Group {0:2d} Pid {1000 + rank:6d} on {host:>10s} device {d:2d} "
                             f"[0x{bus:02x}] {spec.gpu}")
            rank += 1
    lines.append("#")
    if spec.style == "legacy":
        lines.append(f"# {'':>10s}  {'':>12s}  {'':>6s}  {'':>6s}        out-of-place                    in-place")
        lines.append(f"# {'size':>10s}  {'count':>12s}  {'type':>6s}  {'redop':>6s}  {'time':>7s}  {'algbw':>6s}  "
                     f"{'busbw':>6s}  {'error':>5s}  {'time':>7s}  {'algbw':>6s}  {'busbw':>6s}  {'error':>5s}")
        lines.append(f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>6s}  {'':>6s}  {'(us)':>7s}  {'(GB/s)':>6s}  "
                     f"{'(GB/s)':>6s}  {'':>5s}  {'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>5s}")
    elif spec.per_iter:  # writeResultHeader with per_iter_timing (2.19.2+)
        lines.append(f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}              out-of-place (+ per-iteration)"
                     "                                in-place (+ per-iteration)")
        cols = ["time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%"]
        units = ["(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)"]
        widths = [7, 6, 6, 6, 7, 7, 7, 7]
        for head, first in ((cols, ("size", "count", "type", "redop", "root")), (units, ("(B)", "(elements)", "", "", ""))):
            body = "".join(f"  {h:>{w}s}" for h, w in zip(head * 2, widths * 2))
            lines.append(f"# {first[0]:>10s}  {first[1]:>12s}  {first[2]:>8s}  {first[3]:>6s}  {first[4]:>6s}{body} ")
    else:
        lines.append(f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}           out-of-place                       in-place          ")
        tail = " " if spec.style == "new" else ""
        lines.append(f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}  {'time':>7s}  "
                     f"{'algbw':>6s}  {'busbw':>6s} {'#wrong':>6s}  {'time':>7s}  {'algbw':>6s}  {'busbw':>6s} "
                     f"{'#wrong':>6s}{tail}")
        lines.append(f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  {'(us)':>7s}  {'(GB/s)':>6s}  "
                     f"{'(GB/s)':>6s}  {'':>5s}  {'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>5s}{tail}")
    sizes = spec.sizes()
    bw_sum, rows = 0.0, 0
    for i, size in enumerate(sizes):
        if spec.stop_after is not None and i >= spec.stop_after:
            break
        count = size // 4 // (n if spec.coll in ("all_gather", "reduce_scatter") else 1)
        size_p = count * 4 * (n if spec.coll in ("all_gather", "reduce_scatter") else 1)
        halves = []
        for place, skew in (("oop", 1.0), ("ip", 1.015)):
            t = (spec.latency_us + size_p / (spec.peak_busbw / fac * 1e3)) * skew
            stats = None
            if spec.per_iter or spec.slow or spec.spikes:
                stats = simulate_iterations(spec, size_p, t, place)
                t = stats["avg_us_all"]
            algbw = size_p / t / 1e3
            busbw = algbw * fac
            halves.append((t, algbw, busbw, stats))
        if spec.style == "legacy":
            line = f"{size_p:12d}  {count:12d}  {'float':>6s}  {redop:>6s}"
        else:
            line = f"{size_p:12d}  {count:12d}  {'float':>8s}  {redop:>6s}  {root:6d}"
        for k, (t, algbw, busbw, stats) in enumerate(halves):
            wrong = spec.wrong.get(size, 0) if k == 0 else 0
            if spec.style == "new":
                ts, ab, bb = _float_str(t, 7), _float_str(algbw, 6), _float_str(busbw, 6)
                line += f"  {ts:>7s}  {ab:>6s}  {bb:>6s}  {wrong:6g}" if spec.check else f"  {ts:>7s}  {ab:>6s}  {bb:>6s}    N/A"
                if spec.per_iter:  # writePerIterReport: "  %7s  %7s  %7s  %7s" of min/max/p99/cv
                    line += "".join(f"  {_float_str(stats[key], 7):>7s}" for key in ("min_us", "max_us", "p99_us",
                                                                                       "cv_pct"))
            else:
                ts, ab, bb = _time_str(t), f"{algbw:6.2f}", f"{busbw:6.2f}"
                if spec.style == "legacy":
                    line += f"  {ts:>7s}  {ab}  {bb}  {wrong * 1e-7:5.0e}" if spec.check else f"  {ts:>7s}  {ab}  {bb}  {'N/A':>5s}"
                else:
                    line += f"  {ts:>7s}  {ab}  {bb}  {wrong:5g}" if spec.check else f"  {ts:>7s}  {ab}  {bb}  {'N/A':>5s}"
            (exp.oop_busbw if k == 0 else exp.ip_busbw).append(float(bb))
            if k == 0:
                exp.oop_time.append(float(ts))
                exp.wrong.append(float(wrong) if spec.check else None)
            bw_sum += float(bb)
            rows += 1
        exp.sizes.append(size_p)
        lines.append(line)
    if spec.footer:
        if spec.style == "legacy":
            lines.append(f" Out of bounds values : {spec.oob or 0} {'FAILED' if spec.oob else 'OK'}")
            lines.append(f" Avg bus bandwidth    : {bw_sum / max(rows, 1):g} ")
        else:
            lines.append(f"# {'Out of bounds values':<20s} : {spec.oob or 0} {'FAILED' if spec.oob else 'OK'}")
            lines.append(f"# {'Avg bus bandwidth':<20s} : {bw_sum / max(rows, 1):g} ")
            lines.append("#")
            if spec.style == "new":
                lines.append(f"# Collective test concluded: {spec.coll}_perf")
                lines.append("#")
    return "\n".join(lines) + "\n", exp


# -- nccl-tests -J JSON ---------------------------------------------------------------------------
class _Writer:
    """The JSON nccl-tests writes (src/util.cu): one line, doubles as %lf, NaN as "nan", bools as strings."""

    def __init__(self) -> None:
        self.out: list[str] = []

    def value(self, v) -> str:
        if isinstance(v, bool):
            return json.dumps("true" if v else "false")
        if isinstance(v, float):
            return '"nan"' if v != v else f"{v:f}"
        if isinstance(v, dict):
            return "{" + ",".join(f"{json.dumps(k)}:{self.value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ",".join(self.value(x) for x in v) + "]"
        if v is None:
            return "null"
        return json.dumps(v)


def nccl_tests_json(spec: Spec, version: int = 3, nccl_code: int = 22703) -> tuple[str, Expected]:
    """The -J file of the run ``spec`` describes, in JSON format ``version`` (1: nccl-tests 2.17.3-2.19.1,
    2: 2.19.2-2.19.5, 3: 2.19.6); per-iteration objects when ``spec.per_iter`` (versions 2 and 3)."""
    text, exp = nccl_tests_output(spec)  # the same simulated figures as the text output
    n = spec.nranks
    fac = BUSBW_FACTOR[spec.coll](n)
    redop, root = REDOP[spec.coll], ROOT.get(spec.coll, -1)
    cfg: dict = {"nthreads": 1, "ngpus": 1, "minimum_bytes": spec.minb, "maximum_bytes": spec.maxb,
                 "step_factor": spec.factor, "warmup_iters": 5, "iterations": spec.iters, "aggregated_iterations": 1,
                 "validation": int(spec.check), "graph": 0, "blocking_collectives": False}
    if version >= 2:
        cfg["per_iter_timing"] = spec.per_iter
    if version >= 3:
        cfg["per_iter_skip"] = spec.skip
    cfg["parallel_init"] = False
    devices, rank = [], 0
    for host in spec.hosts:
        for d in range(spec.gpus_per_host):
            devices.append({"rank": rank, "group": 0, "pid": 1000 + rank, "hostname": host, "device": d,
                            "device_hex": f"{0:04x}:{0x07 + 0x10 * d:02x}:{0:02x}", "device_info": spec.gpu})
            rank += 1
    cfg["devices"] = devices
    results, bw_sum, count = [], 0.0, 0
    for i, size in enumerate(spec.sizes()):
        if spec.stop_after is not None and i >= spec.stop_after:
            break
        cnt = size // 4 // (n if spec.coll in ("all_gather", "reduce_scatter") else 1)
        size_p = cnt * 4 * (n if spec.coll in ("all_gather", "reduce_scatter") else 1)
        res: dict = {"size": size_p, "count": cnt, "type": "float", "redop": redop, "root": f"{root:6d}"}
        for place, skew, key in (("oop", 1.0, "out_of_place"), ("ip", 1.015, "in_place")):
            t = (spec.latency_us + size_p / (spec.peak_busbw / fac * 1e3)) * skew
            stats = simulate_iterations(spec, size_p, t, place) if (spec.per_iter or spec.slow or spec.spikes) else None
            if stats is not None:
                t = stats["avg_us_all"]
            algbw = size_p / t / 1e3
            wrong = spec.wrong.get(size, 0) if place == "oop" else 0
            res[key] = {"time": t, "alg_bw": algbw, "bus_bw": algbw * fac,
                        "nwrong": float(wrong) if spec.check else None}
            bw_sum, count = bw_sum + algbw * fac, count + 1
            if spec.per_iter and version >= 2:
                per: dict = {}
                if version >= 3:
                    per["skipped_iterations"] = spec.skip
                per.update({k: stats[k] for k in ("min_us", "max_us", "avg_us", "p50_us", "p95_us", "p99_us",
                                                  "stdev_us", "cv_pct")})
                per["times_us"] = stats["times_us"]
                if n > 1:
                    per["per_process_max_times_us"] = stats["per_process"]
                res[key + "_per_iter"] = per
        res["actual_iterations"] = spec.iters
        res["experiment_name"] = ""
        results.append(res)
    doc: dict = {"version": version, "start_time": "2026-07-01 12:00:00",
                 "args": [f"./build/{spec.coll}_perf", "-b", str(spec.minb), "-e", str(spec.maxb), "-J", "out.json"]
                 + (["-I", "1"] if spec.per_iter else []),
                 "env": ["NCCL_DEBUG=INFO"], "nccl_version": nccl_code, "config": cfg, "results": results}
    if spec.footer:
        avg_key, bw_key = (("average_bus_bandwidith", "bandwidith") if version == 1 and spec.version < "2.17.9"
                           else ("average_bus_bandwidth", "bandwidth"))
        doc["out_of_bounds"] = {"count": spec.oob or 0, "okay": not spec.oob}
        doc[avg_key] = {bw_key: bw_sum / max(count, 1), "okay": "unchecked"}
        doc["errors"] = []
        doc["end_time"] = "2026-07-01 12:01:00"
    out = _Writer().value(doc)
    if not spec.footer:  # the job died while writing: the file stops mid-document
        out = out[: out.rfind("}", 0, len(out) - 3)]
    return out, exp


# -- NCCL_DEBUG=INFO logs -----------------------------------------------------------------------
def nccl_log(transport: str, hosts: tuple = ("node-a", "node-b"), gpus: int = 2, gdr: bool = True,
             algo: Optional[str] = None, env_algo: Optional[str] = None) -> str:
    """NCCL INFO lines for a ring over ``hosts`` x ``gpus`` using ``transport`` between hosts
    (IB, GDRDMA, Socket) or inside one host (P2P, SHM). ``algo``: rank 0's NCCL_DEBUG_SUBSYS=TUNING
    lines (enqueue.cc: "AllReduce: N Bytes -> Algo X proto P channel{Lo..Hi}={a..b}"); ``env_algo``: the
    "NCCL_ALGO set by environment to X" line."""
    out = []
    pid = 4000

    def info(host: str, dev: int, msg: str) -> None:
        out.append(f"{host}:{pid + dev}:{pid + 100 + dev} [{dev}] NCCL INFO {msg}")

    h0 = hosts[0]
    info(h0, 0, "Bootstrap : Using eth0:10.1.0.1<0>")
    out.append(f"{h0}:{pid}:{pid} [0] NCCL INFO NCCL version 2.21.5+cuda12.4")
    for h in hosts:
        for d in range(gpus):
            if transport in ("IB", "GDRDMA"):
                info(h, d, "NET/Plugin: No plugin found (libnccl-net.so)")
                info(h, d, "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.1.0.1<0>")
                info(h, d, "Using network IB")
            elif transport == "Socket":
                info(h, d, "NET/IB : No device found.")
                info(h, d, "NET/Socket : Using [0]eth0:10.1.0.1<0>")
                info(h, d, "Using network Socket")
            if transport == "GDRDMA" and gdr:
                info(h, d, "GPU Direct RDMA Enabled for GPU 0 / HCA 0 (distance 4 <= 4), read 1")
    n = len(hosts) * gpus
    for ch in range(2):
        for r in range(n):
            nxt = (r + 1) % n
            host, dev = hosts[r // gpus], r % gpus
            same_host = r // gpus == nxt // gpus
            if transport == "SHM" or (same_host and transport == "SHM"):
                info(host, dev, f"Channel {ch:02d} : {r}[{dev}] -> {nxt}[{nxt % gpus}] via SHM/direct/direct")
            elif same_host or transport == "P2P":
                via = "P2P/IPC" if ch == 0 else "P2P/CUMEM/read"
                info(host, dev, f"Channel {ch:02d}/0 : {r}[{dev}] -> {nxt}[{nxt % gpus}] via {via}")
            else:
                net = {"IB": "NET/IB/0", "GDRDMA": "NET/IB/0/GDRDMA" if gdr else "NET/IB/0",
                       "Socket": "NET/Socket/0"}[transport]
                info(host, dev, f"Channel {ch:02d}/0 : {r}[{dev}] -> {nxt}[{nxt % gpus}] [send] via {net}")
                nhost, ndev = hosts[nxt // gpus], nxt % gpus
                info(nhost, ndev, f"Channel {ch:02d}/0 : {r}[{dev}] -> {nxt}[{ndev}] [receive] via {net}")
    for h in hosts:
        for d in range(gpus):
            r = hosts.index(h) * gpus + d
            info(h, d, f"comm 0x55d0c0a0{r:02d} rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId {d + 7}000 "
                       f"commId 0x1a2b3c4d5e6f7081 - Init COMPLETE")
    if env_algo:
        out.insert(2, f"{h0}:{pid}:{pid} [0] NCCL INFO NCCL_ALGO set by environment to {env_algo}")
    if algo:
        size = 8
        while size <= 8 << 30:
            info(h0, 0, f"AllReduce: {size} Bytes -> Algo {algo if size >= 1 << 20 else 'Ring'} proto "
                        f"{'Simple' if size >= 1 << 20 else 'LL'} channel{{Lo..Hi}}={{0..31}}")
            size *= 2
    return "\n".join(out) + "\n"


# -- OSU / mpi4py -----------------------------------------------------------------------------
def osu_latency(max_size: int = 1 << 22, base: float = 1.52, version: str = "v7.3") -> str:
    """osu_latency as printed by OMB 7 (title, "# Datatype" line in v7, "%-10d%*.2f")."""
    lines = [f"# OSU MPI Latency Test {version}"]
    if version.startswith("v7"):
        lines.append("# Datatype: MPI_CHAR.")
    lines.append(f"{'# Size':<10}{'Latency (us)':>18}")
    s = 1
    lines.append(f"{0:<10d}{base - 0.1:>18.2f}")
    while s <= max_size:
        lines.append(f"{s:<10d}{base + s / 12000.0:>18.2f}")
        s *= 2
    return "\n".join(lines) + "\n"


def osu_bw(max_size: int = 1 << 22, peak_mbps: float = 24000.0) -> str:
    lines = ["# OSU MPI Bandwidth Test v5.9", f"{'# Size':<10}{'Bandwidth (MB/s)':>20}"]
    s = 1
    while s <= max_size:
        lines.append(f"{s:<10d}{peak_mbps * s / (s + 16384):>20.2f}")
        s *= 2
    return "\n".join(lines) + "\n"


def osu_allreduce_full(max_size: int = 1 << 20) -> str:
    """osu_allreduce -f (avg/min/max/iterations) as OMB 7 prints it."""
    lines = ["# OSU MPI Allreduce Latency Test v7.3", "# Datatype: MPI_CHAR.",
             "# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations"]
    s = 4
    while s <= max_size:
        avg = 3.0 + s / 5000.0
        lines.append(f"{s:<10d}{avg:>18.2f}{avg * 0.8:>18.2f}{avg * 1.3:>18.2f}{1000:>12d}")
        s *= 2
    return "\n".join(lines) + "\n"


def mpi_available() -> Optional[str]:
    """Why the real MPI test cannot run here, or None when it can."""
    if not shutil.which("mpirun"):
        return "mpirun not found (apt-get install openmpi-bin)"
    return None


def require_mpi() -> None:
    problem = mpi_available()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI needs Open MPI and mpi4py for the validate tests: {problem}", pytrace=False)
    pytest.skip(problem)
