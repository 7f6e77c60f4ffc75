#!/usr/bin/env python3
"""CI's heavy tier: the tests whose cold run takes many minutes, and when CI may leave them out.

The heavy tests (marked ``heavy``, or using a fixture that builds a CUDA, PyTorch, Debian 13 or arm64
image) cost most of a cold CI run: each builds toolchains and MPI stacks from source on an empty
build cache. CI leaves them out only when nothing they depend on has changed since they last passed,
which ``.ci/heavy-tier.json`` records:

- every recipe the heavy tests built, as the stack file's text, the site pins and the sha256 of the
  Dockerfile it rendered to; re-rendered with the current tree, a component, stack, check or
  recipe change shows as a different sha256;
- the sha256 of every file holding a heavy test, of the test support modules and data, and of the
  code that makes base images.

The record is written only by a run of the heavy tier that passed (``scripts/test.sh --heavy``):
a session that builds the images and runs the tests, never by hand. When the record does not match
the tree, CI runs the heavy tier too, and says which input changed. What the heavy tests exercise
beyond their builds (check, export, launch) is the fast tier's code, run there on debian-mpi.

    python3 scripts/heavy_tier.py status [--json]   # exit 0: the record matches; 1: stale (why)

Run with the venv's python (it renders stacks with imagekit).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from imagekit import render, stack

TOP = Path(__file__).resolve().parents[1]
RECORD = Path(os.environ.get("IMAGEKIT_HEAVY_RECORD_FILE") or TOP / ".ci" / "heavy-tier.json")
# Besides the test files themselves: what every heavy test stands on.
SUPPORT_GLOBS = ("tests/conftest.py", "tests/helpers/*.py", "tests/data/**/*", "tests/*/conftest.py",
                 "src/imagekit/base_image.py")
VERSION = 1


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def relative(path: Path) -> str:
    """A path as the record keeps it: relative to the checkout when inside it."""
    path = path.resolve()
    return str(path.relative_to(TOP)) if path.is_relative_to(TOP) else str(path)


def file_hashes(paths: list[str]) -> dict[str, str]:
    out = {}
    for rel in sorted(set(paths)):
        path = TOP / rel
        out[rel] = _sha256(path.read_bytes()) if path.is_file() else "missing"
    return out


def support_files() -> list[str]:
    """The helpers and data the heavy tests stand on. Another tier's test module (tests/test_*.py) is
    none of them: fixtures do not cross test modules, and the heavy test files are hashed on their own."""
    return sorted({str(p.relative_to(TOP)) for g in SUPPORT_GLOBS for p in TOP.glob(g) if p.is_file()
                   and "__pycache__" not in p.parts and not (p.parent == TOP / "tests" and p.name.startswith("test_"))})


@dataclass
class Build:
    """One recipe a heavy test built: enough to render it again from the current tree."""

    name: str          # the stack file's name (extends resolves by stack name)
    text: str          # the stack file's text
    variant: str | None
    mirror: bool       # rendered with the site mirror
    recipe: str        # sha256 of the Dockerfile it rendered to

    def key(self) -> tuple:
        return (self.name, self.text, self.variant, self.mirror)

    def render_now(self, mirror: str | None) -> str:
        """The sha256 of the Dockerfile this stack renders to with the current tree, or why not."""
        with tempfile.TemporaryDirectory(prefix="imagekit-heavy-") as tmp:
            path = Path(tmp) / self.name
            path.write_text(self.text)
            try:
                loaded = stack.load(str(path), self.variant, mirror=mirror if self.mirror else None)
                return render.recipe_hash(render.render(loaded, "docker"))
            except Exception as exc:  # any failure to render means: not the recipe that passed
                return f"unrenderable: {type(exc).__name__}: {exc}"


@dataclass
class Record:
    commit: str
    date: str
    machine: str
    seconds: float
    passed: int
    tests: dict[str, str]
    support: dict[str, str]
    pins: str
    builds: list[Build] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"version": VERSION, "commit": self.commit, "date": self.date, "machine": self.machine,
                "seconds": self.seconds, "passed": self.passed, "tests": self.tests, "support": self.support,
                "pins": self.pins, "builds": [b.__dict__ for b in self.builds]}

    @classmethod
    def from_dict(cls, data: dict) -> "Record":
        if data.get("version") != VERSION:
            raise ValueError(f"record version {data.get('version')!r}, not {VERSION}")
        return cls(**{k: data[k] for k in ("commit", "date", "machine", "seconds", "passed", "tests",
                                            "support", "pins")},
                   builds=[Build(**b) for b in data["builds"]])


# The tests' site pins (tests/conftest.py sets the same): the heavy builds take the mirror's files.
SITE_PINS = TOP / "tests" / "data" / "site-mirror-pins.yaml"


def pins_hash() -> str:
    site = os.environ.get("IMAGEKIT_SITE") or str(SITE_PINS)
    return _sha256(Path(site).read_bytes()) if Path(site).is_file() else "missing"


def mirror_dir() -> str | None:
    path = Path(os.environ.get("IMAGEKIT_TEST_MIRROR") or TOP.parent / "shared" / "mirror")
    return str(path) if (path / "SHA256SUMS").is_file() else None


def changes(record: Record) -> list[str]:
    """What differs between the record and the tree: empty when the heavy tier need not run."""
    out = []
    for rel, digest in file_hashes(list(record.tests)).items():
        if digest != record.tests[rel]:
            out.append(f"{rel} changed")
    now_support = file_hashes(support_files())
    for rel in sorted(set(now_support) | set(record.support)):
        if now_support.get(rel) != record.support.get(rel):
            out.append(f"{rel} {'added' if rel not in record.support else 'changed'}")
    if pins_hash() != record.pins:
        out.append("the site pins file changed")
    mirror = mirror_dir()
    for b in record.builds:
        now = b.render_now(mirror)
        if now != b.recipe:
            why = now if now.startswith("unrenderable") else "renders to a different recipe"
            out.append(f"stack {b.name}{' ' + b.variant if b.variant else ''}: {why}")
    return out


def load_record(path: Path = RECORD) -> Record | None:
    try:
        return Record.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None


def write_record(record: Record, path: Path = RECORD) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    tmp.write_text(json.dumps(record.as_dict(), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def head_commit() -> str:
    proc = subprocess.run(["git", "-C", str(TOP), "rev-parse", "--short=12", "HEAD"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    return proc.stdout.strip() or "unknown"


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"


def new_record(tests: list[str], builds: list[Build], seconds: float, passed: int) -> Record:
    unique: dict[tuple, Build] = {}
    for b in builds:
        unique.setdefault(b.key(), b)
    return Record(commit=head_commit(), date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), machine=machine(),
                  seconds=round(seconds, 1), passed=passed, tests=file_hashes(tests),
                  support=file_hashes(support_files()), pins=pins_hash(),
                  builds=sorted(unique.values(), key=lambda b: (b.name, b.variant or "", b.mirror)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example:\n  .venv/bin/python scripts/heavy_tier.py status\n"
                                        "  bash scripts/test.sh --heavy     # run the heavy tier; record it if it passes")
    ap.add_argument("action", choices=("status",))
    ap.add_argument("--json", action="store_true", help="one JSON object: fresh, record, changes")
    args = ap.parse_args(argv)
    os.environ.setdefault("IMAGEKIT_SITE", str(SITE_PINS))
    record = load_record()
    found = ["no record (.ci/heavy-tier.json)"] if record is None else changes(record)
    if args.json:
        print(json.dumps({"fresh": not found, "changes": found,
                          "record": None if record is None else {k: v for k, v in record.as_dict().items()
                                                                 if k in ("commit", "date", "machine", "seconds",
                                                                          "passed")}}))
    elif not found:
        print(f"heavy tier: unchanged since it passed at {record.commit} ({record.date}, {record.passed} tests, "
              f"{record.seconds / 60:.0f} min on {record.machine})")
    else:
        print("heavy tier: must run: " + "; ".join(found[:8]) + (f"; and {len(found) - 8} more" if len(found) > 8
                                                                  else ""))
    return 0 if not found else 1


if __name__ == "__main__":
    sys.exit(main())
