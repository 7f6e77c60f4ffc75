#!/usr/bin/env python3
"""Benchmark: `imagekit export --to enroot` vs `enroot import dockerd://`, and `--to sif` vs `apptainer build`.

Rows, run side by side (interleaved, `--runs` times each; the median is shown):

- `enroot import dockerd://IMAGE` itself, when an `enroot` is found (`--enroot`,
  else PATH). It is the baseline of the ratios. Enroot is not packaged for
  Debian; build the bash part from its source tree (v4.1.2) with
  `make FORCE_GLIBC=1 DEPS= UTILS= install prefix=/opt/enroot` (the C
  utilities are not used by a dockerd:// import).
- Enroot's method re-done by hand: docker create, docker export | tar -x into a
  directory (dev/* and .dockerenv excluded), chmod, then `mksquashfs dir
  out.sqsh -all-root -comp lzo -noD` (no fixperms pass over every file, no
  config step, no bash): a lower bound for Enroot's design.
- `imagekit export --to enroot --preset enroot` (Enroot's exact squash options)
  and with the default preset.

With `--to sif`: `apptainer build OUT docker-daemon://IMAGE` (Apptainer's gzip default, the
baseline), `imagekit export --to sif` (gzip too, the same bytes class), and the zstd pair
(`apptainer build --mksquashfs-args "-comp zstd"` against `--preset zstd`), and the fast pair
(zstd-3: `-comp zstd -Xcompression-level 3` against `--preset fast`), each imagekit row also read
against the gzip baseline.

Measured on the same image(s): wall time, CPU time of child processes
(rusage), and peak extra disk on the file system of the work/output area
(statvfs sampled every 50 ms; the output file itself is included, so the ideal
is "peak == output size").

Images: imagekit/debian-mpi:latest when present, else the base image; and a
>= 1 GB one: --big-image, else imagekit/debian-cuda:devel when present (1.1 GB,
`imagekit build debian-cuda --target devel`), else one made here (base +
incompressible and compressible files, --big-gb).

    python bench/export.py [--to enroot|sif] [--image IMAGE] [--big-image IMAGE] [--runs 5] [--workdir /var/tmp]
                           [--enroot PATH] [--apptainer PATH]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import record

DOCKER = "/usr/bin/docker"
BIG_TAG = "imagekit-bench/export-big:latest"
REAL_BIG = "imagekit/debian-cuda:devel"


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


def enroot_import(enroot: str):
    def run(image: str, work: Path, out: Path) -> None:
        # Enroot's own temporary rootfs goes to ENROOT_TEMP_PATH: the same disk as ours.
        env = dict(os.environ, ENROOT_TEMP_PATH=str(work), TMPDIR=str(work))
        subprocess.run([enroot, "import", "-o", str(out), f"dockerd://{image}"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return run


def apptainer_build(apptainer: str, comp: str | None):
    def run(image: str, work: Path, out: Path) -> None:
        # Apptainer unpacks into its temporary directory: the same disk as ours.
        env = dict(os.environ, APPTAINER_TMPDIR=str(work), TMPDIR=str(work))
        argv = [apptainer, "-q", "build", "--force"]
        if comp:
            argv += ["--mksquashfs-args", f"-comp {comp}"]
        subprocess.run(argv + [str(out), f"docker-daemon://{image}"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return run


def imagekit_method(preset: str | None, to: str = "enroot"):
    def run(image: str, work: Path, out: Path) -> None:
        argv = [sys.executable, "-m", "imagekit", "export", image, "--to", to, "-o", str(out),
                "--force", "--no-store", "-q"]
        if preset:
            argv += ["--preset", preset]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return run


def median_of(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def measure(fn, image: str, work: Path, out: Path) -> dict:
    if out.exists():
        out.unlink()
    subprocess.run(["sync"])
    with record.timer() as t, DiskSampler(work) as disk:
        fn(image, work, out)
    size = out.stat().st_size
    result = {"wall": t.wall, "cpu": t.cpu, "peak_extra": disk.peak, "out": size}
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
    ap = record.parser(__doc__)
    ap.add_argument("--image", help="image to export (default: imagekit/debian-mpi:latest or the base)")
    ap.add_argument("--runs", type=int, default=3, help="paired runs per method and image (median shown)")
    ap.add_argument("--big-image", help="the >= 1 GB image (default: imagekit/debian-cuda:devel, else made here)")
    ap.add_argument("--big-gb", type=float, default=1.0)
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--enroot", default=shutil.which("enroot"), help="enroot executable (default: PATH)")
    ap.add_argument("--to", choices=("enroot", "sif"), default="enroot")
    ap.add_argument("--apptainer", default=shutil.which("apptainer"), help="apptainer executable (default: PATH)")
    args = ap.parse_args()
    run = record.start(f"export-{args.to}", args)

    from imagekit import base_image
    from imagekit.engines import docker as engine
    from imagekit.export import squash

    images = []
    if args.image:
        images.append(args.image)
    elif engine.image_exists("imagekit/debian-mpi:latest"):
        images.append("imagekit/debian-mpi:latest")
    else:
        images.append(base_image.ensure(base_image.BaseRequest("debian:bookworm"), log=lambda *_: None))
    if not args.skip_big and (args.big_image or engine.image_exists(REAL_BIG)):
        images.append(args.big_image or REAL_BIG)
    elif not args.skip_big:
        if not engine.image_exists(BIG_TAG):
            print(f"building {BIG_TAG} (~{args.big_gb} GB)...", file=sys.stderr)
            base = base_image.ensure(base_image.BaseRequest("debian:bookworm"), log=lambda *_: None)
            make_big_image(base, args.big_gb)
        images.append(BIG_TAG)

    methods = []
    if args.to == "sif":
        if not args.apptainer:
            print("--to sif needs apptainer (--apptainer): it is the baseline", file=sys.stderr)
            return 2
        methods += [("apptainer build docker-daemon:// (gzip)", apptainer_build(args.apptainer, None)),
                    ("imagekit --to sif (gzip)", imagekit_method(None, "sif")),
                    ("apptainer build -comp zstd", apptainer_build(args.apptainer, "zstd")),
                    ("imagekit --to sif --preset zstd", imagekit_method("zstd", "sif")),
                    ("apptainer build -comp zstd -Xcompression-level 3", apptainer_build(args.apptainer, "zstd -Xcompression-level 3")),
                    ("imagekit --to sif --preset fast", imagekit_method("fast", "sif"))]
    elif args.enroot:
        methods.append(("enroot import dockerd://", enroot_import(args.enroot)))
    else:
        print("no enroot found (--enroot): the baseline is the method re-done by hand", file=sys.stderr)
    if args.to == "enroot":
        methods += [("enroot's method by hand", enroot_method),
                    ("imagekit --preset enroot", imagekit_method("enroot")),
                    (f"imagekit (default: {squash.DEFAULT_PRESET})", imagekit_method(None))]

    work = Path(tempfile.mkdtemp(prefix="imagekit-bench-", dir=args.workdir))
    results: dict[tuple[str, str], list[dict]] = {}
    try:
        for image in images:
            for i in range(args.runs):
                for label, fn in methods:   # interleaved, so drift hits every method alike
                    r = measure(fn, image, work, work / f"out.{'sif' if args.to == 'sif' else 'sqsh'}")
                    results.setdefault((image, label), []).append(r)
                    print(f"  {image} run {i + 1}: {label}: {r['wall']:.1f}s", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    mib = 1 << 20
    print(f"\nmedian of {args.runs} paired runs, {os.cpu_count()} CPUs\n")
    print("| image | method | wall s | CPU s | wall ratio | CPU ratio | peak extra MiB | out MiB |")
    print("|---|---|---|---|---|---|---|---|")
    # Each imagekit row against the tool's own run with the same compression.
    baseline_of = {"imagekit --to sif --preset zstd": "apptainer build -comp zstd",
                   "imagekit --to sif --preset fast": "apptainer build -comp zstd -Xcompression-level 3"}
    for image in images:
        for label, _ in methods:
            base = median_of(results[(image, baseline_of.get(label, methods[0][0]))])
            r = median_of(results[(image, label)])
            print(f"| {image} ({image_size(image) / mib:.0f} MiB) | {label} | {r['wall']:.1f} | "
                  f"{r['cpu']:.1f} | {base['wall'] / r['wall']:.2f}x | {base['cpu'] / max(r['cpu'], 1e-9):.2f}x | "
                  f"{r['peak_extra'] / mib:.0f} | {r['out'] / mib:.0f} |")
    print(f"\nratios: the baseline row's time over the row's (higher is faster), baseline: {methods[0][0]}"
          + "".join(f"; for {k}: {v}" for k, v in baseline_of.items() if args.to == "sif"))
    run.finish({"to": args.to, "runs": args.runs, "baseline": methods[0][0],
                "images": {image: image_size(image) for image in images},
                "results": [{"image": image, "method": label, "runs": results[(image, label)],
                             "median": median_of(results[(image, label)])}
                            for image in images for label, _ in methods]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
