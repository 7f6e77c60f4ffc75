#!/usr/bin/env python3
"""Benchmark: rendering every shipped stack/variant, and CLI start-up.

Measures, in one process:
  * cold pass: load + render every shipped stack and matrix variant in both
    formats, including the first import of hpccm/yaml (what one `imagekit
    render` pays), per stack and in total; target < 1 s total;
  * warm pass: the same again (what a loop over variants pays per render);
and in subprocesses:
  * `imagekit --help` start-up, best of N; target < 0.3 s;
  * baseline: plain `hpccm --recipe recipes/stack.py` for one stack (a whole
    process per render), best of N, to show the ratio of in-process rendering.

    python bench/render.py [--runs 5]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import record

REPO = Path(__file__).resolve().parents[1]
RENDER_TARGET_S = 1.0
HELP_TARGET_S = 0.3


def best_of(cmd: list[str], runs: int) -> float:
    """Best of ``runs``: the child's CPU time (user + system), which load on the machine barely moves."""
    times = []
    for _ in range(runs):
        with record.timer() as t:
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=REPO)
        times.append(t.children_cpu)
    return min(times)


def render_pass() -> tuple[list[tuple[str, str, float, int]], float]:
    rows = []
    with record.timer() as whole:
        from imagekit import render, stack

        for path in sorted((REPO / "stacks").glob("*.yaml")):
            with record.timer() as loading:
                variants = stack.load_all(path)
            for variant in variants:
                for fmt in render.FORMATS:
                    with record.timer() as t:
                        text = render.render(variant, fmt)
                    rows.append((variant.name, fmt, t.wall + loading.wall / len(variants) / 2, len(text)))
    return rows, whole.wall


def main() -> int:
    parser = record.parser(__doc__)
    parser.add_argument("--runs", type=int, default=5, help="subprocess runs (best of N)")
    args = parser.parse_args()
    run = record.start("render", args)

    cold_rows, cold_total = render_pass()
    warm_rows, warm_total = render_pass()

    print(f"{'variant':<26} {'format':<12} {'cold ms':>8} {'warm ms':>8} {'bytes':>7}")
    for (name, fmt, cold, size), (_, _, warm, _) in zip(cold_rows, warm_rows):
        print(f"{name:<26} {fmt:<12} {cold * 1000:8.1f} {warm * 1000:8.1f} {size:7d}")
    n = len(cold_rows)
    print(f"{'total (' + str(n) + ' renders)':<39} {cold_total * 1000:8.1f} {warm_total * 1000:8.1f}")
    print("  cold includes importing hpccm/yaml and loading the stack files (load time shared per variant)")

    exe = shutil.which("imagekit") or str(Path(sys.executable).with_name("imagekit"))
    help_s = best_of([exe, "--help"], args.runs)
    hpccm = shutil.which("hpccm") or str(Path(sys.executable).with_name("hpccm"))
    hpccm_s = best_of([hpccm, "--recipe", "recipes/stack.py", "--userarg", "stack=stacks/debian-mpi.yaml"],
                      args.runs)
    warm_one = next(s for name, fmt, s, _ in warm_rows if name == "debian-mpi" and fmt == "docker")

    print()
    print(f"{'measure':<44} {'value':>9} {'target':>9}  met")
    ok_render = cold_total < RENDER_TARGET_S
    ok_help = help_s < HELP_TARGET_S
    print(f"{'render all shipped variants x 2 formats (cold)':<44} {cold_total:8.3f}s {RENDER_TARGET_S:8.1f}s  "
          f"{'yes' if ok_render else 'NO'}")
    print(f"{'imagekit --help start-up, best of ' + str(args.runs):<44} {help_s:8.3f}s {HELP_TARGET_S:8.1f}s  "
          f"{'yes' if ok_help else 'NO'}")
    print(f"{'baseline: plain hpccm CLI, debian-mpi, best of ' + str(args.runs):<44} {hpccm_s:8.3f}s")
    print(f"{'in-process warm render, debian-mpi docker':<44} {warm_one:8.4f}s"
          f"   ({hpccm_s / warm_one:.0f}x faster than the hpccm process)")
    print(f"{'render budget used (cold total / target)':<44} {cold_total / RENDER_TARGET_S:8.0%}")
    print(f"{'start-up budget used (help / target)':<44} {help_s / HELP_TARGET_S:8.0%}")
    run.finish({"runs": args.runs,
                "renders": [{"variant": name, "format": fmt, "cold_s": round(cold, 5), "warm_s": round(warm, 5),
                             "bytes": size}
                            for (name, fmt, cold, size), (_, _, warm, _) in zip(cold_rows, warm_rows)],
                "cold_total_s": round(cold_total, 4), "warm_total_s": round(warm_total, 4),
                "help_cpu_best_s": round(help_s, 4), "hpccm_cpu_best_s": round(hpccm_s, 4),
                "targets": {"render_all_s": RENDER_TARGET_S, "help_s": HELP_TARGET_S},
                "met": {"render_all": ok_render, "help": ok_help}})
    return 0 if ok_render and ok_help else 1


if __name__ == "__main__":
    sys.exit(main())
