#!/usr/bin/env python3
"""Benchmark: start-up of `imagekit --help` and `imagekit render debian-mpi`, in subprocesses.

Reports, per command, the median over N runs of the wall time and of the child's CPU time
(user + system; load on a shared machine moves it less than the wall time), and which heavy
libraries the process imported (`-X importtime` is not used: it slows the run it measures).

Run it before and after a change that moves imports, on the same machine:

    python bench/startup.py [--runs 15] [--json] [--src OTHER_CHECKOUT/src]

``--src`` runs another checkout's code with this interpreter (e.g. main's, for a before/after
on the same machine in the same minute).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import record

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("hpccm", "yaml", "docker", "testinfra", "spython", "requests")

COMMANDS: dict[str, list[str]] = {
    "imagekit --help": ["--help"],
    "imagekit render debian-mpi": ["render", "debian-mpi"],
}


ENV = dict(os.environ)


def _argv(args: list[str]) -> list[str]:
    return [sys.executable, "-c", "import sys; from imagekit.cli import main; "
            "sys.argv[0] = 'imagekit'; main(prog_name='imagekit')", *args]


def _loaded(args: list[str]) -> list[str]:
    """The heavy libraries a run of the command has in sys.modules when it exits."""
    probe = ("import atexit, sys\n"
             f"atexit.register(lambda: print(','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr))\n"
             "from imagekit.cli import main\n"
             "main(prog_name='imagekit')\n")
    proc = subprocess.run([sys.executable, "-c", probe, *args], cwd=REPO, capture_output=True, text=True, env=ENV)
    last = proc.stderr.strip().splitlines()[-1:] or [""]
    return [m for m in last[0].split(",") if m]


def measure(args: list[str], runs: int) -> dict:
    walls, cpus = [], []
    for _ in range(runs):
        with record.timer() as t:
            subprocess.run(_argv(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                           cwd=REPO, env=ENV)
        walls.append(t.wall)
        cpus.append(t.children_cpu)
    return {"wall_median_s": round(statistics.median(walls), 4),
            "cpu_median_s": round(statistics.median(cpus), 4),
            "wall_min_s": round(min(walls), 4),
            "heavy_imported": _loaded(args)}


def main() -> None:
    parser = record.parser(__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--src", type=Path, help="a src/ directory to run instead of the installed imagekit")
    opts = parser.parse_args()
    run = record.start("startup", opts)
    if opts.src:
        ENV["PYTHONPATH"] = str(opts.src.resolve())
    # one untimed run each first, so that .pyc files exist and the page cache is warm
    for args in COMMANDS.values():
        subprocess.run(_argv(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=ENV)
    results = {name: measure(args, opts.runs) for name, args in COMMANDS.items()}
    print(f"median of {opts.runs} runs (wall / child CPU), heavy libraries loaded:")
    for name, r in results.items():
        print(f"  {name:30} {r['wall_median_s']:.3f} s / {r['cpu_median_s']:.3f} s   "
              f"[{', '.join(r['heavy_imported']) or 'none'}]")
    run.finish({"runs": opts.runs, "src": str(opts.src.resolve()) if opts.src else None, "results": results})


if __name__ == "__main__":
    main()
