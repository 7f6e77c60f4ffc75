#!/usr/bin/env python3
"""Benchmark: `imagekit export --to enroot` vs `enroot import dockerd://` and the floor, and `--to sif`
vs `apptainer build`, paired: every side runs in turn, A B C … (`record.alternate`), `--runs` rounds
after a warm-up round, and every ratio is taken pair by pair (`record.paired`: min / median / max,
with the load over the row).

`--to enroot` sides and the rows read from them:

- `enroot import dockerd://IMAGE` (Enroot 4.1.2; `--enroot`, else PATH; without one, Enroot's method
  re-done by hand: docker create, docker export | tar -x, chmod, `mksquashfs DIR -comp lzo -noD`);
- `imagekit export` with the default preset and with `--preset enroot` (Enroot's own options):
  rows "default vs enroot import" (goal ≥ 5×, wall and CPU) and "--preset enroot vs enroot import";
- the floor, `docker export | wc -c`: row "default vs the floor" (goal ≤ 1.5× on wall time);
- `docker export | mksquashfs - OUT -tar` with imagekit's exact tool options and no filter: row
  "default vs docker export | mksquashfs" (goal ≤ 1.1× its CPU);
- with `--baseline-src DIR` (an older imagekit's src, e.g. `git archive 67b9026 src | tar -x -C D`),
  that imagekit's default export: row "default, after vs before". With `--identity` every output is
  hashed under SOURCE_DATE_EPOCH=1700000000: before and after must give one sha256.

`--to sif`: `apptainer build OUT docker-daemon://IMAGE` (gzip-9, its default) against
`imagekit export --to sif` (the default, gzip-6; goal ≥ 2.5× on wall) and `--preset gzip` (gzip-9, the
same compression as Apptainer's), and `apptainer build --mksquashfs-args
"-comp zstd -Xcompression-level 3"` against `--preset fast` (goal ≥ 5×); `--baseline-src` adds the
before of both.

CPU is user + system of the side's whole process tree (rusage of the reaped children); the
engine's own work for `docker export` counts on no side there. It is kept beside it as `engine_cpu_s`:
dockerd's process tree (its `docker-tar` child, which writes the tar, and containerd), read from
/proc around each side, and `total_cpu_s`, the two added; each row has a `total_cpu` ratio taken pair
by pair from those. On a machine of N cores a side's total CPU / N is a floor under its wall time.
Each side's peak extra disk on the work area (statvfs every 50 ms, the output included) and output
size are kept too.

Images: imagekit/debian-mpi:latest when present, else the base image; and a >= 1 GB one:
--big-image, else imagekit/debian-cuda:devel when present, else one made here (--big-gb), unless
--skip-big.

    python bench/export.py [--to enroot|sif] [--image IMAGE] [--skip-big] [--runs 5] [--baseline-src D/src]
                           [--identity] [--only LABEL,...] [--workdir /var/tmp] [--enroot PATH] [--apptainer PATH]
"""

from __future__ import annotations

import dataclasses
import os
import shutil
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


def imagekit_method(preset: str | None, to: str = "enroot", pythonpath: str | None = None):
    """``imagekit export --no-store`` (``pythonpath``: another imagekit's source, the before side)."""
    def run(image: str, work: Path, out: Path) -> None:
        argv = [sys.executable, "-m", "imagekit", "export", image, "--to", to, "-o", str(out),
                "--force", "--no-store", "-q"]
        if preset:
            argv += ["--preset", preset]
        env = dict(os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {}))
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    return run


def floor(image: str, work: Path, out: Path) -> None:
    """``docker export | wc -c``: the engine's stream and nothing done with it (perf-4's floor)."""
    name = f"bench-floor-{os.getpid()}"
    try:
        subprocess.run([DOCKER, "create", "--name", name, image, "/bin/sh"], check=True, capture_output=True)
        subprocess.run(f"{DOCKER} export {name} | wc -c > /dev/null", shell=True, check=True)
    finally:
        subprocess.run([DOCKER, "rm", "-f", name], capture_output=True)


def mksquashfs_pipe(preset: str, offset: bool = False):
    """``docker export | mksquashfs - OUT -tar`` with imagekit's exact options for ``preset`` (its tool
    command line, no filter, no config files): the compressor's own cost, for the CPU ratio."""
    def run(image: str, work: Path, out: Path) -> None:
        from imagekit.export import squash

        spec = squash.SquashSpec(preset=preset, tool="mksquashfs", all_root=True, xattrs=False)
        cmd = squash.tool_command("mksquashfs", shutil.which("mksquashfs"), spec, out)
        name = f"bench-pipe-{os.getpid()}"
        try:
            subprocess.run([DOCKER, "create", "--name", name, image, "/bin/sh"], check=True, capture_output=True)
            exp = subprocess.Popen([DOCKER, "export", name], stdout=subprocess.PIPE)
            subprocess.run(cmd, stdin=exp.stdout, check=True, stdout=subprocess.DEVNULL)
            exp.stdout.close()
            assert exp.wait() == 0
        finally:
            subprocess.run([DOCKER, "rm", "-f", name], capture_output=True)
    return run


