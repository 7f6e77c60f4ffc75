#!/usr/bin/env python3
"""Benchmark: `imagekit export --to enroot` vs Enroot's own dockerd:// method.

Baseline (what `enroot import dockerd://IMAGE` does): docker create, docker
export | tar -x into a directory (dev/* and .dockerenv excluded), then
`mksquashfs dir out.sqsh -all-root -comp lzo -noD`. Measured on the same
image(s): wall time, CPU time of child processes (rusage), and peak extra disk
on the file system of the work/output area (statvfs sampled every 50 ms;
the output file itself is included, so the ideal is "peak == output size").

Images: imagekit/debian-mpi:latest when present, else the base image; and a
>= 1 GB image made here (base + incompressible and compressible files).

    python bench/export.py [--image IMAGE] [--big-gb 1.0] [--workdir /var/tmp]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

DOCKER = "/usr/bin/docker"
BIG_TAG = "imagekit-bench/export-big:latest"


def used_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class DiskSampler:
    def __init__(self, path: Path) -> None:
        self.path, self.base, self.peak = path, used_bytes(path), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, used_bytes(self.path) - self.base)
            time.sleep(0.05)

    def __enter__(self):
        subprocess.run(["sync"])
        self.base = used_bytes(self.path)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, used_bytes(self.path) - self.base)


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def enroot_method(image: str, work: Path, out: Path) -> None:
    rootfs = Path(tempfile.mkdtemp(prefix="enroot-bench-", dir=work))
    name = f"bench-{os.getpid()}"
    try:
        subprocess.run([DOCKER, "create", "--name", name, image], check=True, capture_output=True)
        exp = subprocess.Popen([DOCKER, "export", name], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-C", str(rootfs), "--warning=no-timestamp", "--anchored",
                        "--exclude=dev/*", "--exclude=.dockerenv", "-px"], stdin=exp.stdout, check=True)
        exp.stdout.close()
        assert exp.wait() == 0
        subprocess.run(["chmod", "-f", "-R", "u+rX", str(rootfs)])
        subprocess.run(["mksquashfs", str(rootfs), str(out), "-all-root", "-no-progress", "-quiet",
                        "-comp", "lzo", "-noD", "-exit-on-error"], check=True, stdout=subprocess.DEVNULL)
    finally:
        subprocess.run([DOCKER, "rm", "-f", name], capture_output=True)
        shutil.rmtree(rootfs, ignore_errors=True)


def imagekit_method(image: str, work: Path, out: Path) -> None:
    subprocess.run([sys.executable, "-m", "imagekit", "export", image, "--to", "enroot", "-o", str(out),
                    "--force", "-q"], check=True, stdout=subprocess.DEVNULL)


def measure(fn, image: str, work: Path, out: Path) -> dict:
    if out.exists():
        out.unlink()
    subprocess.run(["sync"])
    c0, s0, t0 = children_cpu(), self_cpu(), time.monotonic()
    with DiskSampler(work) as disk:
        fn(image, work, out)
    wall = time.monotonic() - t0
    cpu = children_cpu() - c0 + self_cpu() - s0
    size = out.stat().st_size
    result = {"wall": wall, "cpu": cpu, "peak_extra": disk.peak, "out": size}
    out.unlink()
    return result


def make_big_image(base: str, gb: float) -> str:
    """Base + ~gb GB: half random (incompressible), half text-like (compressible), many sizes."""
    mb = int(gb * 1024)
    script = (
        "set -e; mkdir -p /bench/rand /bench/text /bench/small; "
        f"for i in $(seq 1 {mb // 2 // 64}); do head -c 64M /dev/urandom > /bench/rand/f$i; done; "
        f"for i in $(seq 1 {mb // 2 // 64}); do "
        "  seq 1 8000000 | head -c 64M > /bench/text/f$i; done; "
        "for i in $(seq 1 3000); do head -c $((i * 7)) /dev/urandom > /bench/small/s$i; done")
    ctx = Path(tempfile.mkdtemp(prefix="bench-ctx-"))
    try:
        (ctx / "Dockerfile").write_text(f'FROM {base}\nRUN ["/bin/sh", "-c", "{script}"]\n')
        subprocess.run([DOCKER, "build", "-q", "-t", BIG_TAG, str(ctx)], check=True,
                       stdout=subprocess.DEVNULL, env=dict(os.environ, DOCKER_BUILDKIT="1"))
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    return BIG_TAG


def image_size(image: str) -> int:
    out = subprocess.run([DOCKER, "image", "inspect", "-f", "{{.Size}}", image], capture_output=True,
                         text=True, check=True).stdout
    return int(out.strip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", help="image to export (default: imagekit/debian-mpi:latest or the base)")
    ap.add_argument("--big-gb", type=float, default=1.0)
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()

    from imagekit import base_image, engine

    images = []
    if args.image:
        images.append(args.image)
    elif engine.image_exists("imagekit/debian-mpi:latest"):
        images.append("imagekit/debian-mpi:latest")
    else:
        images.append(base_image.ensure("debian:bookworm", log=lambda *_: None))
    if not args.skip_big:
        if not engine.image_exists(BIG_TAG):
            print(f"building {BIG_TAG} (~{args.big_gb} GB)...", file=sys.stderr)
            make_big_image(base_image.ensure("debian:bookworm", log=lambda *_: None), args.big_gb)
        images.append(BIG_TAG)

    work = Path(tempfile.mkdtemp(prefix="imagekit-bench-", dir=args.workdir))
    rows = []
    try:
        for image in images:
            for label, fn in (("enroot (tar -x + mksquashfs)", enroot_method),
                              ("imagekit export --to enroot", imagekit_method)):
                r = measure(fn, image, work, work / "out.sqsh")
                rows.append((image, label, r))
                print(f"  {image}: {label}: {r['wall']:.1f}s", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    mib = 1 << 20
    print(f"\n{'image':34} {'method':30} {'size MiB':>9} {'wall s':>7} {'cpu s':>7} "
          f"{'peak extra MiB':>15} {'out MiB':>8}")
    for image, label, r in rows:
        print(f"{image:34} {label:30} {image_size(image) / mib:9.0f} {r['wall']:7.1f} {r['cpu']:7.1f} "
              f"{r['peak_extra'] / mib:15.0f} {r['out'] / mib:8.0f}")
    print()
    for image in images:
        base = next(r for i, l, r in rows if i == image and l.startswith("enroot"))
        ours = next(r for i, l, r in rows if i == image and l.startswith("imagekit"))
        print(f"{image}: speedup wall {base['wall'] / ours['wall']:.2f}x, cpu "
              f"{base['cpu'] / max(ours['cpu'], 1e-9):.2f}x; peak extra disk "
              f"{ours['peak_extra'] / mib:.0f} MiB vs {base['peak_extra'] / mib:.0f} MiB "
              f"(output {ours['out'] / mib:.0f} MiB, ratio {ours['peak_extra'] / ours['out']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
