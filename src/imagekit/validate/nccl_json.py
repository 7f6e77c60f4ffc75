"""nccl-tests' JSON output (``-J FILE.json``), file format versions 1 to 3.

Layout (nccl-tests src/util.cu, written as the run goes, on one line)::

    {"version": 3, "start_time": ..., "args": [argv...], "env": [...], "nccl_version": 22703,
     "config": {"nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "step_factor"|"step_bytes",
                "warmup_iters", "iterations", ..., "per_iter_timing" (v2+), "per_iter_skip" (v3),
                "devices": [{"rank", "group", "pid", "hostname", "device", "device_hex", "device_info"}]},
     "results": [{"size", "count", "type", "redop", "root" (a "%6i" string),
                  "out_of_place": {"time"|"cpu_time", "alg_bw", "bus_bw", "nwrong" (null: no check)},
                  "out_of_place_per_iter": {...} (v2+, -I), "in_place": {...}, "in_place_per_iter": {...},
                  "actual_iterations", "experiment_name"}],
     "out_of_bounds": {"count", "okay"}, "average_bus_bandwidth": {"bandwidth", "okay"},
     "errors": [...], "end_time": ...}

Version 1 (nccl-tests 2.17.3-2.19.1; 2.17.3-2.17.8 spell the average
"average_bus_bandwidith"/"bandwidith"), 2 (2.19.2-2.19.5: per-iteration objects
with min/max/avg/p50/p95/p99/stdev/cv and ``times_us``, ``per_process_max_times_us``
with one row per MPI process), 3 (2.19.6: ``skipped_iterations``, ``per_iter_skip``).
Doubles are printed with ``%lf``; NaN is the string "nan". A run that was killed
leaves the file cut off: it is read up to its last complete value and reported
as truncated.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from imagekit.util.errors import StackError
from imagekit.validate.model import IterStats, Measurement, NcclTestsRun, RankInfo, Row
from imagekit.validate.nccl_tests import collective_name, expected_steps

KNOWN_VERSIONS = {1: "nccl-tests 2.17.3 to 2.19.1", 2: "nccl-tests 2.19.2 to 2.19.5", 3: "nccl-tests 2.19.6"}


def looks_like_json(text: str) -> bool:
    return text.lstrip().startswith("{")


def _line_of(text: str, key: str) -> int:
    m = re.search(r'"' + re.escape(key) + r'"\s*:', text)
    return text.count("\n", 0, m.start()) + 1 if m else 1


def _salvage(text: str) -> Optional[Any]:
    """The longest prefix of a cut-off JSON document that parses once its open brackets are closed."""
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []  # (cut position, closers needed there)
    in_str = esc = False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
            cuts.append((i + 1, "".join(reversed(stack))))
        elif ch in "]}":
            if stack:
                stack.pop()
            cuts.append((i + 1, "".join(reversed(stack))))
        elif ch == ",":
            cuts.append((i, "".join(reversed(stack))))
    for pos, closers in reversed(cuts[-200:]):
        try:
            return json.loads(text[:pos] + closers)
        except json.JSONDecodeError:
            continue
    return None


def _num(value: Any) -> float:
    if isinstance(value, str) and value.strip().lower() == "nan":
        return float("nan")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def _half(obj: Any, per_iter: Any) -> Optional[Measurement]:
    if not isinstance(obj, dict):
        return None
    time_us = obj.get("time", obj.get("cpu_time"))
    wrong = obj.get("nwrong")
    m = Measurement(_num(time_us), _num(obj.get("alg_bw")), _num(obj.get("bus_bw")),
                    None if wrong is None else _num(wrong))
    if isinstance(per_iter, dict):
        m.iters = IterStats(
            min_us=_num(per_iter.get("min_us")), max_us=_num(per_iter.get("max_us")),
            p99_us=_num(per_iter.get("p99_us")), cv_pct=_num(per_iter.get("cv_pct")),
            avg_us=_num(per_iter["avg_us"]) if "avg_us" in per_iter else None,
            skipped=int(per_iter.get("skipped_iterations") or 0),
            times_us=[_num(t) for t in per_iter.get("times_us") or []],
            per_process_us=[[_num(t) for t in row] for row in per_iter.get("per_process_max_times_us") or []])
    return m


def _nccl_version(code: Any) -> Optional[str]:
    """NCCL_VERSION_CODE 22703 -> "2.27.3" (codes below 10000 are the old 1000-based scheme)."""
    if not isinstance(code, int) or isinstance(code, bool) or code <= 0:
        return None
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def parse_json(text: str, source: str = "-") -> NcclTestsRun:
    """One nccl-tests -J file -> NcclTestsRun. StackError (exit 2) for JSON that is not nccl-tests',
    or comes from an nccl-tests version this reader does not know."""
    truncation: list[str] = []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        data = _salvage(text) if exc.pos >= len(text.rstrip()) - 1 else None
        if data is None:
            raise StackError(f"invalid JSON: {exc.msg}", file=source, line=exc.lineno,
                             hint="give the file nccl-tests wrote with -J, or its text output") from None
        truncation.append("the JSON file ends before its closing brace (the job stopped while writing it)")
    if not isinstance(data, dict) or "version" not in data:
        raise StackError("JSON without nccl-tests' \"version\" key", file=source, line=1, key="version",
                         hint="give the file nccl-tests (>= 2.17.3) wrote with -J FILE.json")
    version = data["version"]
    if version not in KNOWN_VERSIONS:
        known = "; ".join(f"{v} ({what})" for v, what in KNOWN_VERSIONS.items())
        raise StackError(f"unknown nccl-tests JSON version {version!r}", file=source,
                         line=_line_of(text, "version"), key="version",
                         hint=f"imagekit reads JSON versions {known}; give the text output instead, or "
                              "update imagekit")
    run = NcclTestsRun(line=1, source=source, format="json", json_version=version)
    args = data.get("args") or []
    if args and isinstance(args[0], str):
        run.collective = collective_name(args[0])
    cfg = data.get("config") if isinstance(data.get("config"), dict) else {}
    try:
        params: dict[str, Any] = {}
        for ours, theirs in (("nThread", "nthreads"), ("nGpus", "ngpus"), ("minBytes", "minimum_bytes"),
                             ("maxBytes", "maximum_bytes"), ("warmup_iters", "warmup_iters"),
                             ("iters", "iterations"), ("agg_iters", "aggregated_iterations"),
                             ("validation", "validation"), ("graph", "graph"), ("per_iter_skip", "per_iter_skip")):
            if theirs in cfg:
                params[ours] = int(cfg[theirs])
        if "step_factor" in cfg:
            params["step"], params["stepkind"] = int(cfg["step_factor"]), "factor"
        elif "step_bytes" in cfg:
            params["step"], params["stepkind"] = int(cfg["step_bytes"]), "bytes"
        if (nv := _nccl_version(data.get("nccl_version"))):
            params["nccl_version"] = nv
        run.params = params
        for dev in cfg.get("devices") or []:
            run.ranks.append(RankInfo(int(dev["rank"]), int(dev.get("group", 0)), int(dev["pid"]),
                                      str(dev["hostname"]), int(dev["device"]), str(dev.get("device_hex", "")),
                                      str(dev.get("device_info", ""))))
        for i, res in enumerate(data.get("results") or []):
            try:
                root = int(str(res.get("root", "-1")).strip())
                oop = _half(res.get("out_of_place"), res.get("out_of_place_per_iter"))
                ip = _half(res.get("in_place"), res.get("in_place_per_iter"))
                run.rows.append(Row(int(res["size"]), int(res["count"]), str(res["type"]), str(res["redop"]), root,
                                    oop, ip))
            except (KeyError, TypeError, ValueError) as exc:
                if truncation and i == len(data["results"]) - 1:
                    truncation.append(f"last result (size {res.get('size', '?')}) incomplete")
                else:
                    run.garbled.append(f"results[{i}]: {exc}")
    except (KeyError, TypeError, ValueError) as exc:
        raise StackError(f"not nccl-tests JSON: {exc}", file=source, line=1, key="config",
                         hint="give the file nccl-tests wrote with -J FILE.json") from None
    oob = data.get("out_of_bounds")
    if isinstance(oob, dict) and isinstance(oob.get("count"), int):
        run.out_of_bounds = oob["count"]
    avg = data.get("average_bus_bandwidth", data.get("average_bus_bandwidith"))
    if isinstance(avg, dict):
        run.footer = True
        try:
            run.avg_busbw = _num(avg.get("bandwidth", avg.get("bandwidith")))
        except ValueError:
            run.avg_busbw = None
    elif not truncation:
        truncation.append("no average_bus_bandwidth: the run stopped before its footer")
    elif run.rows:
        truncation.append(f"results stop after size {run.rows[-1].size} without average_bus_bandwidth")
    run.errors = [str(e) for e in data.get("errors") or [] if str(e).strip()]
    run.expected_steps = expected_steps(run.params)
    if run.expected_steps and run.rows and not truncation:
        sizes = {(r.dtype, r.redop, r.root): 0 for r in run.rows}
        for r in run.rows:
            sizes[(r.dtype, r.redop, r.root)] += 1
        for (dtype, redop, _), n in sizes.items():
            if n < run.expected_steps:
                truncation.append(f"{n} of {run.expected_steps} sizes for {dtype} {redop}")
    run.truncation = truncation
    run.truncated = bool(truncation)
    return run
