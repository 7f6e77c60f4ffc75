#!/usr/bin/env python3
"""Launch benchmarks: inside-out start-up overhead and MPI ping-pong, containers vs host processes.

    python3 bench/launch.py [--image TAG] [--repeat 3]

1. Start-up: containers up + every sshd answering + a trivial ``mpirun true``
   for 2 and 4 workers (target: < 10 s for 4).
2. Ping-pong between two ranks over Open MPI's TCP BTL: ranks in two inside-out
   containers (veth + bridge) vs two plain host processes (loopback), both on
   this machine; ratio = container / host (target: within 10 %). The host's
   shared-memory number is printed for context only.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from imagekit.launch import inside_out  # noqa: E402

PINGPONG = r"""
import time
from mpi4py import MPI
c = MPI.COMM_WORLD
r = c.rank
for size, iters in ((8, 5000), (1 << 20, 300)):
    buf = bytearray(size)
    for phase in ("warm", "run"):
        n = iters // 10 if phase == "warm" else iters
        c.Barrier()
        t = time.perf_counter()
        for _ in range(n):
            if r == 0:
                c.Send([buf, MPI.BYTE], 1); c.Recv([buf, MPI.BYTE], 1)
            else:
                c.Recv([buf, MPI.BYTE], 0); c.Send([buf, MPI.BYTE], 0)
        dt = time.perf_counter() - t
    if r == 0:
        half = dt / iters / 2
        print(f"PP size={size} lat_us={half * 1e6:.2f} bw_MBps={size / half / 1e6:.1f}", flush=True)
"""


def parse(text: str) -> dict[int, tuple[float, float]]:
    out = {}
    for m in re.finditer(r"PP size=(\d+) lat_us=([\d.]+) bw_MBps=([\d.]+)", text):
        out[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    if not out:
        raise SystemExit(f"no ping-pong output:\n{text}")
    return out


def startup(image: str, nodes: int, repeat: int) -> list[float]:
    totals = []
    for _ in range(repeat):
        t: dict = {}
        job = inside_out.InsideOutJob(image=image, nodes=nodes, command=["true"])
        rc = inside_out.execute(job, log=lambda m: None, timings=t)
        assert rc == 0
        totals.append((t["containers_up"], t["sshd_ready"], t["mpirun"]))
    return totals


def pingpong_containers(image: str) -> dict:
    with tempfile.TemporaryFile("w+") as out:
        job = inside_out.InsideOutJob(image=image, nodes=2, command=["python3", "-c", PINGPONG],
                                      mpirun_args=["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"])
        rc = inside_out.execute(job, log=lambda m: None, stdout=out, stderr=subprocess.STDOUT)
        out.seek(0)
        text = out.read()
    assert rc == 0, text
    return parse(text)


def pingpong_host(btl: str, iface: str | None) -> dict:
    # pml ob1: Debian's Open MPI otherwise picks UCX, which ignores the btl list (shared memory).
    # --bind-to none: the same placement the local inside-out workers get.
    cmd = ["mpirun", "-np", "2", "--host", "localhost:2", "--bind-to", "none", "--mca", "pml", "ob1",
           "--mca", "btl", btl]
    if iface:
        cmd += ["--mca", "btl_tcp_if_include", iface]
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    proc = subprocess.run(cmd + ["/usr/bin/python3", "-c", PINGPONG], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout
    return parse(proc.stdout)


def best(runs: list[dict]) -> dict:
    """Per size: lowest latency and highest bandwidth across runs (least noise on a shared 2-core box)."""
    return {s: (min(r[s][0] for r in runs), max(r[s][1] for r in runs)) for s in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", default="imagekit-test/mpi-standin:latest")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    print(f"# inside-out start-up ({args.image}, median of {args.repeat}; target < 10 s for 4 workers)")
    for nodes in (2, 4):
        runs = startup(args.image, nodes, args.repeat)
        tot = statistics.median(sum(r) for r in runs)
        up, ready, mpi = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"workers={nodes}  total={tot:.2f} s  (containers up {up:.2f} + sshd ready {ready:.2f} "
              f"+ mpirun true {mpi:.2f})  {'OK' if nodes != 4 or tot < 10 else 'OVER TARGET'}")

    print("# ping-pong over the TCP BTL, best of runs (target: container/host within 10 %)")
    # Interleaved, best of N: other jobs share this 2-core machine, and noise only ever slows a run.
    cont_runs, host_runs = [], []
    for _ in range(args.repeat):
        cont_runs.append(pingpong_containers(args.image))
        host_runs.append(pingpong_host("tcp,self", "lo"))
    cont, host = best(cont_runs), best(host_runs)
    shm = best([pingpong_host("vader,self", None)])
    for size in sorted(cont):
        cl, cb = cont[size]
        hl, hb = host[size]
        label = "8 B" if size == 8 else f"{size >> 20} MiB"
        print(f"{label:>6}: latency container {cl:7.2f} us  host {hl:7.2f} us  ratio {cl / hl:.2f} | "
              f"bandwidth container {cb:8.1f} MB/s  host {hb:8.1f} MB/s  ratio {cb / hb:.2f} | "
              f"host shm {shm[size][0]:.2f} us {shm[size][1]:.1f} MB/s")


if __name__ == "__main__":
    main()
