"""The verdict: a parsed run judged against its gates (floors, latency, the system's band, transports,
the image's NCCL, stragglers, repeat runs). Exit codes: 0 pass, 1 ran right but slow, 9 ran wrong."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Optional

from imagekit.sizes import format_size
from imagekit.validate import summary
from imagekit.validate.baseline import Limits, bench_key
from imagekit.validate.expect import NotModeled, RunShape, expect, expected_transports, forbidden_transports
from imagekit.validate.gates import Gates
from imagekit.validate.model import Failure, MpiBenchRun, NcclTestsRun, Result, Verdict
from imagekit.validate.nccl_log import algorithm_for, canonical
from imagekit.validate.stragglers import find_spikes, find_stragglers

if TYPE_CHECKING:
    from imagekit.validate.system import System


def _fmt(v: float) -> str:
    """Two decimals for readable figures, but never round a small limit away (0.001 stays 0.001)."""
    if v != v:
        return "nan"
    text = f"{v:.2f}".rstrip("0").rstrip(".")
    return text if (text not in ("0", "-0") or v == 0) else f"{v:.3g}"


class _Judge:
    def __init__(self, gates: Gates) -> None:
        self.gates = gates
        self.small = gates.effective_small_size
        self.fraction = gates.effective_saturation
        self.verdict = Verdict(status="pass")
        self.unreadable: list[str] = []
        self.applied: set[str] = set()
        self.model_transports: list[str] = []
        self.model_forbidden: list[str] = []
        self.result = Result()
        self.peaks: dict[tuple, list[tuple[str, float]]] = {}  # (collective, nodes, ranks/node) -> (label, busbw)

    def fail(self, check: str, message: str, **kw: Any) -> None:
        self.verdict.failures.append(Failure(check, message, **kw))

    def ok(self, message: str) -> None:
        self.verdict.passed.append(message)

    def limit_sets(self, label: str, key: Optional[str]) -> list[tuple[str, Limits]]:
        g, base = self.gates, self.gates.baseline
        sets = []
        if g.min_busbw is not None or g.max_latency_us is not None:
            sets.append(("", Limits(g.min_busbw, g.max_latency_us)))
        if base is not None:
            if not base.defaults.empty:
                sets.append(("baseline ", base.defaults))
            if base.benchmarks:
                if key is None:
                    if len(base.benchmarks) == 1:
                        only = next(iter(base.benchmarks))
                        self.verdict.notes.append(f"{label}: collective unknown; applied the only baseline entry "
                                                  f"'{only}'")
                        sets.append((f"baseline {only} ", base.benchmarks[only]))
                    else:
                        self.fail("baseline", f"{label}: cannot tell which collective this is, so the baseline "
                                  "entries cannot be matched; pass --collective NAME", run=label)
                elif key in base.benchmarks:
                    sets.append((f"baseline {key} ", base.benchmarks[key]))
                else:
                    self.verdict.notes.append(f"{label}: no baseline entry for '{key}'")
        return sets

    # nccl-tests ------------------------------------------------------------------------------
    def nccl_run(self, idx: int, run: NcclTestsRun) -> None:
        name = run.collective or self.gates.collective
        label = f"{name or 'nccl-tests'} (run {idx + 1}, line {run.line})"
        if run.garbled:
            self.unreadable.append(f"{label}: corrupted table: {run.garbled[0]}")
            return
        if not run.rows:
            # Nothing to judge: a header whose run died before its first size, or a stray header.
            self.unreadable.append(f"{label}: nccl-tests header but no result rows"
                                   + (f" ({run.truncation[0]})" if run.truncation else ""))
            return
        for why in run.truncation:
            self.fail("truncated", f"{label}: truncated: {why}", run=label)
        if run.out_of_bounds:
            self.fail("out_of_bounds", f"{label}: {run.out_of_bounds} out-of-bounds values reported",
                      run=label, value=float(run.out_of_bounds), limit=0.0)
        bad = 0
        for row in run.rows:
            for fig, m in row.named_halves():
                if (m.wrong is not None and m.wrong > 0 and "error" not in run.columns) or m.flagged:
                    bad += 1
                    what = f"#wrong {m.wrong:g}" if not m.flagged else f"error {m.wrong:g} (flagged *)"
                    self.fail("errors", f"{label}: {what} ({fig}) at {format_size(row.size)} {row.dtype} {row.redop}",
                              run=label, size=row.size, figure=fig, value=m.wrong, limit=0.0)
        if not bad:
            checked = any(m.wrong is not None for r in run.rows for m in r.halves())
            self.ok(f"{label}: no wrong elements" + ("" if checked else " (data check off: #wrong N/A)"))
        for prefix, lim in self.limit_sets(label, bench_key(name) if name else None):
            self.nccl_limits(label, run, prefix, lim)
        for err in run.errors[:3]:
            self.verdict.notes.append(f"{label}: nccl-tests reported: {err}")
        if self.gates.system is not None:
            self.system_run(label, run, name)
        else:
            self.record_peaks(label, run, name, min_size=0)
        self.stragglers(label, run)

    # --system --------------------------------------------------------------------------------
    def system_run(self, label: str, run: NcclTestsRun, name: Optional[str]) -> None:
        s = self.gates.system
        assert s is not None
        if not name:
            self.fail("data", f"{label}: the output does not name the collective, so no expectation can be "
                      "derived; pass --collective NAME", run=label)
            return
        shape = self.run_shape(label, run, s)
        if shape is None:
            return
        nodes, rpn = shape
        for gpu in run.gpus:
            if s.gpu_model.lower() not in gpu.lower():
                self.fail("system", f"{label}: ran on {gpu!r}, and system {s.name} has {s.gpu_model} GPUs "
                          f"({s.file})", run=label)
                return
        if rpn > s.gpus_per_node:
            self.fail("system", f"{label}: {rpn} ranks on one node, and system {s.name} has {s.gpus_per_node} GPUs "
                      "per node", run=label)
            return
        algo, algo_from = algorithm_for(self.result.transport, name)
        try:
            exp = expect(s, RunShape(nodes, rpn, name, algo, algo_from))
        except NotModeled as exc:
            self.fail("data", f"{label}: no expectation from system {s.name}: {exc}", run=label)
            return
        self.model_transports += [t for t in expected_transports(s, nodes) if t not in self.model_transports]
        self.model_forbidden += [t for t in forbidden_transports(s, nodes) if t not in self.model_forbidden]
        rows = [r for r in run.rows if r.size >= exp.bandwidth_from]
        record = {"run": label, **exp.to_dict(), "sizes": [
            {"size": r.size, "busbw": r.busbw(), "share": round(r.busbw() / exp.expected, 4)}
            for r in run.rows if r.size >= (1 << 20)]}
        self.verdict.expectations.append(record)
        if not rows:
            top = max(r.size for r in run.rows)
            self.fail("data", f"{label}: the largest size is {format_size(top)}, and the band of {s.name} starts at "
                      f"{format_size(exp.bandwidth_from)}: no data to judge; rerun up to it (e.g. -e 8G)",
                      run=label, size=top)
            return
        self.applied.add("busbw")
        best_row = max(rows, key=lambda r: r.busbw())
        best = best_row.busbw()
        record["best_busbw"], record["share"] = best, round(best / exp.expected, 4)
        what = (f"{nodes} x {rpn} {s.gpu_model}" + (f" with {s.nics_per_node} x {s.nic_kind}" if nodes > 1 else "")
                + f" ({s.name})")
        share = f"{best / exp.expected:.0%} of what {what} should reach"
        bound = f"{exp.bound.name}-bound: {exp.bound.why}"
        if best < exp.low:
            self.fail("band", f"{label}: {share}: best busbw {_fmt(best)} GB/s at {format_size(best_row.size)} is "
                      f"below the band {_fmt(exp.low)} .. {_fmt(exp.high)} GB/s around {_fmt(exp.expected)} "
                      f"({exp.algorithm}, {bound})",
                      run=label, size=best_row.size, value=best, limit=exp.low)
        else:
            self.ok(f"{label}: {share}: best busbw {_fmt(best)} GB/s at {format_size(best_row.size)} within the band "
                    f"{_fmt(exp.low)} .. {_fmt(exp.high)} GB/s ({exp.algorithm}, {exp.bound.name}-bound)")
        if best > exp.high:
            faster = [c.algorithm for c in exp.candidates if c.gbs * (1 - s.tolerance) <= best <= c.gbs * (1 + s.tolerance)]
            self.verdict.notes.append(f"{label}: {_fmt(best)} GB/s is above the band"
                                      + (f"; it matches {', '.join(faster)}" if faster else
                                         f"; the model of {s.name} may undercount the system ({s.file})"))
        self.record_peaks(label, run, name, min_size=exp.bandwidth_from, key=(name, nodes, rpn))

    def run_shape(self, label: str, run: NcclTestsRun, s: "System") -> Optional[tuple[int, int]]:
        """Nodes and ranks per node: from the output's rank list, else from --nodes/--gpus-per-node."""
        given_nodes, given_rpn = self.gates.nodes, self.gates.gpus_per_node
        if run.ranks:
            per_host = Counter(r.host for r in run.ranks)
            nodes, rpn = len(per_host), max(per_host.values())
            if len(set(per_host.values())) > 1:
                self.verdict.notes.append(f"{label}: uneven ranks per node ({dict(per_host)}); judged with {rpn}")
            if (given_nodes not in (None, nodes)) or (given_rpn not in (None, rpn)):
                self.verdict.notes.append(f"{label}: the output lists {nodes} node(s) x {rpn} rank(s); "
                                          "--nodes/--gpus-per-node ignored for it")
            return nodes, rpn
        if given_nodes is None:
            self.fail("data", f"{label}: no rank list ('# Using devices'), so the nodes and GPUs per node are "
                      "unknown; give the run's full output, or --nodes N (and --gpus-per-node G)", run=label)
            return None
        rpn = given_rpn if given_rpn is not None else s.gpus_per_node
        source = "--gpus-per-node" if given_rpn is not None else f"all {s.gpus_per_node} GPUs of {s.name}"
        self.verdict.notes.append(f"{label}: no rank list in the output; judged as {given_nodes} node(s) x {rpn} "
                                  f"rank(s) (--nodes, {source})")
        return given_nodes, rpn

    def record_peaks(self, label: str, run: NcclTestsRun, name: Optional[str], min_size: int,
                     key: Optional[tuple] = None) -> None:
        """Best busbw of each cycle (nccl-tests -N repeats the sizes) for the repeatability check."""
        if key is None:
            per_host = Counter(r.host for r in run.ranks)
            key = (name or "?", len(per_host), max(per_host.values(), default=0))
        cycles: list[list] = [[]]
        for row in run.rows:
            if cycles[-1] and row.size <= cycles[-1][-1].size and row.dtype == cycles[-1][-1].dtype:
                cycles.append([])
            cycles[-1].append(row)
        for i, rows in enumerate(cycles):
            big = [r.busbw() for r in rows if r.size >= min_size]
            if big:
                tag = label if len(cycles) == 1 else f"{label} cycle {i + 1}"
                self.peaks.setdefault(key, []).append((tag, max(big)))

    def repeatability(self) -> None:
        tol = self.gates.system.tolerance if self.gates.system else 0.10
        for (name, nodes, rpn), peaks in self.peaks.items():
            if len(peaks) < 2:
                continue
            vals = [v for _, v in peaks]
            hi, lo = max(vals), min(vals)
            spread = (hi - lo) / hi if hi > 0 else 0.0
            what = f"{name} on {nodes} node(s) x {rpn}: {len(vals)} runs, best busbw {_fmt(lo)} .. {_fmt(hi)} GB/s"
            if spread > tol and self.gates.bandwidth_gated:
                worst = min(peaks, key=lambda p: p[1])[0]
                self.fail("spread", f"not repeatable: {what} (spread {spread:.0%} > {tol:.0%}; lowest: {worst})",
                          value=spread, limit=tol)
            elif spread > tol:
                self.verdict.notes.append(f"not repeatable: {what} (spread {spread:.0%})")
            else:
                self.ok(f"repeatable: {what} (spread {spread:.0%} <= {tol:.0%})")
        want = self.gates.min_runs
        if want:
            counts = {k: len(v) for k, v in self.peaks.items()}
            if not counts:
                self.fail("data", f"--min-runs {want}: no nccl-tests run with bandwidth figures in the input")
            for (name, nodes, rpn), n in counts.items():
                if n < want:
                    self.fail("data", f"--min-runs {want}: {name} on {nodes} node(s) x {rpn} ran {n} time(s); a "
                              "single run cannot show that the result repeats")

    def stragglers(self, label: str, run: NcclTestsRun) -> None:
        min_size = self.gates.system.bandwidth_from if self.gates.system else (1 << 20)
        for s in find_stragglers(run, min_size, self.gates.straggler_threshold):
            sizes = f"{format_size(min(s.sizes))} .. {format_size(max(s.sizes))}"
            self.fail("straggler", f"{label}: {s.who} is the straggler: its time is {s.ratio - 1:.0%} above a "
                      f"healthy process's at {sizes} (threshold {self.gates.straggler_threshold:.0%})",
                      run=label, value=s.ratio, limit=1 + self.gates.straggler_threshold)
        for line in find_spikes(run, self.gates.spike_factor):
            self.verdict.notes.append(f"{label}: {line}")

    def nccl_limits(self, label: str, run: NcclTestsRun, prefix: str, lim: Limits) -> None:
        if lim.min_busbw is not None:
            self.applied.add("busbw")
            top = summary.peak(run)
            assert top is not None
            if top.busbw < lim.min_busbw:
                self.fail("busbw", f"{label}: peak busbw {_fmt(top.busbw)} GB/s ({top.figure} at "
                          f"{format_size(top.size)}) < {prefix}min {_fmt(lim.min_busbw)} GB/s",
                          run=label, size=top.size, figure=top.figure, value=top.busbw, limit=lim.min_busbw)
            else:
                self.ok(f"{label}: peak busbw {_fmt(top.busbw)} GB/s >= {prefix}min {_fmt(lim.min_busbw)} GB/s")
        if lim.max_latency_us is not None:
            self.applied.add("latency")
            rows = summary.small_rows(run, self.small)
            worst = 0.0
            for row in rows:
                for fig, m in row.named_halves():
                    worst = max(worst, m.time_us)
                    if m.time_us > lim.max_latency_us:
                        self.fail("latency", f"{label}: time {_fmt(m.time_us)} us ({fig}) at "
                                  f"{format_size(row.size)} > {prefix}max {_fmt(lim.max_latency_us)} us",
                                  run=label, size=row.size, figure=fig, value=m.time_us, limit=lim.max_latency_us)
            if rows and worst <= lim.max_latency_us:
                self.ok(f"{label}: small-size time <= {_fmt(worst)} us <= {prefix}max {_fmt(lim.max_latency_us)} us")
        for size, slim in sorted(lim.sizes.items()):
            rows = [r for r in run.rows if r.size == size]
            if not rows:
                self.fail("baseline", f"{label}: {prefix}size {format_size(size)} not in the run "
                          f"(sizes {format_size(run.rows[0].size)}..{format_size(run.rows[-1].size)})",
                          run=label, size=size)
                continue
            for row in rows:
                for fig, m in row.named_halves():
                    if slim.min_busbw is not None and m.busbw < slim.min_busbw:
                        self.fail("busbw", f"{label}: busbw {_fmt(m.busbw)} GB/s ({fig}) at {format_size(size)} < "
                                  f"{prefix}min {_fmt(slim.min_busbw)} GB/s",
                                  run=label, size=size, figure=fig, value=m.busbw, limit=slim.min_busbw)
                    if slim.max_latency_us is not None and m.time_us > slim.max_latency_us:
                        self.fail("latency", f"{label}: time {_fmt(m.time_us)} us ({fig}) at {format_size(size)} > "
                                  f"{prefix}max {_fmt(slim.max_latency_us)} us",
                                  run=label, size=size, figure=fig, value=m.time_us, limit=slim.max_latency_us)

    # MPI benchmarks --------------------------------------------------------------------------
    def mpi_run(self, idx: int, run: MpiBenchRun) -> None:
        label = f"{run.benchmark} (line {run.line})"
        for why in run.truncation:
            self.fail("truncated", f"{label}: truncated: {why}", run=label)
        if not run.points:
            return
        for prefix, lim in self.limit_sets(label, bench_key(run.benchmark)):
            if lim.min_busbw is not None and (top := summary.mpi_peak_bw(run)) is not None:
                self.applied.add("busbw")
                gbps = (top.bandwidth_mbps or 0.0) / 1000.0
                if gbps < lim.min_busbw:
                    self.fail("busbw", f"{label}: peak bandwidth {_fmt(gbps)} GB/s at {format_size(top.size)} < "
                              f"{prefix}min {_fmt(lim.min_busbw)} GB/s",
                              run=label, size=top.size, figure="bandwidth", value=gbps, limit=lim.min_busbw)
                else:
                    self.ok(f"{label}: peak bandwidth {_fmt(gbps)} GB/s >= {prefix}min {_fmt(lim.min_busbw)} GB/s")
            if lim.max_latency_us is not None and (pts := summary.mpi_small_points(run, self.small)):
                self.applied.add("latency")
                for p in pts:
                    assert p.latency_us is not None
                    if p.latency_us > lim.max_latency_us:
                        self.fail("latency", f"{label}: latency {_fmt(p.latency_us)} us at {format_size(p.size)} > "
                                  f"{prefix}max {_fmt(lim.max_latency_us)} us",
                                  run=label, size=p.size, figure="latency", value=p.latency_us,
                                  limit=lim.max_latency_us)
                worst = max(p.latency_us or 0.0 for p in pts)
                if worst <= lim.max_latency_us:
                    self.ok(f"{label}: small-size latency <= {_fmt(worst)} us <= {prefix}max "
                            f"{_fmt(lim.max_latency_us)} us")
            for size, slim in sorted(lim.sizes.items()):
                pts = [p for p in run.points if p.size == size]
                if not pts:
                    self.fail("baseline", f"{label}: {prefix}size {format_size(size)} not in the run", run=label,
                              size=size)
                for p in pts:
                    if slim.min_busbw is not None and p.bandwidth_mbps is not None \
                            and p.bandwidth_mbps / 1000.0 < slim.min_busbw:
                        self.fail("busbw", f"{label}: bandwidth {_fmt(p.bandwidth_mbps / 1000.0)} GB/s at "
                                  f"{format_size(size)} < {prefix}min {_fmt(slim.min_busbw)} GB/s", run=label,
                                  size=size, figure="bandwidth", value=p.bandwidth_mbps / 1000.0,
                                  limit=slim.min_busbw)
                    if slim.max_latency_us is not None and p.latency_us is not None \
                            and p.latency_us > slim.max_latency_us:
                        self.fail("latency", f"{label}: latency {_fmt(p.latency_us)} us at {format_size(size)} > "
                                  f"{prefix}max {_fmt(slim.max_latency_us)} us", run=label, size=size,
                                  figure="latency", value=p.latency_us, limit=slim.max_latency_us)

    # the image's NCCL --------------------------------------------------------------------------
    def nccl_of_image(self, result: Result) -> None:
        """A run that loaded another NCCL than the image's (LD_LIBRARY_PATH, a framework's wheel) measured
        the wrong library, however fast it was."""
        want = self.gates.image_nccl
        if not want:
            return
        got = result.transport.nccl_version
        if got is None:
            self.fail("image", f"cannot check that the run used {self.gates.image}'s NCCL {want}: no "
                      "'NCCL version' line in the input", figure="nccl")
            self.verdict.notes.append("rerun with NCCL_DEBUG=INFO and keep stdout")
        elif got.split("+")[0] != want.split("+")[0].split("-")[0]:
            self.fail("image", f"the run loaded NCCL {got}, and {self.gates.image} records NCCL {want}: another "
                      "NCCL came first on the loader path (LD_LIBRARY_PATH, a framework's bundled NCCL)",
                      figure="nccl")
        else:
            self.ok(f"the run used the image's NCCL {got}")

    # transports ------------------------------------------------------------------------------
    def transports(self, result: Result) -> None:
        asked = list(self.gates.expect_transport)
        if self.gates.baseline:
            asked += [t for t in self.gates.baseline.expect_transport if t not in asked]
        expected = asked + [t for t in self.model_transports if t not in asked]
        if not expected:
            return
        info = result.transport
        if not info.vias:
            why = ("no NCCL_DEBUG=INFO lines in the input" if not info.info_lines
                   else "NCCL INFO lines but no 'Channel ... via ...' connection lines")
            rerun = "rerun with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET is enough) and keep stdout"
            if asked:
                # Asked for by name (--expect-transport, the baseline): a gate never passes on missing data.
                self.fail("transport", f"cannot check transport {', '.join(asked)}: {why}", figure="transport")
                self.verdict.notes.append(rerun)
            else:
                # Only the system model implies it: the output did not log it, which is not a wrong run.
                self.verdict.notes.append(f"transport not checked: {why}; system {self.gates.system.name} needs "
                                          f"{', '.join(expected)} ({rerun}, or --expect-transport to require it)")
            return
        seen = ", ".join(f"{t} ({info.counts[t]})" for t in info.transports)
        for name in self.model_forbidden:
            if info.counts.get(name):
                self.fail("transport", f"{info.counts[name]} channel connections went over {name} between nodes of "
                          f"one NVLink domain ({self.gates.system.name}): multi-node NVLink did not come up; check "
                          "the IMEX daemon and channel (`imagekit preflight`), NCCL_MNNVL_ENABLE=1 and "
                          "NVIDIA_IMEX_CHANNELS in the containers (`imagekit launch slurm --profile nvl72`)",
                          figure="transport", value=float(info.counts[name]))
        for want in expected:
            name = canonical(want) or want
            if name == "NET:Libfabric":  # the Libfabric net plugin: "NET/Libfabric" or "NET/AWS Libfabric"
                name = next((t for t in info.counts if t.startswith("NET:") and "Libfabric" in t), name)
            if name not in info.counts:
                self.fail("transport", f"expected transport {name} not used; channels via: {seen}",
                          figure="transport")
                continue
            self.ok(f"transport {name} used on {info.counts[name]} channel connections")
            if name in ("IB", "GDRDMA") and "Socket" in info.counts:
                self.fail("transport", f"{info.counts['Socket']} channel connections fell back to NET/Socket "
                          f"while {name} is expected", figure="transport", value=float(info.counts["Socket"]))
            if name == "GDRDMA":
                plain = sum(n for via, n in info.vias.items()
                            if via.upper().startswith("NET/IB") and "GDR" not in via.upper())
                if plain:
                    self.fail("transport", f"{plain} NET/IB channel connections without GDRDMA "
                              "(GPUDirect RDMA off for them)", figure="transport", value=float(plain))


