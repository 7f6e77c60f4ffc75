#!/usr/bin/env python3
"""Benchmark: the export store's hit path against the first export, and N concurrent exports.

In a fresh store (a temporary directory on --workdir's file system):

1. the first `imagekit export IMAGE --to enroot -o out0.sqsh` (a conversion);
2. --runs more exports of the unchanged image to new outputs, each a whole
   `imagekit export` process (interpreter start, image ID from the engine, lookup,
   hard link), and the same call in-process (`export_image`), median of the runs;
3. --concurrent exports of the image at once into another fresh store: how many
   converted (target 1) and the wall time until all had their file.

    python bench/store.py [--image IMAGE] [--runs 10] [--concurrent 4] [--workdir /var/tmp]
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

import record


def cli_export(image: str, out: Path, store: Path) -> tuple[float, dict]:
    with record.timer() as t:
        proc = subprocess.run([sys.executable, "-m", "imagekit", "export", image, "--to", "enroot",
                               "-o", str(out), "--json", "-q"], capture_output=True, text=True,
                              env=dict(os.environ, IMAGEKIT_STORE=str(store)), check=True)
    return t.wall, json.loads(proc.stdout)


def main() -> int:
    ap = record.parser(__doc__)
    ap.add_argument("--image", help="image (default: imagekit/debian-mpi:latest, else the base image)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--concurrent", type=int, default=4)
    ap.add_argument("--workdir", default="/var/tmp")
    args = ap.parse_args()
    run = record.start("store", args)

    from imagekit import base_image
    from imagekit.engines import docker as engine
    from imagekit.export import ExportRequest, export_image

    image = args.image or ("imagekit/debian-mpi:latest" if engine.image_exists("imagekit/debian-mpi:latest")
                           else base_image.ensure(base_image.BaseRequest("debian:bookworm"), log=lambda *_: None))
    work = Path(tempfile.mkdtemp(prefix="imagekit-bench-store-", dir=args.workdir))
    os.environ["IMAGEKIT_STATE"] = str(work / "state")      # keep the user's report ledger clean
    try:
        store = work / "store"
        first, doc = cli_export(image, work / "out0.sqsh", store)
        assert not doc["store_hit"]
        cli_hits, lib_hits = [], []
        for i in range(1, args.runs + 1):
            seconds, doc = cli_export(image, work / f"cli{i}.sqsh", store)
            assert doc["store_hit"], doc
            cli_hits.append(seconds)
            with record.timer() as t:
                result = export_image(image, ExportRequest("enroot"), work / f"lib{i}.sqsh", store=store)
            lib_hits.append(t.wall)
            assert result.store_hit

        store2 = work / "store2"
        env = dict(os.environ, IMAGEKIT_STORE=str(store2))
        with record.timer() as t:
            procs = [subprocess.Popen([sys.executable, "-m", "imagekit", "export", image, "--to", "enroot",
                                       "-o", str(work / f"con{i}.sqsh"), "--json", "-q"],
                                      stdout=subprocess.PIPE, text=True, env=env)
                     for i in range(args.concurrent)]
            docs = [json.loads(p.communicate()[0]) for p in procs]
        together = t.wall
        conversions = sum(not d["store_hit"] for d in docs)
        inodes = {os.stat(d["path"]).st_ino for d in docs}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    cli, lib = statistics.median(cli_hits), statistics.median(lib_hits)
    print(f"image {image} ({doc['bytes'] / (1 << 20):.0f} MiB as .sqsh, preset {doc['compression']})")
    print(f"{'first export (conversion)':42} {first:8.3f} s")
    print(f"{'re-export, imagekit export process':42} {cli:8.3f} s  median of {args.runs} "
          f"(min {min(cli_hits):.3f}, max {max(cli_hits):.3f}); {first / cli:.0f}x faster")
    print(f"{'re-export, export_image() in-process':42} {lib:8.3f} s  median of {args.runs} "
          f"(min {min(lib_hits):.3f}, max {max(lib_hits):.3f})")
    print(f"{args.concurrent} concurrent exports, fresh store: {conversions} conversion(s), "
          f"{len(inodes)} distinct file(s), {together:.1f} s until all done")
    run.finish({"image": image, "sqsh_bytes": doc["bytes"], "preset": doc["compression"], "runs": args.runs,
                "first_export_s": round(first, 3), "cli_hits_s": [round(x, 4) for x in cli_hits],
                "lib_hits_s": [round(x, 4) for x in lib_hits], "concurrent": args.concurrent,
                "concurrent_conversions": conversions, "concurrent_files": len(inodes),
                "concurrent_wall_s": round(together, 2)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
