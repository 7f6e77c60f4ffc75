#!/usr/bin/env python3
"""Build benchmark for the offline stack (debian-mpi), measured side by side in one run.

Reports: cold build (build cache pruned, so apt/pip downloads are real), a
no-change rebuild, a rebuild after bumping one component's version (NCCL:
only its layer and those above rebuild), and devel vs runtime image size.
Targets (issue 3): no-change rebuild < 10 s; runtime <= 50% of devel.

    python bench/build.py            # prunes the BuildKit cache first (cold numbers)
    python bench/build.py --warm     # keep the cache (skips the cold measurement)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from imagekit import base_image, build, stack  # noqa: E402
from imagekit.engines import docker as engine  # noqa: E402

BUMP = ("2.21.5", "2.20.5")  # NCCL wheel versions: the "one component bumped" case


def variant(tmp: Path, name: str, nccl: str) -> stack.Stack:
    path = tmp / f"{name}.yaml"
    path.write_text(f"name: {name}\nextends: {ROOT / 'stacks/debian-mpi.yaml'}\n"
                    f"components:\n  nccl: {{version: \"{nccl}\"}}\n")
    return stack.load(path)


def build_once(s: stack.Stack, target: str = "runtime", logs: Path = Path("build/bench-logs")) -> build.BuildResult:
    """A build as `imagekit build` runs it: its ``seconds`` are the library's own measure of the build,
    the number a user sees, so the bench does not time it again."""
    return build.build(s, build.BuildRequest(target=target, log_dir=logs))


def main() -> None:
    parser = record.parser(__doc__)
    parser.add_argument("--warm", action="store_true", help="do not prune the build cache")
    args = parser.parse_args()
    run = record.start("build", args)
    base_image.ensure(base_image.BaseRequest("debian:bookworm"), log=lambda *_: None)
    cli = engine.docker_cli()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        s = variant(tmp, "bench-mpi", BUMP[0])
        if not args.warm:
            subprocess.run([cli, "rmi", "-f", s.image, s.image.replace(":latest", ":devel")], capture_output=True)
            subprocess.run([cli, "builder", "prune", "-af"], capture_output=True, check=True)
            cold = build_once(s)
            rows.append(("cold build (runtime)", cold.seconds, f"{cold.steps} steps, cache pruned"))
        again = build_once(s)
        rows.append(("no-change rebuild", again.seconds, f"{again.cached_steps}/{again.steps} steps cached"))
        bumped = build_once(variant(tmp, "bench-mpi", BUMP[1]))
        rows.append((f"bump nccl {BUMP[0]} -> {BUMP[1]}", bumped.seconds,
                     f"{bumped.steps - bumped.cached_steps}/{bumped.steps} steps rebuilt"))
        back = build_once(s)
        devel = build_once(s, target="devel")
        runtime_size, devel_size = back.size_bytes, devel.size_bytes
        nccl_bytes = int(subprocess.run(
            [cli, "run", "--rm", "--entrypoint", "du", s.image, "-sb", "/usr/local/nccl/lib"],
            capture_output=True, text=True, check=True).stdout.split()[0])
    print(f"{'measurement':<32} {'seconds':>8}  detail")
    for name, secs, detail in rows:
        print(f"{name:<32} {secs:>8.1f}  {detail}")
    ratio = runtime_size / devel_size
    print(f"\nimage sizes: devel {devel_size / 1e6:.0f} MB, runtime {runtime_size / 1e6:.0f} MB, "
          f"runtime/devel = {ratio:.2f} (target <= 0.50)")
    print(f"  NCCL's libnccl.so.2 ({nccl_bytes / 1e6:.0f} MB) is in both stages; without it "
          f"runtime/devel = {(runtime_size - nccl_bytes) / (devel_size - nccl_bytes):.2f}")
    nochange = next(secs for name, secs, _ in rows if name == "no-change rebuild")
    cold_s = next((secs for name, secs, _ in rows if name.startswith("cold")), None)
    if cold_s:
        print(f"no-change rebuild / cold = {nochange / cold_s:.3f}; bump rebuild / cold = "
              f"{rows[2][1] / cold_s:.2f}")
    print(f"targets: no-change rebuild < 10 s: {'met' if nochange < 10 else 'NOT met'}; "
          f"runtime <= 50% of devel: {'met' if ratio <= 0.5 else 'NOT met'}")
    run.finish({"warm": args.warm, "rows": [{"measurement": name, "seconds": secs, "detail": detail}
                                            for name, secs, detail in rows],
                "devel_bytes": devel_size, "runtime_bytes": runtime_size, "nccl_bytes": nccl_bytes})


if __name__ == "__main__":
    main()
