#!/usr/bin/env python3
"""Launch benchmarks: inside-out start-up overhead and MPI ping-pong, containers vs host processes.

    python3 bench/launch.py [--image TAG] [--repeat 3]

1. Start-up: containers up + every sshd answering + a trivial ``mpirun true``
   for 2 and 4 workers (target: < 10 s for 4).
2. Ping-pong between two ranks, containers vs plain host processes on this
   machine, ratio = container / host (target: within 10 %), for the same
   transport on each side:
   - outside-in (host mpirun, one `docker run --network=host --ipc=host` per
     rank): the container's own overhead; over TCP (loopback) and over shared
     memory (vader);
   - inside-out (mpirun inside sshd containers on a private bridge network):
     TCP over veth + bridge vs TCP over loopback. Containers on one machine
     are different "nodes" to Open MPI, so this row measures Docker's bridge
     network, which multi-node inside-out jobs replace with the host network
     or the fabric.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import record  # noqa: E402
from imagekit.launch import inside_out, mpirun, plan, targets  # noqa: E402
from imagekit.launch.session import LaunchRequest  # noqa: E402


def _job(target: str, image: str, command: list[str], **options):
    """The job `imagekit launch TARGET` composes for these options (no preflight: the bench runs it)."""
    return plan.job(targets.of(target), LaunchRequest(image, tuple(command), preflight=False, options=options))

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
        job = _job("inside-out", image, ["true"], nodes=nodes)
        rc = inside_out.execute(job, log=lambda m: None, timings=t)
        assert rc == 0
        totals.append((t["containers_up"], t["sshd_ready"], t["mpirun"]))
    return totals


def pingpong_containers(image: str) -> dict:
    with tempfile.TemporaryFile("w+") as out:
        job = _job("inside-out", image, ["python3", "-c", PINGPONG], nodes=2,
                   mpirun_args=["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"])
        rc = inside_out.execute(job, log=lambda m: None, stdout=out, stderr=subprocess.STDOUT)
        out.seek(0)
        text = out.read()
    assert rc == 0, text
    return parse(text)


def pingpong_outside_in(image: str, btl: str, iface: str | None) -> dict:
    args = ["--bind-to", "none", "--mca", "pml", "ob1", "--mca", "btl", btl]
    if iface:
        args += ["--mca", "btl_tcp_if_include", iface]
    job = _job("mpirun", image, ["python3", "-c", PINGPONG], hosts="localhost:2", mpirun_args=args)
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryFile("w+") as out:
        rc = mpirun.execute(job, Path(tmp), log=lambda m: None, stdout=out)
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
    ap = record.parser(__doc__)
    ap.add_argument("--image", default="imagekit/debian-mpi:latest")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    run = record.start("launch", args)
    started: dict[int, dict] = {}

    print(f"# inside-out start-up ({args.image}, median of {args.repeat}; target < 10 s for 4 workers)")
    for nodes in (2, 4):
        runs = startup(args.image, nodes, args.repeat)
        tot = statistics.median(sum(r) for r in runs)
        up, ready, mpi = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"workers={nodes}  total={tot:.2f} s  (containers up {up:.2f} + sshd ready {ready:.2f} "
              f"+ mpirun true {mpi:.2f})  {'OK' if nodes != 4 or tot < 10 else 'OVER TARGET'}")
        started[nodes] = {"total_s": tot, "containers_up_s": up, "sshd_ready_s": ready, "mpirun_true_s": mpi,
                          "runs": runs}

    # Interleaved, best of N: other jobs share this 2-core machine, and noise only ever slows a run.
    runs: dict[str, list] = {k: [] for k in ("oi_tcp", "oi_shm", "io_tcp", "host_tcp", "host_shm")}
    for _ in range(args.repeat):
        runs["oi_tcp"].append(pingpong_outside_in(args.image, "tcp,self", "lo"))
        runs["host_tcp"].append(pingpong_host("tcp,self", "lo"))
        runs["oi_shm"].append(pingpong_outside_in(args.image, "vader,self", None))
        runs["host_shm"].append(pingpong_host("vader,self", None))
        runs["io_tcp"].append(pingpong_containers(args.image))
    b = {k: best(v) for k, v in runs.items()}
    print("# ping-pong, best of runs; ratio = container / host (target: within 10 %)")
    rows = [("outside-in, TCP loopback", "oi_tcp", "host_tcp"), ("outside-in, shared memory", "oi_shm", "host_shm"),
            ("inside-out, TCP bridge vs loopback", "io_tcp", "host_tcp")]
    for title, cont_key, host_key in rows:
        print(f"{title}:")
        for size in sorted(b[cont_key]):
            cl, cb = b[cont_key][size]
            hl, hb = b[host_key][size]
            label = "8 B" if size == 8 else f"{size >> 20} MiB"
            ok = "within 10 %" if max(cl / hl, hb / cb) <= 1.10 else "outside 10 %"
            print(f"  {label:>6}: latency {cl:7.2f} us vs {hl:7.2f} us ratio {cl / hl:.2f} | bandwidth "
                  f"{cb:8.1f} vs {hb:8.1f} MB/s ratio {cb / hb:.2f}  [{ok}]")
    run.finish({"image": args.image, "repeat": args.repeat, "startup": started,
                "pingpong_best": {k: {str(size): {"latency_us": lat, "bandwidth_mb_s": bw}
                                      for size, (lat, bw) in v.items()} for k, v in b.items()}})


if __name__ == "__main__":
    main()
