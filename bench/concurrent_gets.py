#!/usr/bin/env python3
"""Benchmark: N concurrent cold ``imagekit-pyxis-importer get``s of one image on one store (perf-3 row 5).

N processes start at once on an empty store, each as a job step of its own with a cache of its own
(as on N nodes: no one leans on another's stamps), on the compute-node path (no Docker engine: the
image comes straight from a local registry). Measured: the wall time until every one has printed its
path, how many converted (target 1), how many waited, and each process's CPU time (from the kernel's
accounting of the finished child). The same runs with the importer of another commit
(``--baseline``, default the commit this branch started from) give the before/after pairs, taken
interleaved on the same machine under the same load.

perf-3 measured 22.6 s, 66.6 s and 255.5 s for N = 8, 32, 128 on this 2-core machine (loaded): the
growth was every waiter's full sha256 of the new file on 2 cores, and up to 2 s of polling.

    python bench/concurrent_gets.py [--image imagekit/debian-mpi:latest] [-n 8 32 128] [--baseline COMMIT]

Writes bench/results/concurrent_gets.json.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import record  # noqa: E402

BASELINE = "0dbd89e"


def run_gets(n: int, uri: str, work: Path, pythonpath: Path) -> dict:
    store = work / "store"
    procs: dict[int, int] = {}
    with record.timer() as clock:
        for i in range(n):
            env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"),
                   "IMAGEKIT_STORE": str(store), "XDG_CACHE_HOME": str(work / f"cache-{i}"),
                   "SLURM_JOB_ID": "1", "SLURM_STEP_ID": str(i), "SLURM_JOB_UID": str(os.getuid()),
                   "PYXIS_VERSION": "0.24.0", "PYTHONPATH": str(pythonpath),
                   "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
            with open(work / f"out-{i}", "wb") as out, open(work / f"err-{i}", "wb") as err:
                proc = subprocess.Popen([sys.executable, "-m", "imagekit.export.pyxis_importer", "get", uri],
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
            procs[proc.pid] = i
        spawned = clock.elapsed()
        ends: dict[int, tuple[float, float]] = {}
        while len(ends) < n:            # as they end: when, and the CPU the kernel accounted to each
            pid, status, usage = os.wait4(-1, 0)
            if pid not in procs:
                continue
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"get failed: {(work / f'err-{procs[pid]}').read_text()[-800:]}")
            ends[procs[pid]] = (clock.elapsed(), usage.ru_utime + usage.ru_stime)
    logs = {i: (work / f"err-{i}").read_text() for i in range(n)}
    paths = {(work / f"out-{i}").read_text().split("\n", 1)[0] for i in range(n)}
    converters = [i for i, log in logs.items() if "converted and stored" in log]
    cpu = sorted(c for _, c in ends.values())
    waiter_ends = [t for i, (t, _) in ends.items() if i not in converters]
    return {"n": n, "wall_s": round(max(t for t, _ in ends.values()), 2), "spawn_s": round(spawned, 2),
            "conversions": len(converters), "waited": sum("waiting for" in log for log in logs.values()),
            "paths": len(paths),
            "converter_done_s": round(ends[converters[0]][0], 2) if converters else None,
            "last_waiter_after_converter_s": round(max(waiter_ends) - ends[converters[0]][0], 2)
            if converters and waiter_ends else None,
            "cpu_s_total": round(sum(cpu), 2), "cpu_s_median": round(cpu[len(cpu) // 2], 3),
            "cpu_s_converter": round(ends[converters[0]][1], 2) if converters else None}


def main() -> None:
    ap = record.parser(__doc__)
    ap.add_argument("--image", default="imagekit/debian-mpi:latest")
    ap.add_argument("-n", type=int, nargs="+", default=[8, 32, 128])
    ap.add_argument("--baseline", default=BASELINE, help="the commit whose importer is 'before'")
    args = ap.parse_args()
    from helpers.local_registry import running_registry

    from imagekit.export.push import push_image

    run = record.start("concurrent_gets", args)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-gets-", dir="/var/tmp") as tmp, \
            running_registry(Path(tmp) / "registry") as addr:
        push_image(args.image, f"{addr}/bench/gets:1")
        uri = f"docker://{addr}#bench/gets:1"
        before = Path(tmp) / "baseline"
        before.mkdir()
        subprocess.run(f"git -C {ROOT} archive {args.baseline} src | tar -x -C {before}", shell=True, check=True)
        for n in args.n:
            for which, src in (("before", before / "src"), ("after", ROOT / "src")):
                work = Path(tempfile.mkdtemp(prefix=f"{which}-{n}-", dir=tmp))
                row = {"importer": which, **run_gets(n, uri, work, src)}
                print(row, flush=True)
                rows.append(row)
                subprocess.run(["rm", "-rf", str(work)], check=True)
    pairs = {}
    for row in rows:
        pairs.setdefault(row["n"], {})[row["importer"]] = row
    print("\n| N | wall, before / after | after / before | CPU per process (median), before / after "
          "| last waiter after the conversion ended, before / after | CPU in all, before / after | conversions |")
    print("|---|---|---|---|---|---|---|")
    for n, pair in pairs.items():
        b, a = pair["before"], pair["after"]
        print(f"| {n} | {b['wall_s']} s / {a['wall_s']} s | {a['wall_s'] / b['wall_s']:.2f} | "
              f"{b['cpu_s_median']} s / {a['cpu_s_median']} s | {b['last_waiter_after_converter_s']} s / "
              f"{a['last_waiter_after_converter_s']} s | {b['cpu_s_total']} s / {a['cpu_s_total']} s | "
              f"{b['conversions']}, {a['conversions']} |")
    run.finish({"image": args.image, "baseline": args.baseline, "rows": rows,
                "perf3_before_s": {"8": 22.6, "32": 66.6, "128": 255.5}})


if __name__ == "__main__":
    main()
