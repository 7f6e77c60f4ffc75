"""Human text and JSON renderings of a Result and its Verdict."""

from __future__ import annotations

import json
from typing import Any, Optional

from imagekit.validate import summary
from imagekit.validate.model import MpiBenchRun, NcclTestsRun, Result, Verdict
from imagekit.util.sizes import format_size


def _f(v: Optional[float], digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _wrong(v: Optional[float]) -> str:
    return "N/A" if v is None else f"{v:g}"


def nccl_summary(run: NcclTestsRun, small_size: int, fraction: float) -> dict[str, Any]:
    top = summary.peak(run)
    sat = summary.saturation_size(run, fraction)
    small = summary.small_rows(run, small_size)
    return {
        "collective": run.collective,
        "ranks": len(run.ranks),
        "hosts": run.hosts,
        "gpus": run.gpus,
        "sizes": len({r.size for r in run.rows}),
        "min_size": min((r.size for r in run.rows), default=None),
        "max_size": max((r.size for r in run.rows), default=None),
        "peak_busbw": top.busbw if top else None,
        "peak_size": top.size if top else None,
        "peak_figure": top.figure if top else None,
        "saturation_fraction": fraction,
        "saturation_size": sat,
        "small_size_latency_us": [
            {"size": r.size, "out_of_place": r.out_of_place.time_us if r.out_of_place else None,
             "in_place": r.in_place.time_us if r.in_place else None} for r in small],
        "wrong_rows": sum(1 for r in run.rows for m in r.halves() if m.wrong and "error" not in run.columns),
        "data_checked": any(m.wrong is not None for r in run.rows for m in r.halves()),
        "out_of_bounds": run.out_of_bounds,
        "avg_busbw": run.avg_busbw,
        "truncated": run.truncated,
    }


def mpi_summary(run: MpiBenchRun, small_size: int, fraction: float) -> dict[str, Any]:
    top = summary.mpi_peak_bw(run)
    small = summary.mpi_small_points(run, small_size)
    return {
        "benchmark": run.benchmark,
        "points": len(run.points),
        "peak_bandwidth_mbps": top.bandwidth_mbps if top else None,
        "peak_size": top.size if top else None,
        "saturation_size": summary.mpi_saturation_size(run, fraction),
        "small_size_latency_us": [{"size": p.size, "latency_us": p.latency_us} for p in small],
        "processes": run.processes,
        "truncated": run.truncated,
    }


def to_json(result: Result, verdict: Verdict, small_size: int = summary.DEFAULT_SMALL_SIZE,
            fraction: float = summary.DEFAULT_SATURATION) -> str:
    data = {
        "status": verdict.status,
        "outcome": verdict.outcome,
        "gated": verdict.gated,
        "exit_code": verdict.exit_code,
        "verdict": verdict.to_dict(),
        "summary": {
            "nccl_tests": [nccl_summary(r, small_size, fraction) for r in result.nccl_tests],
            "mpi": [mpi_summary(r, small_size, fraction) for r in result.mpi],
            "transports": result.transport.transports,
        },
        "result": result.to_dict(),
    }
    return json.dumps(data, indent=2, sort_keys=False, default=str)


def to_text(result: Result, verdict: Verdict, small_size: int = summary.DEFAULT_SMALL_SIZE,
            fraction: float = summary.DEFAULT_SATURATION, table: bool = True) -> str:
    out: list[str] = []
    for i, run in enumerate(result.nccl_tests):
        s = nccl_summary(run, small_size, fraction)
        name = run.collective or "nccl-tests"
        where = f"{s['ranks']} ranks on {len(s['hosts'])} host(s) ({', '.join(s['hosts'])})" if run.ranks \
            else "ranks not listed"
        out.append(f"{name} (run {i + 1}, line {run.line}): {where}" + (f"; {', '.join(s['gpus'])}" if s["gpus"] else ""))
        if run.rows:
            out.append(f"  sizes: {format_size(s['min_size'])} .. {format_size(s['max_size'])} ({s['sizes']} sizes)")
            out.append(f"  peak busbw: {_f(s['peak_busbw'])} GB/s ({s['peak_figure']} at {format_size(s['peak_size'])})"
                       + (f"; nccl-tests avg {run.avg_busbw:g} GB/s" if run.avg_busbw is not None else ""))
            sat = s["saturation_size"]
            out.append(f"  saturates at: {format_size(sat) if sat is not None else '-'} "
                       f"(smallest size with busbw >= {fraction:.0%} of peak)")
            lat = ", ".join(f"{format_size(x['size'])} {_f(x['out_of_place'])}/{_f(x['in_place'])} us"
                            for x in s["small_size_latency_us"][:4])
            out.append(f"  small-size time (out-of-place/in-place): {lat or '-'}")
            err = f"{s['wrong_rows']} rows with #wrong > 0" if s["wrong_rows"] else "none"
            if not s["data_checked"]:
                err += " (data check off: #wrong N/A)"
            oob = "-" if run.out_of_bounds is None else str(run.out_of_bounds)
            out.append(f"  errors: {err}; out-of-bounds values: {oob}")
        if run.truncated:
            out.append(f"  TRUNCATED: {'; '.join(run.truncation)}")
        if table and run.rows:
            out.append(f"  {'size':>10} {'count':>12} {'type':>8} {'redop':>6}  {'oop time':>9} {'oop busbw':>9} "
                       f"{'#wrong':>6}  {'ip time':>9} {'ip busbw':>9} {'#wrong':>6}")
            for r in run.rows:
                o, p = r.out_of_place, r.in_place
                out.append(f"  {format_size(r.size):>10} {r.count:>12} {r.dtype:>8} {r.redop:>6}  "
                           f"{_f(o.time_us if o else None):>9} {_f(o.busbw if o else None):>9} "
                           f"{_wrong(o.wrong) if o else '-':>6}  "
                           f"{_f(p.time_us if p else None):>9} {_f(p.busbw if p else None):>9} "
                           f"{_wrong(p.wrong) if p else '-':>6}")
    for run in result.mpi:
        s = mpi_summary(run, small_size, fraction)
        out.append(f"{run.benchmark} (line {run.line}): {s['points']} sizes"
                   + (f", {run.processes} processes" if run.processes else ""))
        if s["peak_bandwidth_mbps"] is not None:
            out.append(f"  peak bandwidth: {_f(s['peak_bandwidth_mbps'])} MB/s at {format_size(s['peak_size'])}; "
                       f"saturates at {format_size(s['saturation_size']) if s['saturation_size'] is not None else '-'}")
        lat = ", ".join(f"{format_size(x['size'])} {_f(x['latency_us'])} us" for x in s["small_size_latency_us"][:4])
        if lat:
            out.append(f"  small-size latency: {lat}")
        if run.truncated:
            out.append(f"  TRUNCATED: {'; '.join(run.truncation)}")
    t = result.transport
    if t.info_lines:
        used = ", ".join(f"{name} ({t.counts[name]})" for name in t.transports) or "none seen"
        out.append(f"transport: {used}" + (f"; network {', '.join(t.networks)}" if t.networks else "")
                   + (f"; NCCL {t.nccl_version}" if t.nccl_version else ""))
        if t.vias:
            out.append("  via: " + ", ".join(f"{v} ({n})" for v, n in sorted(t.vias.items(), key=lambda x: -x[1])[:8]))
        if t.ib_devices:
            out.append(f"  IB devices: {' '.join(t.ib_devices)}")
        for w in t.warnings[:3]:
            out.append(f"  NCCL WARN: {w}")
    for exp in verdict.expectations:
        out.append(f"expected ({exp['run']}): {exp['expected_busbw']:g} GB/s busbw, {exp['bound']}-bound "
                   f"({exp['algorithm']}); band {exp['band'][0]:g} .. {exp['band'][1]:g} GB/s")
        for line in exp["ranges"]:
            out.append(f"  size {line}")
        for line in exp["assumptions"]:
            out.append(f"  assumes {line}")
        rising = [x for x in exp["sizes"] if x["size"] < exp["bandwidth_from"]][-3:]
        if rising:
            out.append("  rising: " + ", ".join(f"{format_size(x['size'])} {x['busbw']:g} GB/s ({x['share']:.0%})"
                                                for x in rising))
    why = {"wrong": " (ran wrong)", "slow": " (ran right but slow)"}.get(verdict.outcome, "")
    if verdict.status == "pass" and not verdict.gated:
        # Nothing held because nothing was asked: no PASS for a run no gate looked at (exit 0 still:
        # the run is not wrong, and nothing asked went unchecked).
        out.append("verdict: PARSED ONLY (no gate applied: add --system MODEL, --min-busbw, --max-latency-us, "
                   "--expect-transport or --baseline to judge it)")
    else:
        out.append(f"verdict: {verdict.status.upper()}{why}")
    for f in verdict.failures:
        out.append(f"  FAIL {f.message}")
    for p in verdict.passed:
        out.append(f"  ok   {p}")
    for n in verdict.notes:
        out.append(f"  note {n}")
    return "\n".join(out) + "\n"
