"""The bench harness: one way to time, one command line, one results file per bench.

Every bench script times with :func:`timer`, builds its parser with :func:`parser` (``--json``,
``--out``), and ends with :meth:`Run.finish`, which writes ``bench/results/NAME.json``: its numbers
with the commit, the machine and its load before and after. Numbers from this 2-core machine are only
comparable with numbers taken beside them, so every result says which commit measured it, on what,
how loaded the machine was and with which command line; docs cite the file rather than retype it.

A comparison is paired: :func:`alternate` runs the sides A B A B … and :func:`paired` gives the ratio
taken pair by pair, min / median / max, with the load over the row. A ratio of medians taken at
different moments is not one of these (perf-3 P3-5, perf-4 P4-3): a headline ratio in the docs is a
paired median from a results file, and tests/test_docs.py fails one that no file backs.

    import record
    ap = record.parser(__doc__)
    args = ap.parse_args()
    run = record.start("NAME", args)
    with record.timer() as t:
        work()
    run.finish({"work_s": t.wall})
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
# What finish() puts in every document; a bench's own keys may not take these names.
METADATA = ("bench", "commit", "dirty", "when", "argv", "elapsed_s", "machine", "load")


# --- timing ---------------------------------------------------------------------------------------

def _cpu(who: int) -> float:
    ru = resource.getrusage(who)
    return ru.ru_utime + ru.ru_stime


@dataclass
class Timing:
    """One interval: wall seconds (perf_counter) and CPU seconds, user + system.

    ``children_cpu`` counts only children reaped inside the interval (the kernel accounts a child's
    CPU to its parent when it is waited for); ``self_cpu`` is this process, all of its threads.
    """

    wall: float = 0.0
    self_cpu: float = 0.0
    children_cpu: float = 0.0
    _start: float = field(default=0.0, repr=False)

    @property
    def cpu(self) -> float:
        return self.self_cpu + self.children_cpu

    def elapsed(self) -> float:
        """Seconds since the interval began, read while it runs (a timeline's points)."""
        return time.perf_counter() - self._start


@contextlib.contextmanager
def timer() -> Iterator[Timing]:
    """Time the ``with`` block; the Timing's fields are set when the block ends, also by an exception."""
    t = Timing()
    s0, c0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    t._start = time.perf_counter()
    try:
        yield t
    finally:
        t.wall = time.perf_counter() - t._start
        t.self_cpu = _cpu(resource.RUSAGE_SELF) - s0
        t.children_cpu = _cpu(resource.RUSAGE_CHILDREN) - c0


# --- pairs: A B A B ..., one ratio per pair -------------------------------------------------------

@dataclass
class Sample:
    """One timed run of one side of a pair, with the 1-minute load average around it."""

    wall: float
    cpu: float
    load_before: float
    load_after: float


def spread(values: list[float], digits: int = 4) -> dict[str, float | int]:
    """min, median and max of ``values`` (and how many): what every figure in a result carries."""
    ordered = sorted(values)
    n = len(ordered)
    mid = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return {"n": n, "min": round(ordered[0], digits), "median": round(mid, digits), "max": round(ordered[-1], digits)}


def alternate(sides: dict[str, Any], runs: int, warmup: int = 1,
              after: Any = None) -> dict[str, list[Sample]]:
    """Run each callable of ``sides`` in turn, ``runs`` rounds (A B A B …, after ``warmup`` rounds that
    are not kept), each timed by :func:`timer` with the load before and after: drift and a neighbour's
    build hit every side alike, and each round gives one pair. ``after(name)``, when given, runs after
    each side outside the timing (checking or removing what it wrote)."""
    samples: dict[str, list[Sample]] = {name: [] for name in sides}
    for round_ in range(warmup + runs):
        for name, run_side in sides.items():
            before = os.getloadavg()[0]
            with timer() as t:
                run_side()
            if round_ >= warmup:
                samples[name].append(Sample(t.wall, t.cpu, round(before, 2), round(os.getloadavg()[0], 2)))
            if after is not None:
                after(name)
    return samples


def paired(a: list[Sample], b: list[Sample], a_name: str = "a", b_name: str = "b") -> dict[str, Any]:
    """A paired row: each side's wall and CPU, and the ratio A/B taken pair by pair (``ratio``: below 1
    means A took less) with its inverse (``times``: how many times faster A is) and the difference
    (``added_ms``: what A costs over B), each as min, median and max, and the load over the row. A headline in the docs is a ``times`` or ``ratio`` median from
    here (tests/test_docs.py holds them to the results files)."""
    if len(a) != len(b) or not a:
        raise ValueError("a paired row needs the same number of runs on each side, at least one")
    row: dict[str, Any] = {"a": a_name, "b": b_name, "n": len(a)}
    for measure in ("wall", "cpu"):
        xs, ys = [getattr(s, measure) for s in a], [getattr(s, measure) for s in b]
        ratios = [x / y for x, y in zip(xs, ys) if y > 0 and x > 0]
        row[measure] = {"a_s": spread(xs, 3), "b_s": spread(ys, 3), "ratio": spread(ratios, 3),
                        "times": spread([1 / r for r in ratios], 2),
                        "added_ms": spread([(x - y) * 1000 for x, y in zip(xs, ys)], 1)}
    loads = [s.load_before for s in a + b] + [s.load_after for s in a + b]
    row["load_1m"] = {"min": min(loads), "max": max(loads)}
    return row


def describe(row: dict[str, Any], measure: str = "wall") -> str:
    """One line for people: ``A / B wall: ratio min / median / max (n), ×median, load lo–hi``."""
    r, t = row[measure]["ratio"], row[measure]["times"]
    return (f"{row['a']} / {row['b']} {measure}: {r['min']:.3f} / {r['median']:.3f} / {r['max']:.3f} ({row['n']}), "
            f"{t['median']:.2f}x, load {row['load_1m']['min']:.1f}-{row['load_1m']['max']:.1f}")


def byte_compile(*trees: Path | str) -> None:
    """Write the bytecode of every module under ``trees``, as pip's install does: a process timed with
    PYTHONDONTWRITEBYTECODE set (this machine's shells have it) would otherwise compile every imagekit
    module from source at each start, which no installed site pays."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", *map(str, trees)], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})


# --- what was measured, on what -------------------------------------------------------------------

def commit() -> tuple[str, bool]:
    """HEAD and whether tracked files differ from it (a dirty tree's numbers are not HEAD's)."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head, bool(dirty)
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def load() -> dict[str, float]:
    """The load averages and the kernel's CPU pressure (some, avg10): how busy the machine was."""
    one, five, fifteen = os.getloadavg()
    out = {"loadavg_1m": one, "loadavg_5m": five, "loadavg_15m": fifteen}
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        out["cpu_pressure_some_avg10"] = float(line.split("avg10=")[1].split()[0])
    except (OSError, IndexError, ValueError):
        pass
    return out


def machine() -> dict[str, Any]:
    """What the machine is, not its name: results from two hosts of one kind compare."""
    model, sha_ni = "", False
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                      if line.startswith("model name")), "")
        sha_ni = " sha_ni" in cpuinfo
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"cpus": os.cpu_count(), "cpu": model or platform.processor(), "sha_ni": sha_ni,
            "memory_gib": round(mem / (1 << 30), 1), "kernel": platform.release(), "arch": platform.machine(),
            "python": platform.python_version()}


