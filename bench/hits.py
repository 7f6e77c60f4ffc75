#!/usr/bin/env python3
"""Benchmark: the three hit paths, whole processes, paired: the Pyxis importer's repeat hit, the signed
importer's, and a re-export of an unchanged image (an export store hit).

Pushes IMAGE to a local registry (Debian's docker-registry, started here) with its .sqsh and signed
statements (``imagekit push --with enroot --sign``), fills an importer store with one signed ``get`` and
an export store with one ``imagekit export``, stamps the reader, then runs every side in turn, A B C …
(``record.alternate``), ``--runs`` rounds after a warm-up round:

- ``get docker://…`` through ``imagekit-pyxis-importer`` (the repeat hit; goal < 0.1 s);
- the same through ``imagekit-pyxis-importer-signed`` with ``IMAGEKIT_POLICY``, the statements beside the
  entry (goal: adds < 20 ms over the plain one, pair by pair): a repeat hit, spared the check by the verdict
  the first get recorded (imagekit.export.pyxis_verdicts), and, this tree only, a hit checked in full (its
  verdicts removed first: a user's first hit of the entry, or the first after the policy changed);
- ``imagekit export IMAGE --to enroot -o OUT --force -q`` on the warm export store, and
  ``imagekit --version``, the CLI's own start (goal: the hit ≤ 2× the start);

each with this tree and, with ``--baseline-src DIR`` (e.g. ``git archive 67b9026 src | tar -x -C DIR``,
then ``DIR/src``), with that source as well, on the same stores: the before and after of each goal.
Each process is driven as its caller does (Pyxis: stdin /dev/null, SLURM_* and PYXIS_* set).

    python bench/hits.py [--image imagekit/debian:bookworm] [--runs 15] [--baseline-src /tmp/base/src]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
BIN = Path(sys.executable).parent
IMPORTER, SIGNED, CLI = BIN / "imagekit-pyxis-importer", BIN / "imagekit-pyxis-importer-signed", BIN / "imagekit"


class Sides:
    """The commands of one tree (this one, or the baseline's source through PYTHONPATH)."""

    def __init__(self, label: str, pythonpath: str | None, work: Path, uri: str, image: str, policy: Path) -> None:
        self.label, self.work, self.uri, self.image, self.policy = label, work, uri, image, policy
        self.extra = {"PYTHONPATH": pythonpath} if pythonpath else {}
        self.step = 0
        self.held: list[dict[str, str]] = []

    def env(self, **more: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PYXIS_", "IMAGEKIT_"))}
        store = self.work / "store"
        env.update(IMAGEKIT_STORE=str(store), PYXIS_RUNTIME_PATH=str(self.work / "run"), PYXIS_VERSION="0.24.0",
                   SLURM_JOB_ID="1", SLURM_STEP_ID=str(self.step), SLURM_JOB_UID=str(os.getuid()),
                   XDG_CACHE_HOME=str(self.work / "cache"), **self.extra)
        env.update(more)
        return env

    def get(self, exe: Path, verdict: bool | None = None, **more: str) -> Callable[[], None]:
        """A timed ``get``. ``verdict`` (the signed importer, this tree): True, a verdict recorded earlier must
        spare the check; False, the verdicts are removed first (a user's first hit, or the policy changed)."""
        def run() -> None:
            self.step += 1
            env = self.env(**more)
            if verdict is False:
                for old in (self.work / "cache" / "imagekit" / "verified").glob("policy-*.json"):
                    old.unlink()
            proc = subprocess.run([str(exe), "get", self.uri], stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, env=env)
            if proc.returncode != 0 or "store hit" not in proc.stderr:
                raise SystemExit(f"{self.label}: {exe.name} get is not a hit ({proc.returncode}): {proc.stderr}")
            if verdict is not None and ("checked before" in proc.stderr) != verdict:
                raise SystemExit(f"{self.label}: the verdict was {'not ' if verdict else ''}used: {proc.stderr}")
            self.held.append(env)
        return run

    def release(self) -> None:
        """Drop the holds of the gets so far (as Pyxis calls release after a step), untimed."""
        while self.held:
            subprocess.run([str(IMPORTER), "release"], env=self.held.pop(), stdin=subprocess.DEVNULL,
                           capture_output=True)

    def reexport(self) -> None:
        env = self.env(IMAGEKIT_STORE=str(self.work / "export-store"))
        proc = subprocess.run([str(CLI), "export", self.image, "--to", "enroot", "-o", str(self.work / "out.sqsh"),
                               "--force", "-q", "--json"], capture_output=True, text=True, env=env)
        if proc.returncode != 0 or '"store_hit": true' not in proc.stdout:
            raise SystemExit(f"{self.label}: the re-export is not a store hit: {proc.stdout}{proc.stderr}")

    def version(self) -> None:
        subprocess.run([str(CLI), "--version"], check=True, capture_output=True, env=self.env())


def main() -> int:
    ap = record.parser(__doc__)
    ap.add_argument("--image", default="imagekit/debian:bookworm", help="an engine image (its size does not matter)")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--baseline-src", help="an older imagekit's src directory: the before of every row")
    args = ap.parse_args()
    run = record.start("hits", args)
    record.byte_compile(ROOT / "src", *([args.baseline_src] if args.baseline_src else []))
    from helpers.local_registry import running_registry

    from signing import site_policy

    work = Path(tempfile.mkdtemp(prefix="imagekit-bench-hits-", dir="/var/tmp"))
    try:
        policy = site_policy(work)
        with running_registry(work / "registry") as addr:
            subprocess.run([str(CLI), "push", args.image, "--to", f"{addr}/bench/hits:1", "--with", "enroot",
                            "--sign", str(work / "ci.key"), "-q"], check=True, capture_output=True,
                           env={**os.environ, "IMAGEKIT_STORE": str(work / "push-store")})
            uri = f"docker://{addr}#bench/hits:1"
            trees = {"after": Sides("after", None, work, uri, args.image, policy)}
            if args.baseline_src:
                trees["before"] = Sides("before", str(Path(args.baseline_src).resolve()), work, uri, args.image,
                                        policy)
            now = trees["after"]
            # Fill both stores once (a signed get pulls the pushed artifact; an export converts), then
            # stamp the reader: every counted run is a repeat hit.
            subprocess.run([str(SIGNED), "get", uri], env=now.env(IMAGEKIT_POLICY=str(policy)),
                           stdin=subprocess.DEVNULL, check=True, capture_output=True)
            subprocess.run([str(CLI), "export", args.image, "--to", "enroot", "-o", str(work / "out.sqsh"), "-q"],
                           env=now.env(IMAGEKIT_STORE=str(work / "export-store")), check=True, capture_output=True)
            sides: dict[str, Callable[[], None]] = {}
            for name, tree in trees.items():
                sides[f"importer hit ({name})"] = tree.get(IMPORTER)
                sides[f"signed importer hit ({name})"] = tree.get(
                    SIGNED, verdict=True if name == "after" else None, IMAGEKIT_POLICY=str(policy))
                if name == "after":
                    sides[f"signed importer hit, checked in full ({name})"] = tree.get(
                        SIGNED, verdict=False, IMAGEKIT_POLICY=str(policy))
                sides[f"re-export hit ({name})"] = tree.reexport
                sides[f"imagekit --version ({name})"] = tree.version
            samples = record.alternate(sides, args.runs, after=lambda _side: [t.release() for t in trees.values()])
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = {}
    for name in trees:
        rows[f"signed vs plain importer hit ({name})"] = record.paired(
            samples[f"signed importer hit ({name})"], samples[f"importer hit ({name})"], "signed", "plain")
        if name == "after":
            rows[f"signed, checked in full, vs plain importer hit ({name})"] = record.paired(
                samples[f"signed importer hit, checked in full ({name})"], samples[f"importer hit ({name})"],
                "signed, checked in full", "plain")
        rows[f"re-export hit vs imagekit --version ({name})"] = record.paired(
            samples[f"re-export hit ({name})"], samples[f"imagekit --version ({name})"], "re-export hit", "--version")
    if "before" in trees:
        for side in ("importer hit", "signed importer hit", "re-export hit", "imagekit --version"):
            rows[f"{side}: after vs before"] = record.paired(samples[f"{side} (after)"], samples[f"{side} (before)"],
                                                             "after", "before")
    for name, row in rows.items():
        print(f"{name}: {record.describe(row)}; CPU {record.describe(row, 'cpu')}")
    for name, got in samples.items():
        s = record.spread([x.wall for x in got], 3)
        print(f"{name}: wall min / median / max {s['min']} / {s['median']} / {s['max']} s")
    run.finish({"image": args.image, "runs": args.runs, "baseline_src": args.baseline_src,
                "sides": {name: {"wall_s": record.spread([x.wall for x in got], 4),
                                 "cpu_s": record.spread([x.cpu for x in got], 4)} for name, got in samples.items()},
                "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
