"""The per-system baseline file: limits per collective and size, read and checked with file and key.

Baseline file (YAML or JSON), every key optional::

    version: 1
    system: dgx-h100-2node          # shown in the report
    expect_transport: [IB, GDRDMA]  # each must carry at least one NCCL channel
    small_size: 1K                  # sizes <= this are "small" for latency limits
    saturation_fraction: 0.9
    min_busbw: 300                  # GB/s, peak busbw of every run
    max_latency_us: 60              # every small size of every run
    benchmarks:                     # per collective / MPI benchmark ("collectives" also accepted)
      all_reduce:                   # all_reduce_perf; names compare without "_" and "_perf"
        min_busbw: 350
        max_latency_us: 40
        sizes:                      # per size: a number is a busbw floor (GB/s) ...
          1G: 340
          8K: {max_latency_us: 30}  # ... or a mapping with min_busbw / max_latency_us
      osu_latency: {max_latency_us: 3}
      pingpong: {min_busbw: 10}     # MPI bandwidth tables: MB/s / 1000 compared as GB/s

Per-size limits apply to both out-of-place and in-place figures; a size named in
the baseline but missing from the run fails.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from imagekit.util import schema, yamlpos
from imagekit.util.errors import UsageError
from imagekit.util.sizes import parse_size
from imagekit.validate.nccl_log import canonical


@dataclass
class SizeLimit:
    min_busbw: Optional[float] = None
    max_latency_us: Optional[float] = None


@dataclass
class Limits:
    min_busbw: Optional[float] = None
    max_latency_us: Optional[float] = None
    sizes: dict[int, SizeLimit] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.min_busbw is None and self.max_latency_us is None and not self.sizes


@dataclass
class Baseline:
    path: str = ""
    system: str = ""
    defaults: Limits = field(default_factory=Limits)
    expect_transport: list[str] = field(default_factory=list)
    small_size: Optional[int] = None
    saturation_fraction: Optional[float] = None
    benchmarks: dict[str, Limits] = field(default_factory=dict)  # key: bench_key(name)


def bench_key(name: str) -> str:
    """``all_reduce_perf`` == ``all_reduce`` == ``AllReduce`` == ``allreduce``."""
    name = re.sub(r"(_perf)?(_mpi)?$", "", name.strip().lower())
    return re.sub(r"[^a-z0-9]", "", name)



_TOP_KEYS = {"version", "system", "expect_transport", "small_size", "saturation_fraction", "min_busbw",
             "max_latency_us", "benchmarks", "collectives"}
_BENCH_KEYS = {"min_busbw", "max_latency_us", "sizes"}


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _reject_unknown(data: dict, allowed: set, where: str, path: str) -> None:
    """An unknown key: file:line and a "did you mean" when the baseline came from YAML."""
    unknown = [k for k in data if k not in allowed]
    if not unknown:
        return

    err = schema.unknown_key(data, str(unknown[0]), sorted(allowed), where)
    if getattr(data, "file", None) is None:  # JSON: no positions, name the file at least
        raise UsageError(f"{path}: {where + '.' if where else ''}{unknown[0]}: unknown key", err.hint)
    raise err


def _limits(data: Any, path: str, key: str = "") -> Limits:
    where = f"{path}: {key}" if key else path
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping, got {type(data).__name__}")
    _reject_unknown(data, _BENCH_KEYS, key, path)
    lim = Limits()
    if data.get("min_busbw") is not None:
        lim.min_busbw = _number(data["min_busbw"], f"{where}.min_busbw")
    if data.get("max_latency_us") is not None:
        lim.max_latency_us = _number(data["max_latency_us"], f"{where}.max_latency_us")
    sizes = data.get("sizes") or {}
    if not isinstance(sizes, dict):
        raise UsageError(f"{where}.sizes: expected a mapping of size -> limit")
    for size_key, val in sizes.items():
        try:
            size = parse_size(size_key)
        except ValueError as exc:
            raise UsageError(f"{where}.sizes: {exc}") from None
        here = f"{where}.sizes.{size_key}"
        if isinstance(val, dict):
            _reject_unknown(val, {"min_busbw", "max_latency_us"}, f"{key + '.' if key else ''}sizes.{size_key}", path)
            lim.sizes[size] = SizeLimit(
                _number(val["min_busbw"], here) if val.get("min_busbw") is not None else None,
                _number(val["max_latency_us"], here) if val.get("max_latency_us") is not None else None)
        else:
            lim.sizes[size] = SizeLimit(min_busbw=_number(val, here))
    return lim


def baseline_from_dict(data: Any, path: str = "<baseline>") -> Baseline:
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a baseline is a mapping (see imagekit validate --help)")
    _reject_unknown(data, _TOP_KEYS, "", path)
    if data.get("version", 1) != 1:
        raise UsageError(f"{path}: unsupported baseline version {data.get('version')!r}", "use version: 1")
    base = Baseline(path=path, system=str(data.get("system") or ""))
    base.defaults = _limits({k: data[k] for k in ("min_busbw", "max_latency_us") if k in data}, path)
    expect = data.get("expect_transport") or []
    if isinstance(expect, str):
        expect = [expect]
    for name in expect:
        if canonical(str(name)) is None:
            raise UsageError(f"{path}: expect_transport: unknown transport {name!r}",
                             "use IB, GDRDMA, Socket, P2P, SHM, NVLS or CollNet")
        base.expect_transport.append(canonical(str(name)) or str(name))
    if data.get("small_size") is not None:
        try:
            base.small_size = parse_size(data["small_size"])
        except ValueError as exc:
            raise UsageError(f"{path}: small_size: {exc}") from None
    if data.get("saturation_fraction") is not None:
        frac = _number(data["saturation_fraction"], f"{path}: saturation_fraction")
        if not 0 < frac <= 1:
            raise UsageError(f"{path}: saturation_fraction must be in (0, 1], got {frac}")
        base.saturation_fraction = frac
    benches = data.get("benchmarks") or data.get("collectives") or {}
    if not isinstance(benches, dict):
        raise UsageError(f"{path}: benchmarks: expected a mapping of name -> limits")
    for name, lim in benches.items():
        base.benchmarks[bench_key(str(name))] = _limits(lim or {}, path, f"benchmarks.{name}")
    return base


def load_baseline(path: "str | Path") -> Baseline:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read baseline {p}: {exc.strerror}") from None
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{p}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    else:
        data = yamlpos.load(p)  # file:line errors, duplicate keys refused
    return baseline_from_dict(data, str(p))


