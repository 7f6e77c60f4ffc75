#!/usr/bin/env python3
"""The numbers of issue 38's closing note, from builds already made (nothing is pruned or rebuilt here):
each built stack's build time (from its logged build, with how many steps came from the cache), its
runtime and devel image sizes and their ratio (target: runtime <= 0.40 of devel), and the `imagekit
outdated` summary.

    python bench/stacks_report.py --logs build/bg/logs --times build/bg/times
    python bench/stacks_report.py --logs build/bg/logs --json

``--times`` is a file of ``NAME rc=N SECONDSs`` lines (wall time of each `imagekit build` as run, e.g. by a
script that timed them); BuildKit's per-step times come from the logs. A step BuildKit took from its cache
took no time, so a build is called cold only when none of its source-build steps was cached.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from imagekit.engines import docker as engine  # noqa: E402

STACKS = ("debian-mpi", "debian-cuda", "debian-cuda12", "debian-pytorch", "debian-efa")
_DONE = re.compile(r"^#(\d+) DONE (\d+(?:\.\d+)?)s$")
_CACHED = re.compile(r"^#(\d+) CACHED$")
_STEP = re.compile(r"^#(\d+) \[(devel|runtime) +\d+/\d+\] (.*)$")


def log_steps(log: Path) -> tuple[float, int, int]:
    """(seconds of the stage steps, steps, cached steps) of one BuildKit --progress=plain log."""
    steps, done, cached = set(), {}, set()
    for line in log.read_text(errors="replace").splitlines():
        if m := _STEP.match(line):
            steps.add(m.group(1))
        elif m := _DONE.match(line):
            done[m.group(1)] = float(m.group(2))
        elif m := _CACHED.match(line):
            cached.add(m.group(1))
    return sum(done.get(s, 0.0) for s in steps), len(steps), len(steps & cached)


def size(ref: str) -> int | None:
    out = subprocess.run([engine.docker_cli(), "image", "inspect", "-f", "{{.Size}}", ref], capture_output=True,
                         text=True)
    return int(out.stdout) if out.returncode == 0 else None


def main() -> None:
    parser = record.parser(__doc__)
    parser.add_argument("--logs", type=Path, default=Path("build/logs"))
    parser.add_argument("--times", type=Path)
    args = parser.parse_args()
    run = record.start("stacks_report", args)
    walls = {}
    if args.times and args.times.is_file():
        for line in args.times.read_text().splitlines():
            if m := re.match(r"(\S+) rc=(\d+) (\d+)s", line):
                walls[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    rows = []
    for name in STACKS:
        row = {"stack": name}
        for target in ("devel", "runtime"):
            log = args.logs / f"{name}-{target}.log"
            if log.is_file():
                secs, steps, cached = log_steps(log)
                row[target] = {"step_seconds": round(secs, 1), "steps": steps, "cached": cached}
        row["runtime_bytes"] = size(f"imagekit/{name}:latest")
        row["devel_bytes"] = size(f"imagekit/{name}:devel")
        if row["runtime_bytes"] and row["devel_bytes"]:
            row["ratio"] = round(row["runtime_bytes"] / row["devel_bytes"], 3)
        rows.append(row)
    outdated = subprocess.run([sys.executable, "-m", "imagekit", "outdated", "--json"], capture_output=True,
                              text=True, cwd=ROOT)
    lag = json.loads(outdated.stdout) if outdated.returncode == 0 else []
    print(f"{'stack':<16} {'devel steps s':>13} {'cached':>7} {'runtime steps s':>15} {'runtime MB':>10} "
          f"{'devel MB':>9} {'ratio':>6}")
    for r in rows:
        d, t = r.get("devel", {}), r.get("runtime", {})
        mb = (lambda b: f"{b / 1e6:.0f}" if b else "-")
        print(f"{r['stack']:<16} {d.get('step_seconds', '-'):>13} {str(d.get('cached', '-')) + '/' + str(d.get('steps', '-')):>7} "
              f"{t.get('step_seconds', '-'):>15} {mb(r['runtime_bytes']):>10} {mb(r['devel_bytes']):>9} "
              f"{r.get('ratio', '-'):>6}")
    for name, (rc, secs) in walls.items():
        print(f"wall {name}: {secs} s (exit {rc})")
    behind = [x for x in lag if x["behind"] == "yes"]
    print(f"\noutdated: {len(behind)} of {len(lag)} pins behind what is served")
    for x in behind:
        print(f"  {x['stack']}: {x['component']} {x['pinned']} -> {x['newest']} ({x['where']})")
    run.finish({"stacks": rows, "walls": {k: {"rc": rc, "seconds": s} for k, (rc, s) in walls.items()},
                "outdated": lag})


if __name__ == "__main__":
    main()
