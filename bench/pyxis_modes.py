#!/usr/bin/env python3
"""Benchmark: one job step's start, `srun --container-image=… true`, in the three modes of the Pyxis-suite
tests (issue 34), against Pyxis's native import.

- ``native``: ``--container-image=REGISTRY#IMAGE``, Pyxis's own ``enroot import`` (the baseline): every
  start imports the image again (Enroot's layer cache warm after the first), squashes it and
  unpacks it;
- ``sqsh``: ``--container-image=/path.sqsh``, imagekit's export of the same engine image;
- ``importer``: ``--container-image=REGISTRY#IMAGE`` with imagekit's Pyxis importer on the plugstack
  line: its first start converts into the user's own store (reported apart), later ones are store
  hits.

The image is the suite's ``ubuntu:24.04`` stand-in (tests/helpers/pyxis_standins.py: the Debian base cut
down to one 63 MB layer), served by a local registry; Enroot needs ``ENROOT_ALLOW_HTTP`` from its
configuration for it (a drop-in while the bench runs). Starts are interleaved, mode by mode within
each round, and the median of ``--runs`` is shown with the ratio native / mode, as root and, with
``--user``, as the cluster's unprivileged user. It holds the cluster of scripts/setup-cluster.sh
with scripts/cluster.py and leaves Pyxis's line as it found it.

    python3 bench/pyxis_modes.py [--runs 5] [--user imagekit-user]
"""

from __future__ import annotations

import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

import cluster as cluster_mod  # noqa: E402
import record  # noqa: E402
from helpers.local_registry import running_registry  # noqa: E402
from helpers.pyxis_standins import build_all, push_all  # noqa: E402
from helpers.enroot_conf import allows_http  # noqa: E402
from helpers.pyxis_suite import PATH  # noqa: E402
from helpers.users import _venv  # noqa: E402

from imagekit import base_image  # noqa: E402
from imagekit.export import ExportRequest, export_image  # noqa: E402

IMAGE = "ubuntu:24.04"
MODES = ("native", "sqsh", "importer")


def importer_wrapper(work: Path) -> Path:
    """The README's site wrapper around this checkout's importer, with an interpreter every user can run."""
    src = work / "src"
    shutil.copytree(ROOT / "src" / "imagekit", src / "imagekit", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["chmod", "-R", "a+rX", str(src)], check=True)
    wrapper = work / "imagekit-importer"
    wrapper.write_text(f"#!/bin/sh\nexport PYTHONPATH={src}\nexec {_venv() / 'bin' / 'python'} "
                       '-m imagekit.export.pyxis_importer "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def start(cluster, image: str, user: str | None, cache: Path) -> float:
    env = {"PATH": PATH, "LANG": "C.UTF-8", "SLURM_CONF": str(cluster.conf), "XDG_CACHE_HOME": str(cache)}
    if user is None:
        argv = ["env", "-i", "HOME=/root", *(f"{k}={v}" for k, v in env.items())]
    else:
        home = pwd.getpwnam(user).pw_dir
        argv = ["runuser", "-u", user, "--", "env", "-i", f"HOME={home}", *(f"{k}={v}" for k, v in env.items())]
    with record.timer() as t:
        proc = subprocess.run([*argv, "srun", f"--container-image={image}", "true"], cwd="/tmp",
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"srun --container-image={image} failed:\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    return t.wall


def main() -> int:
    ap = record.parser(__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--user", help="also as this user (e.g. imagekit-user)")
    args = ap.parse_args()
    run = record.start("pyxis_modes", args)
    results: dict[str, dict] = {}
    base = base_image.ensure(base_image.BaseRequest("debian:bookworm"), log=lambda *_: None)
    tag = build_all(base)[IMAGE]
    cluster = cluster_mod.Cluster().hold()
    work = Path(tempfile.mkdtemp(prefix="bench-pyxis-modes-", dir="/var/tmp"))
    os.chmod(work, 0o755)
    try:
        with running_registry(work / "registry") as registry, allows_http():
            push_all({IMAGE: tag}, registry)
            sqsh = work / "ubuntu.sqsh"
            export_image(tag, ExportRequest("enroot"), sqsh, store=False)
            sqsh.chmod(0o644)
            wrapper = importer_wrapper(work)
            refs = {"native": f"{registry}#{IMAGE}", "sqsh": str(sqsh), "importer": f"{registry}#{IMAGE}"}
            print(f"{IMAGE} stand-in ({sqsh.stat().st_size / 1e6:.0f} MB .sqsh); {args.runs} starts per mode, "
                  f"interleaved; median s; ratio = native / mode")
            print(f"{'user':<14} {'mode':<10} {'first':>7} {'median':>7} {'ratio':>6}   runs")
            for user in [None, args.user] if args.user else [None]:
                who = user or "root"
                cache = work / f"cache-{who}"
                cache.mkdir(mode=0o700)
                if user is not None:
                    entry = pwd.getpwnam(user)
                    os.chown(cache, entry.pw_uid, entry.pw_gid)
                times: dict[str, list[float]] = {m: [] for m in MODES}
                first: dict[str, float] = {}
                for mode in MODES:        # the first start of each: layer download, the importer's conversion
                    cluster.pyxis(importer=str(wrapper) if mode == "importer" else None)
                    first[mode] = start(cluster, refs[mode], user, cache)
                for _ in range(args.runs):
                    for mode in MODES:
                        cluster.pyxis(importer=str(wrapper) if mode == "importer" else None)
                        times[mode].append(start(cluster, refs[mode], user, cache))
                cluster.pyxis()
                base_median = statistics.median(times["native"])
                for mode in MODES:
                    med = statistics.median(times[mode])
                    runs = " ".join(f"{t:.2f}" for t in sorted(times[mode]))
                    print(f"{who:<14} {mode:<10} {first[mode]:7.2f} {med:7.2f} {base_median / med:6.2f}   {runs}")
                results[who] = {mode: {"first_s": round(first[mode], 3),
                                       "median_s": round(statistics.median(times[mode]), 3),
                                       "ratio": round(base_median / statistics.median(times[mode]), 3),
                                       "runs_s": [round(x, 3) for x in times[mode]]} for mode in MODES}
            print(f"load average after: {os.getloadavg()[0]:.1f}")
            sqsh_bytes = sqsh.stat().st_size
    finally:
        cluster.pyxis()
        shutil.rmtree(work, ignore_errors=True)
        cluster.release()
    run.finish({"image": IMAGE, "sqsh_bytes": sqsh_bytes, "runs": args.runs, "by_user": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
