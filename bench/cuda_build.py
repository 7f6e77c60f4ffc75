#!/usr/bin/env python3
"""Build benchmark for the offline CUDA stacks (debian-cuda, and the framework image debian-pytorch
on top of it), measured side by side in one run.

Reports: the cold build (BuildKit cache pruned: wheel downloads and source builds are
real), what each source build costs (BuildKit's per-step times, by component), the
no-change rebuild, runtime vs devel size (target: runtime/devel <= 0.40) and each
component's share of the runtime image. For a framework image, also its size beside the
published size of NVIDIA's NGC PyTorch container (cited, not measured here).

    python bench/cuda_build.py --mirror ../shared/mirror          # cold (prunes the cache)
    python bench/cuda_build.py --mirror ../shared/mirror --warm   # keep the cache
    python bench/cuda_build.py --mirror ../shared/mirror --warm --stack debian-pytorch
    python bench/cuda_build.py --log build/logs/debian-cuda-runtime.log   # costs of a logged cold build

--warm on a machine whose cache never saw the stack's current versions still builds every
changed layer for real (downloads included): the per-step costs of its log are cold costs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from imagekit import base_image, build, checks, stack  # noqa: E402
from imagekit.engines import docker as engine  # noqa: E402

LOGS = Path("build/bench-logs")
# A build step belongs to the component whose files it names.
STEP_OWNERS = (("pip install torch==", "pytorch"), ("-m venv", "python"), ("cuda-wheels", "cuda"), ("gdrcopy-", "gdrcopy"), ("ucx-", "ucx"), ("pmix-", "pmix"),
               ("openmpi-", "openmpi"), ("nccl-wheel", "nccl"), ("nccl-tests-", "nccl-tests"))
_STEP = re.compile(r"^#(\d+) \[(devel|runtime) +\d+/\d+\] (.*)$")
_DONE = re.compile(r"^#(\d+) DONE (\d+(?:\.\d+)?)s$")
# NGC's PyTorch container, as published (docs/reviews/field.md, "Image sizes"): about 20 GB (23.03) to
# 22 GB; pytorch/pytorch about 4 GB (hiyouga/LlamaFactory#4974, d4l3k/torchdrive#4).
NGC_PYTORCH_BYTES = (20e9, 22e9)
# What a framework image's venv holds, measured apart (the components' prefixes do not cover it).
VENV_PARTS = ("/opt/venv/lib/python3.11/site-packages/torch", "/opt/venv/lib/python3.11/site-packages/nvidia",
              "/opt/venv/lib/python3.11/site-packages/triton", "/opt/venv")


def step_seconds(log: Path) -> dict[str, float]:
    """Seconds of the devel stage's steps, summed by the component that owns them."""
    names, out = {}, {}
    for line in log.read_text().splitlines():
        if m := _STEP.match(line):
            if m.group(2) == "devel":
                names[m.group(1)] = m.group(3)
        elif (m := _DONE.match(line)) and m.group(1) in names:
            owner = next((c for key, c in STEP_OWNERS if key in names[m.group(1)]), "other (apt, layout)")
            out[owner] = out.get(owner, 0.0) + float(m.group(2))
    return out


def du(image: str, paths: list[str]) -> dict[str, int]:
    # -L for the prefixes (lib64 and /usr/local/cuda are links into them), not in the venv: there a link
    # to the stack's NCCL would count that library twice.
    script = ("for p in " + " ".join(paths) + "; do case $p in /opt/venv*) o=-sb ;; *) o=-sbL ;; esac; "
              "du $o \"$p\" 2>/dev/null || echo \"0 $p\"; done")
    text = subprocess.run([engine.docker_cli(), "run", "--rm", "--entrypoint", "sh", image, "-c", script],
                          capture_output=True, text=True, check=True).stdout
    return {line.split()[1]: int(line.split()[0]) for line in text.splitlines() if line.strip()}