def sha256_of(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(4 << 20):
            h.update(chunk)
    return h.hexdigest()


SHA_OUTPUTS = False     # set by --identity: every output hashed (the before/after byte identity)


TICK = os.sysconf("SC_CLK_TCK")


def engine_cpu() -> float:
    """CPU seconds so far of dockerd's whole process tree (0 where no dockerd runs here), from one read
    of each /proc/PID/stat. A child that exits within an interval (the ``docker-tar`` that writes an
    export's tar) counts through its parent's cutime once reaped."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    daemon = None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue                                  # gone meanwhile: its parent's cutime has it
        pid, fields = int(entry.name), stat.rsplit(")", 1)[1].split()
        children.setdefault(int(fields[1]), []).append(pid)
        ticks[pid] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        if stat[stat.index("(") + 1:stat.rindex(")")] == "dockerd":
            daemon = pid
    if daemon is None:
        return 0.0
    tree, total = [daemon], 0
    while tree:
        pid = tree.pop()
        total += ticks.get(pid, 0)
        tree.extend(children.get(pid, ()))
    return total / TICK


def measured(fn, image: str, work: Path, out: Path, notes: list[dict]):
    """``fn`` as a side of a pair; the peak extra disk and the engine's CPU go to ``notes`` (see
    :func:`noted`)."""
    def run() -> None:
        if out.exists():
            out.unlink()
        with DiskSampler(work) as disk:
            before = engine_cpu()
            fn(image, work, out)
            engine = engine_cpu() - before
        notes.append({"peak_extra": disk.peak, "engine_cpu": engine})
    return run


def total_cpu_row(a: list[record.Sample], a_notes: list[dict], b: list[record.Sample],
                  b_notes: list[dict]) -> dict[str, dict]:
    """A row's ratio on CPU with the engine's added to each side, pair by pair (record.paired's own)."""
    def with_engine(samples: list[record.Sample], notes: list[dict]) -> list[record.Sample]:
        return [dataclasses.replace(s, cpu=s.cpu + n["engine_cpu"]) for s, n in zip(samples, notes)]
    return record.paired(with_engine(a, a_notes), with_engine(b, b_notes))["cpu"]


def noted(out: Path, notes: dict[str, list[dict]]):
    """After a side, untimed: its output's size (and sha256 with --identity), then the output goes."""
    def after(label: str) -> None:
        note = notes[label][-1]
        note["out"] = out.stat().st_size if out.exists() else 0
        note["sha256"] = sha256_of(out) if out.exists() and SHA_OUTPUTS else ""
        if out.exists():
            out.unlink()
    return after


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
    global SHA_OUTPUTS
    ap = record.parser(__doc__)
    ap.add_argument("--image", help="image to export (default: imagekit/debian-mpi:latest or the base)")
    ap.add_argument("--runs", type=int, default=3, help="paired rounds (A B A B ...), after one warm-up round")
    ap.add_argument("--big-image", help="the >= 1 GB image (default: imagekit/debian-cuda:devel, else made here)")
    ap.add_argument("--big-gb", type=float, default=1.0)
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--enroot", default=shutil.which("enroot"), help="enroot executable (default: PATH)")
    ap.add_argument("--to", choices=("enroot", "sif"), default="enroot")
    ap.add_argument("--apptainer", default=shutil.which("apptainer"), help="apptainer executable (default: PATH)")
    ap.add_argument("--baseline-src", help="an older imagekit's src directory: its default export is the before side")
    ap.add_argument("--identity", action="store_true",
                    help="SOURCE_DATE_EPOCH set and every output hashed: before and after must be byte-identical")
    ap.add_argument("--only", help="comma-separated method labels to run (default: all)")
    ap.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted (Apptainer's cache)")
    args = ap.parse_args()
    run = record.start(f"export-{args.to}", args)
    record.byte_compile(Path(__file__).resolve().parents[1] / "src", *([args.baseline_src] if args.baseline_src else []))
    if args.identity:
        SHA_OUTPUTS = True
        os.environ.setdefault("SOURCE_DATE_EPOCH", "1700000000")

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

    default = squash.DEFAULT_PRESET
    methods: dict[str, object] = {}
    # (row name, A, B): each imagekit side read against its reference, pair by pair.
    rows: list[tuple[str, str, str]] = []
    if args.to == "sif":
        if not args.apptainer:
            print("--to sif needs apptainer (--apptainer): it is the baseline", file=sys.stderr)
            return 2
        methods = {"apptainer build (gzip)": apptainer_build(args.apptainer, None),
                   "imagekit --to sif (default: gzip-6)": imagekit_method(None, "sif"),
                   "imagekit --to sif --preset gzip (gzip-9)": imagekit_method("gzip", "sif"),
                   "apptainer build -comp zstd -Xcompression-level 3":
                       apptainer_build(args.apptainer, "zstd -Xcompression-level 3"),
                   "imagekit --to sif --preset fast": imagekit_method("fast", "sif")}
        rows = [("sif default vs apptainer build", "imagekit --to sif (default: gzip-6)", "apptainer build (gzip)"),
                ("sif gzip-9 vs apptainer build", "imagekit --to sif --preset gzip (gzip-9)", "apptainer build (gzip)"),
                ("sif fast vs apptainer build zstd-3", "imagekit --to sif --preset fast",
                 "apptainer build -comp zstd -Xcompression-level 3")]
        if args.baseline_src:
            methods["imagekit before --to sif (default)"] = imagekit_method(None, "sif", args.baseline_src)
            methods["imagekit before --to sif --preset fast"] = imagekit_method("fast", "sif", args.baseline_src)
            rows += [("sif default, after vs before", "imagekit --to sif (default: gzip-6)",
                      "imagekit before --to sif (default)"),
                     ("sif fast, after vs before", "imagekit --to sif --preset fast",
                      "imagekit before --to sif --preset fast")]
    else:
        if args.enroot:
            methods["enroot import dockerd://"] = enroot_import(args.enroot)
        else:
            print("no enroot found (--enroot): the baseline is the method re-done by hand", file=sys.stderr)
            methods["enroot's method by hand"] = enroot_method
        reference = next(iter(methods))
        methods.update({f"imagekit (default: {default})": imagekit_method(None),
                        "imagekit --preset enroot": imagekit_method("enroot"),
                        "docker export | wc -c (floor)": floor,
                        f"docker export | mksquashfs ({default}'s options)": mksquashfs_pipe(default)})
        ik = f"imagekit (default: {default})"
        rows = [("default vs enroot import", ik, reference),
                ("--preset enroot vs enroot import", "imagekit --preset enroot", reference),
                ("default vs the floor", ik, "docker export | wc -c (floor)"),
                ("default vs docker export | mksquashfs, same options", ik,
                 f"docker export | mksquashfs ({default}'s options)")]
        if args.baseline_src:
            methods["imagekit before (default)"] = imagekit_method(None, pythonpath=args.baseline_src)
            rows.append(("default, after vs before", ik, "imagekit before (default)"))
    if args.only:
        keep = {m.strip() for m in args.only.split(",")}
        methods = {k: v for k, v in methods.items() if k in keep}
        rows = [r for r in rows if r[1] in methods and r[2] in methods]

    work = Path(tempfile.mkdtemp(prefix="imagekit-bench-", dir=args.workdir))
    results = []
    try:
        for image in images:
            notes: dict[str, list[dict]] = {label: [] for label in methods}
            out = work / f"out.{'sif' if args.to == 'sif' else 'sqsh'}"
            sides = {label: measured(fn, image, work, out, notes[label]) for label, fn in methods.items()}
            samples = record.alternate(sides, args.runs, warmup=args.warmup, after=noted(out, notes))
            for label in methods:
                notes[label] = notes[label][-args.runs:]       # the warm-up round's are not counted
            paired = {name: record.paired(samples[a], samples[b], a, b) for name, a, b in rows}
            for name, a, b in rows:
                paired[name]["total_cpu"] = total_cpu_row(samples[a], notes[a], samples[b], notes[b])
            for name, row in paired.items():
                total = row["total_cpu"]["times"]["median"]
                print(f"{image}: {name}: {record.describe(row)}; {record.describe(row, 'cpu')}; "
                      f"with the engine's CPU {total:.2f}x", file=sys.stderr)
            results.append({
                "image": image, "image_bytes": image_size(image),
                "methods": {label: {"wall_s": record.spread([x.wall for x in samples[label]], 3),
                                    "cpu_s": record.spread([x.cpu for x in samples[label]], 3),
                                    "engine_cpu_s": record.spread([n["engine_cpu"] for n in notes[label]], 3),
                                    "total_cpu_s": record.spread([x.cpu + n["engine_cpu"] for x, n in
                                                                  zip(samples[label], notes[label])], 3),
                                    "peak_extra_bytes": max(n["peak_extra"] for n in notes[label]),
                                    "out_bytes": sorted({n["out"] for n in notes[label]}),
                                    "sha256": sorted({n["sha256"] for n in notes[label]} - {""})}
                            for label in methods},
                "rows": paired})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    run.finish({"to": args.to, "runs": args.runs, "identity": args.identity,
                "source_date_epoch": os.environ.get("SOURCE_DATE_EPOCH"), "baseline_src": args.baseline_src,
                "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
