#!/usr/bin/env python3
"""Benchmark: time from `srun --container-image=X.sqsh true` to exit, under the real Pyxis and Enroot.

For each image, three files of the same image, started the way a cluster starts them:

- `imagekit export --to enroot` with the default preset (fast: zstd-3, 128 KiB blocks),
- `imagekit export --to enroot --preset enroot` (Enroot's own squash options: lzo, -noD),
- `enroot import dockerd://IMAGE`'s own file (the baseline of the ratios),

each with Pyxis unpacking it per job (`enroot create`, the default) and with `use_squashfuse=1`
(mounted in place). Runs are interleaved (file by file, round by round) and the median of `--runs`
is shown. It needs the cluster of scripts/setup-cluster.sh; it holds it with scripts/cluster.py
(starting it if no one does) and leaves it as it found it.

    python3 bench/srun_start.py [--image imagekit/debian-mpi:latest] [--image imagekit/debian-cuda:latest] [--runs 5]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import cluster as cluster_mod  # noqa: E402
import record  # noqa: E402


def export(image: str, out: Path, preset: str | None) -> None:
    argv = [sys.executable, "-m", "imagekit", "export", image, "--to", "enroot", "-o", str(out), "--no-store"]
    subprocess.run(argv + (["--preset", preset] if preset else []), check=True, capture_output=True)


def enroot_import(image: str, out: Path) -> None:
    subprocess.run(["enroot", "import", "-o", str(out), f"dockerd://{image}"], check=True, capture_output=True)


def gpu_env(image: str) -> dict[str, str]:
    """A CUDA image asks for GPUs; on a GPU-less node it starts with NVIDIA_VISIBLE_DEVICES=void."""
    env = json.loads(subprocess.run(["/usr/bin/docker", "image", "inspect", "--format", "{{json .Config.Env}}", image],
                                    check=True, capture_output=True, text=True).stdout) or []
    asks = any(e.startswith("NVIDIA_VISIBLE_DEVICES=") and e.split("=", 1)[1] not in ("", "void") for e in env)
    return {"NVIDIA_VISIBLE_DEVICES": "void"} if asks else {}


def start_once(cluster, sqsh: Path, extra_env: dict[str, str]) -> float:
    argv = ["srun", f"--container-image={sqsh}"]
    if extra_env:
        argv.append("--container-env=" + ",".join(extra_env))
    with record.timer() as t:
        proc = subprocess.run(argv + ["true"], env={**cluster.env, **extra_env}, capture_output=True, text=True,
                              cwd="/tmp")
    if proc.returncode != 0:
        raise SystemExit(f"srun failed for {sqsh}:\n{proc.stderr[-2000:]}")
    return t.wall


def main() -> int:
    ap = record.parser(__doc__)
    ap.add_argument("--image", action="append", help="engine image (repeatable; default imagekit/debian-mpi:latest)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workdir", default="/var/tmp", help="where the three files are written")
    args = ap.parse_args()
    run = record.start("srun_start", args)
    images = args.image or ["imagekit/debian-mpi:latest"]
    results: dict[str, dict] = {}
    cluster = cluster_mod.Cluster().hold()
    work = Path(tempfile.mkdtemp(prefix="bench-srun-", dir=args.workdir))
    os.chmod(work, 0o755)
    try:
        for image in images:
            files = {"imagekit (default preset)": work / "fast.sqsh", "imagekit --preset enroot": work / "enroot.sqsh",
                     "enroot import dockerd://": work / "import.sqsh"}
            export(image, files["imagekit (default preset)"], None)
            export(image, files["imagekit --preset enroot"], "enroot")
            enroot_import(image, files["enroot import dockerd://"])
            env = gpu_env(image)
            print(f"\n{image}  ({args.runs} runs each, interleaved; median s; ratio = baseline / row)")
            print(f"{'file':<28} {'MB':>7} {'unpacked':>9} {'ratio':>6} {'squashfuse':>11} {'ratio':>6}")
            rows = {}
            for squashfuse in (False, True):
                cluster.pyxis(squashfuse=squashfuse)
                times: dict[str, list[float]] = {name: [] for name in files}
                start_once(cluster, files["imagekit (default preset)"], env)  # warm caches once
                for _ in range(args.runs):
                    for name, path in files.items():
                        times[name].append(start_once(cluster, path, env))
                for name in files:
                    rows.setdefault(name, {})[squashfuse] = statistics.median(times[name])
            cluster.pyxis()
            base = rows["enroot import dockerd://"]
            for name, path in files.items():
                r = rows[name]
                print(f"{name:<28} {path.stat().st_size / 1e6:7.0f} {r[False]:9.2f} {base[False] / r[False]:6.2f} "
                      f"{r[True]:11.2f} {base[True] / r[True]:6.2f}")
            results[image] = {name: {"bytes": path.stat().st_size, "unpacked_median_s": round(rows[name][False], 3),
                                     "squashfuse_median_s": round(rows[name][True], 3)}
                              for name, path in files.items()}
            for path in files.values():
                path.unlink()
    finally:
        cluster.pyxis()
        shutil.rmtree(work, ignore_errors=True)
        cluster.release()
    run.finish({"runs": args.runs, "baseline": "enroot import dockerd://", "images": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
