#!/usr/bin/env python3
"""Benchmark: arm64 under emulation against native amd64, and the importer's cost of an index.

Measured side by side in one run (issue 37):

- debian-mpi (as ``bench-arch-mpi``: the shared images keep their tags) built with --no-cache for
  linux/amd64 (native) and linux/arm64 (qemu-user-static), one after the other: wall time and the
  ratio (``--no-build``: the debian-mpi images as they are, sizes only). The apt cache
  mounts are kept (no ``builder prune`` on a shared engine), so both measure the build's work,
  not the downloads; the arm64 base image is made first if missing (its time is reported).
- each platform's image size (runtime, as the engine reports it) and its Enroot export's size;
- the importer resolving ``REGISTRY#REPO:TAG`` for this node, in-process, median of R: a plain
  manifest as before this change (the manifest only), a plain manifest now (manifest + config,
  whose architecture is checked against the node) and an OCI index of both platforms (index +
  the node's manifest; the entry names the platform). Target: the index adds < 20 ms.
- ``--cuda STACK`` (off by default: an hour or more on 2 cores): STACK built for linux/arm64 under
  emulation with its runtime checks, from the site mirror (``--mirror``, default ../shared/mirror);
  its wall time, size and the checks' counts. debian-grace is the one meant for it: every piece is a
  Debian package or a wheel, so no compiler runs under QEMU (debian-cuda's UCX, PMIx and Open MPI
  would compile through QEMU for days).

    python bench/arch.py [-r 50] [--no-build] [--cuda debian-grace --mirror ../shared/mirror]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from imagekit import base_image, build, checks, registry, stack  # noqa: E402
from imagekit.util import platforms
from imagekit.engines import docker as engine  # noqa: E402
from imagekit.checks import runner  # noqa: E402
from imagekit.export import ExportRequest, export_image  # noqa: E402
from imagekit.export import pyxis_importer  # noqa: E402
from imagekit.export.push import push_image, push_platforms  # noqa: E402

LOGS = Path("build/bench-logs")


def bench_stack(tmp: Path) -> Path:
    """debian-mpi under another name: the --no-cache builds never retag the shared
    imagekit/debian-mpi images that tests and other users start."""
    path = tmp / "bench-arch-mpi.yaml"
    path.write_text(f"name: bench-arch-mpi\nextends: {ROOT / 'stacks/debian-mpi.yaml'}\n")
    return path


def build_both(path: Path, no_cache: bool) -> list[tuple[str, build.BuildResult]]:
    out = []
    for platform in ("linux/amd64", "linux/arm64"):
        s = stack.load(path, platform=platform)
        result = build.build(s, build.BuildRequest(no_cache=no_cache, log_dir=LOGS))
        out.append((platform, result))
        print(f"  built {result.tags[0]} ({platform}) in {result.seconds:.0f} s", file=sys.stderr)
    return out


def resolve_times(uri: str, runs: int, arch_check: bool = True) -> list[float]:
    """identify() as the importer calls it; without ``arch_check``, only the registry client's
    resolve (what the importer did before it checked an image's architecture: the baseline)."""
    env = dict(os.environ)
    ref = registry.parse(uri)
    client = registry.RegistryClient.for_reference(ref, env=env)

    def once() -> None:
        if arch_check:
            pyxis_importer.identify(uri, env)
        else:
            client.resolve(ref)

    once()                                           # a first call: connections, imports
    took = []
    for _ in range(runs):
        with record.timer() as t:
            once()
        took.append(t.wall)
    return took


def main() -> None:
    ap = record.parser(__doc__)
    ap.add_argument("-r", type=int, default=50, help="resolutions of each kind")
    ap.add_argument("--no-build", action="store_true", help="use the images as they are (no --no-cache builds)")
    ap.add_argument("--cuda", metavar="STACK", help="also build STACK for linux/arm64 under emulation, with checks")
    ap.add_argument("--mirror", default=str(ROOT.parent / "shared" / "mirror"), help="site mirror for --cuda")
    args = ap.parse_args()
    run = record.start("arch", args)
    from helpers.local_registry import running_registry

    with record.timer() as t:
        had_base = engine.image_exists(base_image.image_tag("debian:bookworm", "aarch64"))
        base_image.ensure(base_image.BaseRequest("debian:bookworm"), log=lambda *_: None)
        base_image.ensure(base_image.BaseRequest("debian:bookworm", arch="arm64"),
                          log=lambda m: print(f"  {m}", file=sys.stderr))
    base_s = None if had_base else t.wall

    rows = []
    work = Path(tempfile.mkdtemp(prefix="bench-arch-stack-"))
    if args.no_build:
        images = {p: stack.load("debian-mpi", platform=p).image for p in ("linux/amd64", "linux/arm64")}
    else:
        built = build_both(bench_stack(work), no_cache=True)
        images = {p: r.tags[0] for p, r in built}
        secs = {p: r.seconds for p, r in built}
        rows.append(("debian-mpi build, --no-cache (s)", f"{secs['linux/amd64']:.0f}", f"{secs['linux/arm64']:.0f}",
                     f"arm64/amd64 = {secs['linux/arm64'] / secs['linux/amd64']:.1f}x"))
    sizes = {p: engine.inspect(i).size for p, i in images.items()}
    rows.append(("debian-mpi image size (MB)", f"{sizes['linux/amd64'] / 1e6:.0f}", f"{sizes['linux/arm64'] / 1e6:.0f}",
                 f"arm64/amd64 = {sizes['linux/arm64'] / sizes['linux/amd64']:.2f}"))
    with tempfile.TemporaryDirectory(prefix="bench-arch-", dir="/var/tmp") as tmp:
        sqsh = {}
        for p, image in images.items():
            out = Path(tmp) / f"{p.replace('/', '-')}.sqsh"
            sqsh[p] = export_image(image, ExportRequest("enroot"), out).bytes
        rows.append(("its Enroot .sqsh (MB, fast preset)", f"{sqsh['linux/amd64'] / 1e6:.0f}",
                     f"{sqsh['linux/arm64'] / 1e6:.0f}", ""))
        with running_registry(Path(tmp) / "registry") as addr:
            push_image(images["linux/amd64"], f"{addr}/bench/arch:plain")
            push_platforms([images["linux/amd64"], images["linux/arm64"]], f"{addr}/bench/arch:index")
            before = resolve_times(f"docker://{addr}#bench/arch:plain", args.r, arch_check=False)
            plain = resolve_times(f"docker://{addr}#bench/arch:plain", args.r)
            index = resolve_times(f"docker://{addr}#bench/arch:index", args.r)

    med = statistics.median
    print(f"| measurement (this {platforms.host_machine()} machine, {os.cpu_count()} cores) | linux/amd64 | "
          f"linux/arm64 | |\n|---|---|---|---|")
    if base_s is not None:
        print(f"| arm64 base image (imagekit base --arch arm64) (s) | | {base_s:.0f} | emulated bootstrap |")
    for name, amd, arm, note in rows:
        print(f"| {name} | {amd} | {arm} | {note} |")
    added = (med(index) - med(before)) * 1000
    print(f"\n| importer resolution for this node, median of {args.r} (ms) | plain manifest, before (resolve "
          "only) | plain manifest, now (+ its config's arch) | OCI index (index + the node's manifest) | index "
          "added over before |\n|---|---|---|---|---|")
    print(f"| identify() | {med(before) * 1000:.1f} | {med(plain) * 1000:.1f} | {med(index) * 1000:.1f} | "
          f"{added:+.1f} (target < 20: {'met' if added < 20 else 'NOT met'}) |")

    cuda = None
    if args.cuda:
        s = stack.load(args.cuda, platform="linux/arm64", mirror=args.mirror)
        with record.timer() as t:
            result = build.build(s, build.BuildRequest(log_dir=LOGS))
            report = runner.run(result.tags[0], checks.stack_checks(s, "runtime"))
        took = t.wall
        c = report.counts()
        print(f"\n| {args.cuda} for linux/arm64, emulated | {took / 60:.0f} min build + checks | "
              f"{result.size_bytes / 1e9:.1f} GB | checks: {c['passed']} passed, {c['failed']} failed, "
              f"{c['not-run']} not run (GPU/fabric) |")
        cuda = {"stack": args.cuda, "build_and_checks_s": round(took, 1), "image_bytes": result.size_bytes,
                "checks": c}
    run.finish({"host_machine": platforms.host_machine(), "arm64_base_s": base_s,
                "rows": [{"measurement": name, "linux/amd64": amd, "linux/arm64": arm, "note": note}
                         for name, amd, arm, note in rows],
                "resolutions": args.r,
                "identify_ms": {"plain_before": [round(x * 1000, 3) for x in before],
                                "plain_now": [round(x * 1000, 3) for x in plain],
                                "index": [round(x * 1000, 3) for x in index]},
                "index_added_median_ms": round(added, 2), "cuda_arm64": cuda})


if __name__ == "__main__":
    main()
