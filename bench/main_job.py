#!/usr/bin/env python3
"""Benchmark: the main job (scripts/main-job.sh) on a fresh machine and warm, step by step.

A fresh machine cannot be had here, so each step is made fresh where it runs:

- the set-up's Debian packages: ``apt-get install`` of scripts/setup.sh's list in a new container of
  the base image (nothing installed, the archive's indexes fetched anew), paired with the list of
  ``--baseline`` (the set-up before the split: the tests' packages too), A B A B …;
- imagekit into a new virtual environment with no pip cache: ``pip install -e .`` (setup.sh) paired
  with ``-e '.[test]'`` (what setup.sh installed before);
- ``imagekit base debian:bookworm`` under a tag of its own (``--force``: bootstrapped anew from the
  archive, the shared base untouched), then removed;
- ``imagekit build STACK --export enroot,sif -o OUT`` with ``--no-cache`` and a new export store, for a
  copy of debian-mpi named ``main-job-probe`` (so the shared ``imagekit/debian-mpi`` tag is left alone):
  the build, its checks and both exports, cold;

and warm, as a second run of the job finds the machine (the same tree: a commit changes the image's
version label, hence its ID, and the exports convert again): ``bash scripts/setup.sh`` (everything there),
``imagekit base`` (the image exists), and the same build and exports again (the build cache and the
export store hold them). The sums are the job's fresh and warm times; every step is also reported.

    python bench/main_job.py [--runs 2] [--baseline 67b9026] [--skip setup,base,build,cold]
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parents[1]
BASE = "imagekit/debian:bookworm"
PROBE = "main-job-probe"
DOCKER = "/usr/bin/docker"


def packages(setup_sh: str) -> list[str]:
    """The PACKAGES=(...) list of a setup.sh's text."""
    m = re.search(r"^PACKAGES=\(([^)]*)\)", setup_sh, re.M)
    return m.group(1).split() if m else []


def apt_in_fresh_container(names: list[str]):
    def run() -> None:
        # No service starts in a container (policy-rc.d), as none is needed on the machine either.
        script = ("printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && "
                  "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                  f"--no-install-recommends {' '.join(names)} >/dev/null")
        subprocess.run([DOCKER, "run", "--rm", "--network", "host", BASE, "bash", "-c", script], check=True,
                       stdout=subprocess.DEVNULL)
    return run


def pip_in_fresh_venv(spec: str, work: Path):
    def run() -> None:
        venv = work / "venv"
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-cache-dir",
                        "--disable-pip-version-check", "-e", spec], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return run


def step(argv: list[str], env: dict[str, str] | None = None) -> dict:
    with record.timer() as t:
        subprocess.run(argv, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    return {"command": " ".join(argv), "wall_s": round(t.wall, 2), "cpu_s": round(t.cpu, 2),
            "load_after": round(os.getloadavg()[0], 2)}


def main() -> int:
    ap = record.parser(__doc__)
    ap.add_argument("--runs", type=int, default=2, help="paired rounds of the set-up's two halves")
    ap.add_argument("--baseline", default="67b9026", help="the commit whose setup.sh is the before")
    ap.add_argument("--skip", default="", help="steps left out: setup, base, build, cold (the build's cold run)")
    args = ap.parse_args()
    skip = set(args.skip.split(",")) - {""}
    run = record.start("main_job", args)
    imagekit = str(Path(sys.executable).parent / "imagekit")
    work = Path(tempfile.mkdtemp(prefix="imagekit-bench-main-job-", dir="/var/tmp"))
    out: dict = {"steps": {}}
    try:
        if "setup" not in skip:
            new = packages((ROOT / "scripts" / "setup.sh").read_text())
            old = packages(subprocess.run(["git", "-C", str(ROOT), "show", f"{args.baseline}:scripts/setup.sh"],
                                          capture_output=True, text=True, check=True).stdout)
            sides = {"apt, setup.sh's packages": apt_in_fresh_container(new),
                     "apt, the packages before": apt_in_fresh_container(old),
                     "pip install -e .": pip_in_fresh_venv(".", work),
                     "pip install -e .[test]": pip_in_fresh_venv(".[test]", work)}
            samples = record.alternate(sides, args.runs, warmup=0)
            out["packages"] = {"now": new, "before": old}
            out["setup"] = {"apt": record.paired(samples["apt, setup.sh's packages"], samples["apt, the packages before"],
                                                 "now", "before"),
                            "pip": record.paired(samples["pip install -e ."], samples["pip install -e .[test]"],
                                                 "now", "before")}
            for name, got in samples.items():
                out["steps"][name] = {"wall_s": record.spread([s.wall for s in got], 2)}
        if "base" not in skip:
            tag = f"imagekit-bench/main-job-base:{os.getpid()}"
            try:
                out["steps"]["imagekit base (fresh)"] = step([imagekit, "base", "debian:bookworm", "--tag", tag, "--force"])
            finally:
                subprocess.run([DOCKER, "rmi", tag], capture_output=True)
        if "build" not in skip:
            stacks = work / "stacks"
            stacks.mkdir()
            text = (ROOT / "src" / "imagekit" / "stacks" / "debian-mpi.yaml").read_text()
            (stacks / f"{PROBE}.yaml").write_text(text.replace("name: debian-mpi", f"name: {PROBE}", 1))
            env = {**os.environ, "IMAGEKIT_STORE": str(work / "store")}
            build = [imagekit, "--stacks-dir", str(stacks), "build", PROBE, "--export", "enroot,sif", "-o", str(work / "out")]
            try:
                if "cold" in skip:          # the image and its exports made untimed: only the warm run counts
                    subprocess.run(build, check=True, cwd=ROOT, env=env, capture_output=True)
                else:
                    out["steps"]["imagekit build --export enroot,sif (cold)"] = step([*build, "--no-cache"], env)
                out["steps"]["bash scripts/setup.sh (warm)"] = step(["bash", "scripts/setup.sh"])
                out["steps"]["imagekit base (warm)"] = step([imagekit, "base", "debian:bookworm"])
                out["steps"]["imagekit build --export enroot,sif (warm)"] = step(build, env)
            finally:
                subprocess.run([DOCKER, "rmi", f"imagekit/{PROBE}:latest"], capture_output=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    steps = out["steps"]

    def wall(name: str) -> float:
        step = steps.get(name) or {}
        return step["wall_s"]["median"] if isinstance(step.get("wall_s"), dict) else step.get("wall_s", 0.0)

    out["fresh_s"] = round(wall("apt, setup.sh's packages") + wall("pip install -e .") + wall("imagekit base (fresh)")
                           + wall("imagekit build --export enroot,sif (cold)"), 1)
    out["fresh_before_s"] = round(out["fresh_s"] - wall("apt, setup.sh's packages") - wall("pip install -e .")
                                  + wall("apt, the packages before") + wall("pip install -e .[test]"), 1)
    out["warm_s"] = round(wall("bash scripts/setup.sh (warm)") + wall("imagekit base (warm)")
                          + wall("imagekit build --export enroot,sif (warm)"), 1)
    for name in steps:
        print(f"{name}: {wall(name)} s", file=sys.stderr)
    print(f"fresh: {out['fresh_s']} s (with the set-up before the split: {out['fresh_before_s']} s); "
          f"warm: {out['warm_s']} s", file=sys.stderr)
    run.finish(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