def write_json(path: Path, doc: dict) -> Path:
    """Write ``doc`` to ``path`` whole or not at all: a reader (or a crash) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            # default=str: a Path or a date left in the data must not lose a long run's numbers at the end.
            fh.write(json.dumps(doc, indent=1, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)      # mkstemp's 0600 would hide a committed result from other users
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


# --- the command line and the run -----------------------------------------------------------------

def options() -> argparse.ArgumentParser:
    """The harness's options, as a parent parser (``parents=[record.options()]``)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--json", action="store_true",
                   help="print the result document on stdout (the bench's own output goes to stderr)")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="write the result document here (default: bench/results/NAME.json)")
    return p


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A bench's parser: its whole docstring, example included, is its ``--help``."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                   parents=[options()])


class Run:
    """One bench run, from :func:`start` to :meth:`finish`."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name = name
        self.path = Path(args.out) if getattr(args, "out", None) else RESULTS / f"{name}.json"
        self.argv = list(sys.argv)
        self.when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.load_before = load()
        self._t0 = time.perf_counter()
        self._stdout: int | None = None
        if getattr(args, "json", False):
            # The document must be all that stdout carries: the bench's tables and its children's
            # output (they inherit fd 1) go to stderr until finish().
            sys.stdout.flush()
            self._stdout = os.dup(1)
            os.dup2(2, 1)

    def document(self, data: dict) -> dict:
        clash = sorted(set(data) & set(METADATA))
        if clash:
            raise ValueError(f"a bench's result may not use the harness's keys: {', '.join(clash)}")
        head, dirty = commit()
        return {"bench": self.name, "commit": head, "dirty": dirty, "when": self.when, "argv": self.argv,
                "elapsed_s": round(time.perf_counter() - self._t0, 3), "machine": machine(),
                "load": {"before": self.load_before, "after": load()}, **data}

    def finish(self, data: dict) -> Path:
        """Write the result document (and print it with ``--json``); returns where it was written."""
        doc = self.document(data)
        write_json(self.path, doc)
        sys.stdout.flush()
        if self._stdout is not None:
            os.dup2(self._stdout, 1)
            os.close(self._stdout)
            self._stdout = None
            print(json.dumps(doc, indent=1, default=str), flush=True)
        print(f"wrote {self.path}", file=sys.stderr)
        return self.path


def start(name: str, args: argparse.Namespace) -> Run:
    """Begin a run: the load before it and the time it starts are taken now."""
    return Run(name, args)
