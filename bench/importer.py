#!/usr/bin/env python3
"""Benchmark: the Pyxis importer on a cold and a warm store.

Pushes IMAGE to a local registry (Debian's docker-registry, started here), then
drives ``imagekit-pyxis-importer`` as Pyxis does (stdin /dev/null, stdout's first
line, SLURM_* and PYXIS_* in the environment):

- N concurrent ``get``s of one digest on an empty store (N job steps of one job
  on one shared store): wall time, and how many of them converted (target: 1);
- ``get`` on a warm store (a job step whose image is there): best and median of R
  runs, process start included, against the cold conversion;
- ``enroot import``'s equivalent cost is the cold conversion itself, which every
  node pays on every job without an importer.

    python bench/importer.py [--image imagekit/debian-mpi:latest] [-n 4] [-r 5]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
EXE = Path(sys.executable).parent / "imagekit-pyxis-importer"


def env_for(store: Path, step: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PYXIS_"))}
    env.update(IMAGEKIT_STORE=str(store), PYXIS_RUNTIME_PATH=str(store.parent / "run"),
               PYXIS_VERSION="0.24.0", SLURM_JOB_ID="1", SLURM_STEP_ID=str(step),
               SLURM_JOB_UID=str(os.getuid()))
    return env


def get(uri: str, env: dict[str, str]) -> tuple[float, str, str]:
    t0 = time.monotonic()
    proc = subprocess.run([str(EXE), "get", uri], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=env)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"get failed ({proc.returncode}): {proc.stderr}")
    return took, proc.stdout.split("\n", 1)[0], proc.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", default="imagekit/debian-mpi:latest")
    ap.add_argument("-n", type=int, default=4, help="concurrent gets on the cold store")
    ap.add_argument("-r", type=int, default=5, help="warm gets")
    args = ap.parse_args()
    from local_registry import running_registry

    from imagekit.export.push import push_image

    with tempfile.TemporaryDirectory(prefix="bench-importer-") as tmp, \
            running_registry(Path(tmp) / "registry") as addr:
        push_image(args.image, f"{addr}/bench/importer:1")
        uri = f"docker://{addr}#bench/importer:1"
        store = Path(tmp) / "store"
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(args.n) as pool:
            cold = list(pool.map(lambda i: get(uri, env_for(store, i)), range(args.n)))
        cold_wall = time.monotonic() - t0
        conversions = sum(log.count("converted and stored") for _, _, log in cold)
        warm = [get(uri, env_for(store, 100 + i))[0] for i in range(args.r)]
        for i in list(range(args.n)) + [100 + i for i in range(args.r)]:
            subprocess.run([str(EXE), "release"], env=env_for(store, i), check=True,
                           stdin=subprocess.DEVNULL)
    print(f"| image | {args.image} |\n|---|---|")
    print(f"| {args.n} concurrent cold gets | {cold_wall:.2f} s wall, {conversions} conversion(s) |")
    print(f"| warm get (best / median of {args.r}) | {min(warm):.3f} s / {statistics.median(warm):.3f} s |")
    print(f"| cold / warm (median) | {cold_wall / statistics.median(warm):.0f}x |")


if __name__ == "__main__":
    main()
