#!/usr/bin/env python3
"""Benchmark: the Pyxis importer on a cold and a warm store, and what verifying a hit costs.

Pushes IMAGE to a local registry (Debian's docker-registry, started here), then drives
``imagekit-pyxis-importer`` as Pyxis does (stdin /dev/null, stdout's first line, SLURM_* and
PYXIS_* in the environment):

- N concurrent ``get``s of one digest on an empty store (N job steps of one job on one shared
  store): wall time, and how many of them converted (target: 1);
- ``get`` on a warm store, verified, two ways (README "The export store: who may publish"):
  a reader's first hit of the file (its bytes hashed in full against the recorded sha256), and
  its later hits (the reader's stamp of that inode, size and mtime: one stat); best and median
  of R runs each, process start included, page cache warm as right after another job;
- with ``--srun``, a whole job step through the real Pyxis (``importer=`` and
  ``use_squashfuse=1`` on the cluster of scripts/setup-cluster.sh: no unpacking, so the importer
  is most of the step): ``srun --container-image=REGISTRY#REPO:TAG true``, warm, median of R.

``--pythonpath DIR`` runs another imagekit (e.g. ``git archive COMMIT src | tar -x -C DIR``) to
compare with an older importer.

    python bench/importer.py [--image imagekit/debian-mpi:latest] [-n 4] [-r 5] [--srun]
"""

from __future__ import annotations

import concurrent.futures
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))
EXE = Path(sys.executable).parent / "imagekit-pyxis-importer"


def env_for(store: Path, step: int, cache: Path, pythonpath: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PYXIS_"))}
    env.update(IMAGEKIT_STORE=str(store), PYXIS_RUNTIME_PATH=str(store.parent / "run"),
               PYXIS_VERSION="0.24.0", SLURM_JOB_ID="1", SLURM_STEP_ID=str(step),
               SLURM_JOB_UID=str(os.getuid()), XDG_CACHE_HOME=str(cache))
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def get(uri: str, env: dict[str, str]) -> tuple[float, str, str]:
    with record.timer() as t:
        proc = subprocess.run([str(EXE), "get", uri], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"get failed ({proc.returncode}): {proc.stderr}")
    return t.wall, proc.stdout.split("\n", 1)[0], proc.stderr


def release(env: dict[str, str]) -> None:
    subprocess.run([str(EXE), "release"], env=env, check=True, stdin=subprocess.DEVNULL, capture_output=True)


def gpu_env(image: str) -> dict[str, str]:
    """A CUDA image asks for GPUs; on a GPU-less node it starts with NVIDIA_VISIBLE_DEVICES=void."""
    from imagekit.engines import docker as engine

    env = engine.inspect(image).config.get("Env") or []
    asks = any(e.startswith("NVIDIA_VISIBLE_DEVICES=") and e.split("=", 1)[1] not in ("", "void") for e in env)
    return {"NVIDIA_VISIBLE_DEVICES": "void"} if asks else {}


def srun_steps(uri_pyxis: str, store: Path, cache: Path, runs: int, extra: dict[str, str]) -> list[float]:
    """Warm job steps through the real Pyxis with this importer and use_squashfuse=1."""
    import cluster as cluster_mod

    cluster = cluster_mod.Cluster().hold()
    wrapper = store.parent / "importer.sh"
    wrapper.write_text(f"#!/bin/sh\nexport IMAGEKIT_STORE={store} XDG_CACHE_HOME={cache}\n"
                       f"exec {EXE} \"$@\"\n")
    wrapper.chmod(0o755)
    cluster.pyxis(importer=str(wrapper), squashfuse=True)
    took = []
    try:
        argv = ["srun", f"--container-image={uri_pyxis}"] + (["--container-env=" + ",".join(extra)] if extra else [])
        for _ in range(runs + 1):          # the first one warms Pyxis's and Enroot's own caches
            with record.timer() as t:
                proc = subprocess.run(argv + ["true"], env={**cluster.env, **extra}, capture_output=True,
                                      text=True, cwd="/tmp")
            took.append(t.wall)
            if proc.returncode != 0:
                raise SystemExit(f"srun failed: {proc.stdout}{proc.stderr}")
    finally:
        cluster.pyxis()
        cluster.release()
    return took[1:]


def main() -> None:
    ap = record.parser(__doc__)
    ap.add_argument("--image", default="imagekit/debian-mpi:latest")
    ap.add_argument("-n", type=int, default=4, help="concurrent gets on the cold store")
    ap.add_argument("-r", type=int, default=5, help="warm gets of each kind")
    ap.add_argument("--pythonpath", help="run the importer from this imagekit source (an older one)")
    ap.add_argument("--srun", action="store_true", help="also warm job steps through the real Pyxis")
    args = ap.parse_args()
    run = record.start("importer", args)
    from helpers.local_registry import running_registry

    from imagekit.export.push import push_image

    with tempfile.TemporaryDirectory(prefix="bench-importer-", dir="/var/tmp") as tmp, \
            running_registry(Path(tmp) / "registry") as addr:
        push_image(args.image, f"{addr}/bench/importer:1")
        uri = f"docker://{addr}#bench/importer:1"
        store, stamps = Path(tmp) / "store", Path(tmp) / "cache"
        env = lambda step, cache=stamps: env_for(store, step, cache, args.pythonpath)  # noqa: E731
        with record.timer() as t, concurrent.futures.ThreadPoolExecutor(args.n) as pool:
            cold = list(pool.map(lambda i: get(uri, env(i, Path(tmp) / f"cold-cache-{i}")), range(args.n)))
        cold_wall = t.wall
        conversions = sum(log.count("converted and stored") for _, _, log in cold)
        path = cold[0][1]
        size = os.path.getsize(path)
        # A reader's first hit: a cache of its own, so nothing is stamped yet and the file is hashed.
        first = [get(uri, env(100 + i, Path(tmp) / f"first-{i}"))[0] for i in range(args.r)]
        get(uri, env(199))                         # the reader whose later hits follow
        later = [get(uri, env(200 + i))[0] for i in range(args.r)]
        steps = [*range(args.n), *range(100, 100 + args.r), 199, *range(200, 200 + args.r)]
        for step in steps:
            release(env(step))
        srun = srun_steps(uri[len("docker://"):], store, stamps, args.r, gpu_env(args.image)) if args.srun else []
    med = statistics.median
    print(f"| image | {args.image} (store entry {size / (1 << 20):,.0f} MiB) |\n|---|---|")
    print(f"| {args.n} concurrent cold gets | {cold_wall:.2f} s wall, {conversions} conversion(s) |")
    print(f"| warm get, reader's first hit (full sha256), best / median of {args.r} | "
          f"{min(first):.3f} s / {med(first):.3f} s |")
    print(f"| warm get, later hits (stamp), best / median of {args.r} | {min(later):.3f} s / {med(later):.3f} s |")
    print(f"| cold / warm later hit (median) | {cold_wall / med(later):.0f}x |")
    if srun:
        print(f"| warm job step, srun ... true with use_squashfuse=1, best / median of {args.r} | "
              f"{min(srun):.3f} s / {med(srun):.3f} s |")
    run.finish({"image": args.image, "entry_bytes": size, "pythonpath": args.pythonpath, "n": args.n,
                "cold_wall_s": round(cold_wall, 3), "cold_gets_s": [round(c[0], 3) for c in cold],
                "conversions": conversions, "runs": args.r, "first_hit_s": [round(x, 4) for x in first],
                "later_hit_s": [round(x, 4) for x in later], "srun_step_s": [round(x, 4) for x in srun]})


if __name__ == "__main__":
    main()