def main() -> None:
    parser = record.parser(__doc__)
    parser.add_argument("--mirror", help="the site mirror of upstream release files")
    parser.add_argument("--warm", action="store_true", help="do not prune the build cache")
    parser.add_argument("--log", type=Path, help="only report the per-component costs in this build log")
    parser.add_argument("--stack", default="debian-cuda", help="debian-cuda (default) or debian-pytorch")
    args = parser.parse_args()
    run = record.start(f"cuda_build-{args.stack}" if not args.log else "cuda_build-log", args)
    if args.log:
        costs = step_seconds(args.log)
        total = sum(costs.values())
        print(f"devel-stage step time in {args.log}: {total:.0f} s")
        for owner, secs in sorted(costs.items(), key=lambda kv: -kv[1]):
            print(f"  {owner:<22} {secs:>7.1f} s  ({secs / total:.0%})")
        run.finish({"log": str(args.log), "devel_step_seconds": costs, "devel_step_total_s": round(total, 1)})
        return
    if not args.mirror:
        parser.error("--mirror is needed to build")
    base_image.ensure(base_image.BaseRequest("debian:bookworm"), log=lambda *_: None)
    cli = engine.docker_cli()
    s = stack.load(args.stack, mirror=args.mirror)
    rows = []
    if not args.warm:
        subprocess.run([cli, "rmi", "-f", s.image, s.image.replace(":latest", ":devel")], capture_output=True)
        subprocess.run([cli, "builder", "prune", "-af"], capture_output=True, check=True)
    first = build.build(s, build.BuildRequest(log_dir=LOGS))
    rows.append(("cold build (runtime)" if not args.warm else "build (warm cache)", first.seconds,
                 f"{first.steps} steps, {first.cached_steps} cached"))
    costs = step_seconds(Path(first.log))
    again = build.build(s, build.BuildRequest(log_dir=LOGS))
    rows.append(("no-change rebuild", again.seconds, f"{again.cached_steps}/{again.steps} steps cached"))
    devel = build.build(s, build.BuildRequest(target="devel", log_dir=LOGS))
    runtime_size, devel_size = again.size_bytes, devel.size_bytes

    print(f"{'measurement':<28} {'seconds':>8}  detail")
    for name, secs, detail in rows:
        print(f"{name:<28} {secs:>8.1f}  {detail}")
    print(f"no-change rebuild / first build = {rows[1][1] / rows[0][1]:.3f}")
    if not args.warm:
        print("\nsource builds and downloads in the cold build (BuildKit step time, devel stage):")
        for owner, secs in sorted(costs.items(), key=lambda kv: -kv[1]):
            print(f"  {owner:<22} {secs:>7.1f} s  ({secs / first.seconds:.0%} of the cold build)")
    ratio = runtime_size / devel_size
    print(f"\nimage sizes: devel {devel_size / 1e6:.0f} MB, runtime {runtime_size / 1e6:.0f} MB, "
          f"runtime/devel = {ratio:.2f} (target <= 0.40: {'met' if ratio <= 0.40 else 'NOT met'})")
    base = engine.client().images.get(s.base.runtime).attrs["Size"]
    prefixes = checks.elf_prefixes(s) + (list(VENV_PARTS) if s.has("pytorch") else [])
    sizes = du(s.image, prefixes)
    print("each component's share of the runtime image:")
    print(f"  {'base image':<22} {base / 1e6:>7.0f} MB  {base / runtime_size:>4.0%}")
    for comp in s.components.values():
        p = getattr(comp, "prefix", None)
        if p in sizes:
            print(f"  {comp.name:<22} {sizes[p] / 1e6:>7.0f} MB  {sizes[p] / runtime_size:>4.0%}  ({p})")
    for part in VENV_PARTS if s.has("pytorch") else ():
        print(f"  {part.rsplit('/', 1)[-1] + ' (venv)':<22} {sizes[part] / 1e6:>7.0f} MB  "
              f"{sizes[part] / runtime_size:>4.0%}  ({part})")
    rest = runtime_size - base - sum(v for k, v in sizes.items() if k not in VENV_PARTS) - sizes.get("/opt/venv", 0)
    print(f"  {'distro packages etc.':<22} {rest / 1e6:>7.0f} MB  {rest / runtime_size:>4.0%}")
    if s.has("pytorch"):
        low, high = NGC_PYTORCH_BYTES
        print(f"\nNGC PyTorch container (published): {low / 1e9:.0f}-{high / 1e9:.0f} GB; this runtime image "
              f"{runtime_size / 1e9:.1f} GB = {runtime_size / high:.2f}-{runtime_size / low:.2f} of it")
    run.finish({"stack": args.stack, "warm": args.warm,
                "rows": [{"measurement": name, "seconds": secs, "detail": detail} for name, secs, detail in rows],
                "devel_step_seconds": costs, "devel_bytes": devel_size, "runtime_bytes": runtime_size,
                "base_bytes": base, "path_bytes": sizes})


if __name__ == "__main__":
    main()
