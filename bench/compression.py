#!/usr/bin/env python3
"""Benchmark: squashfs compression presets for `imagekit export --to enroot`.

For each compression variant and image, the real export pipeline (docker export
-> imagekit's tar filter -> squashfs tool) is timed, then the start cost of the
file it wrote:

- export: wall time, CPU time (this process and its children: the tar filter,
  the docker CLI and the squashfs tool; dockerd's own CPU is not counted, the
  same for every row) and size;
- unsquashfs: a full extraction to a temporary directory, which is what
  `enroot create` (and Pyxis without squashfuse) does on every node;
- squashfuse / kernel: a read of every regular file through a mount (what
  `enroot start IMAGE.sqsh` and Pyxis with squashfuse do, worst case: the job
  touches every file), with squashfuse (its process's CPU included) and with
  the kernel's squashfs (`mount -o loop`) where they are available.

Page caches are dropped (/proc/sys/vm/drop_caches) before each export and each
start measurement when that is permitted, so the .sqsh is read from disk; the
table says when it was not. The baseline row reproduces `enroot import
dockerd://` (bench/export.py: docker export | tar -x, chmod, mksquashfs
-all-root -comp lzo -noD) and is what the speedups are relative to.

    python bench/compression.py [--image IMG] [--big-image IMG] [--runs 3] [--only zstd-3-1M,enroot]

Prints a markdown table per image, then ratios. The numbers are only as quiet as
the machine: run it alone.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from imagekit.export import ExportRequest, enroot, squash  # noqa: E402
from imagekit.export.squash import MIB, Preset  # noqa: E402

import export as export_bench  # noqa: E402  (bench/export.py: the Enroot method and the big image)
import record  # noqa: E402

# Named presets, then the candidates they were chosen from.
CANDIDATES: dict[str, Preset] = {
    "lzo1x_1-raw": Preset("lzo", algorithm="lzo1x_1", raw_data=True, tailends=False, exportable=True),
    "lzo1x_1": Preset("lzo", algorithm="lzo1x_1"),
    "lz4-128K": Preset("lz4"),
    "lz4-1M": Preset("lz4", block=1 * MIB),
    "zstd-1-128K": Preset("zstd", level=1),
    "zstd-3-128K": Preset("zstd", level=3),
    "zstd-1-1M": Preset("zstd", level=1, block=1 * MIB),
    "zstd-3-1M": Preset("zstd", level=3, block=1 * MIB),
    "zstd-9-1M": Preset("zstd", level=9, block=1 * MIB),
    "zstd-19-1M": Preset("zstd", level=19, block=1 * MIB),
    "gzip-6-1M": Preset("gzip", level=6, block=1 * MIB),
}
# Named presets, then the candidates they were chosen from (less the ones a preset already is).
VARIANTS: dict[str, Preset] = {
    **squash.PRESETS,
    **{n: p for n, p in CANDIDATES.items()
       if all(p != q for q in squash.PRESETS.values())},
}
BASELINE = "enroot import (method)"
REAL_BIG = "imagekit/debian-cuda:devel"   # `imagekit build debian-cuda` (devel): 1.1 GB


@dataclass
class Row:
    variant: str
    label: str
    export_wall: list[float] = field(default_factory=list)
    export_cpu: list[float] = field(default_factory=list)
    size: int = 0
    tool: str = ""
    unsquash: list[float] = field(default_factory=list)
    unsquash_cpu: list[float] = field(default_factory=list)
    fuse: list[float] = field(default_factory=list)
    fuse_cpu: list[float] = field(default_factory=list)
    kernel: list[float] = field(default_factory=list)


def drop_caches() -> bool:
    subprocess.run(["sync"])
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def export_with(image: str, out: Path, p: Preset) -> str:
    res = enroot.squashfs(image, out, ExportRequest("enroot", force=True, check_space=False), preset=p)
    return res.tool


def unsquash(sqsh: Path, work: Path) -> None:
    dest = work / "unsquashed"
    # What `enroot create` runs (src/runtime.sh: unsquashfs -user-xattrs -d ROOTFS IMAGE).
    subprocess.run(["unsquashfs", "-user-xattrs", "-no-progress", "-d", str(dest), str(sqsh)],
                   check=True, stdout=subprocess.DEVNULL)


READ_ALL = r"""
import os, sys
total = 0
for root, dirs, files in os.walk(sys.argv[1]):
    for name in files:
        path = os.path.join(root, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            with open(path, "rb", buffering=0) as fh:
                while chunk := fh.read(1 << 20):
                    total += len(chunk)
        except PermissionError:
            pass
print(total)
"""


def read_all(mnt: Path) -> None:
    subprocess.run([sys.executable, "-c", READ_ALL, str(mnt)], check=True, stdout=subprocess.DEVNULL)


def wait_mounted(mnt: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while not os.path.ismount(mnt):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"squashfuse did not mount {mnt}")
        time.sleep(0.01)


def fuse_read(sqsh: Path, mnt: Path) -> None:
    proc = subprocess.Popen(["squashfuse", "-f", str(sqsh), str(mnt)])
    try:
        wait_mounted(mnt, proc)
        read_all(mnt)
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
        proc.wait(timeout=30)


def kernel_read(sqsh: Path, mnt: Path) -> None:
    subprocess.run(["mount", "-t", "squashfs", "-o", "loop,ro", str(sqsh), str(mnt)], check=True)
    try:
        read_all(mnt)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def can_kernel_mount(sqsh: Path, mnt: Path) -> bool:
    ok = subprocess.run(["mount", "-t", "squashfs", "-o", "loop,ro", str(sqsh), str(mnt)],
                        capture_output=True).returncode == 0
    if ok:
        subprocess.run(["umount", str(mnt)], check=True)
    return ok


def bench_image(image: str, names: list[str], runs: int, work: Path, start: bool,
                cold: bool, log) -> list[Row]:
    rows: list[Row] = []
    out = work / "out.sqsh"
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    have_fuse = start and shutil.which("squashfuse") is not None
    have_kernel = None
    base = Row(BASELINE, "mksquashfs DIR -all-root -comp lzo -noD")
    for _ in range(runs):
        if cold:
            drop_caches()
        with record.timer() as t:
            export_bench.enroot_method(image, work, out)
        base.export_wall.append(t.wall)
        base.export_cpu.append(t.cpu)
        base.size = out.stat().st_size
        out.unlink()
    base.tool = "tar + mksquashfs"
    log(f"{image}: {BASELINE}: {statistics.median(base.export_wall):.1f}s")
    rows.append(base)
    for name in names:
        p = VARIANTS[name]
        row = Row(name, p.label())
        for _ in range(runs):
            if out.exists():
                out.unlink()
            if cold:
                drop_caches()
            with record.timer() as t:
                row.tool = export_with(image, out, p)
            row.export_wall.append(t.wall)
            row.export_cpu.append(t.cpu)
            row.size = out.stat().st_size
            if not start:
                continue
            if cold:
                drop_caches()
            with record.timer() as t:
                unsquash(out, work)
            row.unsquash.append(t.wall)
            row.unsquash_cpu.append(t.cpu)
            shutil.rmtree(work / "unsquashed")
            if have_fuse:
                if cold:
                    drop_caches()
                with record.timer() as t:
                    fuse_read(out, mnt)
                row.fuse.append(t.wall)
                row.fuse_cpu.append(t.cpu)
            if have_kernel is None:
                have_kernel = can_kernel_mount(out, mnt)
                if not have_kernel:
                    log("kernel squashfs mount not permitted here: no kernel column")
            if have_kernel:
                if cold:
                    drop_caches()
                with record.timer() as t:
                    kernel_read(out, mnt)
                row.kernel.append(t.wall)
        out.unlink()
        log(f"{image}: {name} ({row.label}): export {statistics.median(row.export_wall):.1f}s, "
            f"{row.size / MIB:.0f} MiB")
        rows.append(row)
    return rows


def med(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}" if values else "–"


def table(image: str, rows: list[Row], cold: bool) -> str:
    base = rows[0]
    enroot_row = next((r for r in rows if r.variant == "enroot"), None)
    lines = [f"### {image}", "",
             f"caches {'dropped before each measurement' if cold else 'NOT dropped (warm)'}; "
             "median of the runs; times in seconds", "",
             "| variant | compression | export | CPU | vs Enroot | MiB | size vs enroot "
             "| unsquashfs | squashfuse read (CPU) | kernel read |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    b_wall = statistics.median(base.export_wall)
    for r in rows:
        wall = statistics.median(r.export_wall)
        size_ratio = f"{r.size / enroot_row.size:.2f}" if enroot_row else "–"
        fuse = f"{med(r.fuse)} ({med(r.fuse_cpu)})" if r.fuse else "–"
        lines.append(f"| {r.variant} | {r.label} | {wall:.1f} | {med(r.export_cpu)} | "
                     f"{b_wall / wall:.2f}× | {r.size / MIB:.0f} | {size_ratio} | {med(r.unsquash)} | "
                     f"{fuse} | {med(r.kernel)} |")
    lines.append("")
    for name, target in (("enroot", 2.0), (squash.DEFAULT_PRESET, 3.0)):
        r = next((r for r in rows if r.variant == name), None)
        if r is None:
            continue
        wall, cpu = statistics.median(r.export_wall), statistics.median(r.export_cpu)
        lines.append(f"- `{name}` against Enroot's method: wall {b_wall / wall:.2f}× "
                     f"(target {target:.0f}×), CPU {statistics.median(base.export_cpu) / cpu:.2f}×, "
                     f"{r.size / MIB:.0f} MiB vs {base.size / MIB:.0f} MiB")
    return "\n".join(lines)


def main() -> int:
    ap = record.parser(__doc__)
    ap.add_argument("--image", default="imagekit/debian-mpi:latest")
    ap.add_argument("--big-image", help=f"a >= 1 GB image (default: {REAL_BIG} when built, a real "
                    f"CUDA toolkit image, else {export_bench.BIG_TAG}, built here)")
    ap.add_argument("--big-gb", type=float, default=1.0)
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--big-only", action="store_true", help="only the >= 1 GB image")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--only", help="comma-separated variants (default: all): " + ", ".join(VARIANTS))
    ap.add_argument("--no-start", action="store_true", help="export only, no start-cost columns")
    ap.add_argument("--workdir", default="/var/tmp")
    args = ap.parse_args()
    run = record.start("compression", args)

    from imagekit import base_image
    from imagekit.engines import docker as engine

    names = args.only.split(",") if args.only else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants: {', '.join(unknown)}")
    images = [] if args.big_only else [args.image]
    if not args.skip_big:
        big = args.big_image or (REAL_BIG if engine.image_exists(REAL_BIG) else export_bench.BIG_TAG)
        if big == export_bench.BIG_TAG and not engine.image_exists(big):
            print(f"building {big} (~{args.big_gb} GB)...", file=sys.stderr)
            base = base_image.ensure(base_image.BaseRequest("debian:bookworm"), log=lambda *_: None)
            export_bench.make_big_image(base, args.big_gb)
        images.append(big)
    cold = drop_caches()
    if not cold:
        print("cannot drop page caches here (needs root): start costs are warm", file=sys.stderr)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    work = Path(tempfile.mkdtemp(prefix="imagekit-compression-", dir=args.workdir))
    results = []
    try:
        for image in images:
            results.append((image, bench_image(image, names, args.runs, work, not args.no_start,
                                               cold, log)))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"machine: {os.cpu_count()} CPUs, squashfs tool processors {squash.processors()}, "
          f"load average {os.getloadavg()[0]:.2f} at the end\n")
    for image, rows in results:
        print(table(image, rows, cold))
        print()
    run.finish({"runs": args.runs, "caches_dropped": cold, "squash_processors": squash.processors(),
                "baseline": BASELINE, "images": {image: [asdict(r) for r in rows] for image, rows in results}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
