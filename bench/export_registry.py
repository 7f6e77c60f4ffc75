#!/usr/bin/env python3
"""Benchmark: `imagekit export docker://…` (no engine) against `enroot import docker://…` and the engine path.

The images are pushed to a real local registry (Debian's docker-registry on 127.0.0.1, as the tests
start it), then, side by side and `--runs` times each (median shown):

- `enroot import docker://127.0.0.1:PORT#REPO:TAG` with `ENROOT_ALLOW_HTTP=yes` (the baseline; Enroot
  from ../shared/mirror, `bash scripts/setup-cluster.sh`), with `ENROOT_SQUASH_OPTIONS` left at its
  default (`-comp lzo -noD`);
- `imagekit export docker://127.0.0.1:PORT/REPO:TAG --to enroot --no-store --preset enroot` (the same
  squashfs options) and with the default preset;
- `imagekit export IMAGE --to enroot --no-store` from the local engine, both presets (the issue's
  "within 1.5× of the engine path").

Each run rotates which method goes first, and syncs before every command.

Wall time and the CPU time of child processes. Images: imagekit/debian-mpi:latest and
imagekit/debian-cuda:devel when present (--image to choose).

    python bench/export_registry.py [--image IMAGE ...] [--runs 3] [--workdir /var/tmp]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
DOCKER = "/usr/bin/docker"
DEFAULT_IMAGES = ("imagekit/debian-mpi:latest", "imagekit/debian-cuda:devel")


def wall_and_cpu(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """The command's wall time and its CPU time (the child's, not this process's)."""
    with record.timer() as t:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return t.wall, t.children_cpu


def main() -> int:
    ap = record.parser(__doc__)
    ap.add_argument("--image", action="append", help="image to push and convert (repeatable)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", default="/var/tmp")
    args = ap.parse_args()
    run = record.start("export_registry", args)
    from helpers.local_registry import running_registry

    from imagekit.export.layers import GZIP_TYPES

    images = args.image or [i for i in DEFAULT_IMAGES
                            if subprocess.run([DOCKER, "image", "inspect", i], capture_output=True).returncode == 0]
    enroot = shutil.which("enroot")
    imagekit = str(Path(sys.executable).parent / "imagekit")
    rows: list[tuple[str, str, float, float, float, float]] = []
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="imagekit-bench-reg-") as work:
        workdir = Path(work)
        with running_registry(workdir / "registry") as addr:
            for image in images:
                repo = "bench/" + image.split("/")[-1].split(":")[0]
                tag = image.rsplit(":", 1)[-1]
                subprocess.run([DOCKER, "tag", image, f"{addr}/{repo}:{tag}"], check=True)
                try:
                    subprocess.run([DOCKER, "push", f"{addr}/{repo}:{tag}"], check=True, capture_output=True)
                finally:   # the push needs the tag, nothing after it does (the image keeps its own name)
                    subprocess.run([DOCKER, "rmi", f"{addr}/{repo}:{tag}"], capture_output=True)
                methods: dict[str, list[str]] = {}
                env = {**os.environ, "ENROOT_ALLOW_HTTP": "yes", "ENROOT_CACHE_PATH": str(workdir / "ecache"),
                       "ENROOT_DATA_PATH": str(workdir / "edata"), "ENROOT_TEMP_PATH": str(workdir)}
                if enroot:
                    methods["enroot import docker://"] = [enroot, "import", "--output", str(workdir / "e.sqsh"),
                                                          f"docker://{addr}#{repo}:{tag}"]
                for preset in ("enroot", "fast"):
                    methods[f"imagekit docker:// --preset {preset}"] = [
                        imagekit, "export", f"docker://{addr}/{repo}:{tag}", "--to", "enroot", "--no-store",
                        "--preset", preset, "--force", "-q", "-o", str(workdir / f"r-{preset}.sqsh")]
                    methods[f"imagekit engine --preset {preset}"] = [
                        imagekit, "export", image, "--to", "enroot", "--no-store", "--preset", preset,
                        "--force", "-q", "-o", str(workdir / f"d-{preset}.sqsh")]
                times: dict[str, list[tuple[float, float]]] = {m: [] for m in methods}
                for run in range(args.runs):
                    # Each run starts with another method, and every command starts with the page cache
                    # written back: enroot import leaves ~1.5 GB of unpacked files dirty, which slowed
                    # whatever ran next by seconds.
                    order = list(methods.items())
                    order = order[run % len(order):] + order[:run % len(order)]
                    for name, cmd in order:
                        if name.startswith("enroot"):
                            (workdir / "e.sqsh").unlink(missing_ok=True)
                            shutil.rmtree(workdir / "ecache", ignore_errors=True)   # cold: no layer cache
                        os.sync()
                        times[name].append(wall_and_cpu(cmd, env))
                        print(f"  {image} run {run + 1}: {name}: {times[name][-1][0]:.1f}s", file=sys.stderr)
                base = statistics.median(t[0] for t in times.get("enroot import docker://", [(0, 0)]))
                base_cpu = statistics.median(t[1] for t in times.get("enroot import docker://", [(0, 0)]))
                for name, ts in times.items():
                    wall = statistics.median(t[0] for t in ts)
                    cpu = statistics.median(t[1] for t in ts)
                    rows.append((image, name, wall, cpu, base / wall if base else 0, base_cpu / cpu if base_cpu else 0))
    print(f"\n{'image':<30} {'method':<36} {'wall s':>8} {'cpu s':>8} {'x wall':>7} {'x cpu':>7}")
    for image, name, wall, cpu, xw, xc in rows:
        print(f"{image:<30} {name:<36} {wall:>8.1f} {cpu:>8.1f} {xw:>7.2f} {xc:>7.2f}")
    from imagekit.export.layers import _decompressor

    print(f"\nratios: enroot import docker:// / row, median of {args.runs} paired runs; "
          "engine rows are the same image from the local Docker engine; gzip layers inflated by "
          f"{_decompressor(sorted(GZIP_TYPES)[0])[0]}")
    run.finish({"runs": args.runs, "gzip_inflater": _decompressor(sorted(GZIP_TYPES)[0])[0],
                "rows": [{"image": image, "method": name, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                          "x_wall": round(xw, 3), "x_cpu": round(xc, 3)}
                         for image, name, wall, cpu, xw, xc in rows]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