def evaluate(result: Result, gates: Optional[Gates] = None) -> Verdict:
    """Judge a parsed result against the gates. Status: pass | fail | unreadable."""
    gates = gates or Gates()
    judge = _Judge(gates)
    judge.result = result
    v = judge.verdict
    if not result.has_tables and not result.transport.info_lines:
        v.status = "unreadable"
        v.failures.append(Failure("input", "no nccl-tests table, MPI benchmark table or NCCL log lines found "
                                  f"in {result.source}"))
        return v
    for i, run in enumerate(result.nccl_tests):
        judge.nccl_run(i, run)
    for i, mrun in enumerate(result.mpi):
        judge.mpi_run(i, mrun)
    judge.repeatability()
    if gates.system is not None and not result.nccl_tests:
        judge.fail("data", f"--system {gates.system.name}: no nccl-tests run in {result.source} to judge")
    judge.transports(result)
    judge.nccl_of_image(result)
    base = gates.baseline
    # Explicit limits must be applied somewhere; unmatched per-benchmark baseline entries only
    # produce a note (a site baseline lists more collectives than one log holds).
    wanted = {
        "busbw": gates.min_busbw is not None or (base is not None and base.defaults.min_busbw is not None),
        "latency": gates.max_latency_us is not None or (base is not None and base.defaults.max_latency_us is not None),
    }
    if not result.has_tables and (wanted["busbw"] or wanted["latency"]):
        judge.unreadable.append(f"{result.source} has NCCL log lines but no benchmark table to check "
                                "busbw/latency against")
    else:
        for gate, want in wanted.items():
            if want and gate not in judge.applied:
                what = "bandwidth figures" if gate == "busbw" else "latency figures"
                judge.fail(gate, f"the {gate} limit could not be applied: no {what} in the input")
    if judge.unreadable:
        v.status = "unreadable"
        v.failures = [Failure("input", m) for m in judge.unreadable] + v.failures
    elif v.failures:
        v.status = "fail"
    return v
