#!/usr/bin/env python3
"""CI's heavy tier: the tests whose cold run takes many minutes, and when CI may leave them out.

The heavy tests (marked ``heavy``, or using a fixture that builds a CUDA, PyTorch, Debian 13 or arm64
image) cost most of a cold CI run. CI leaves them out only when nothing they depend on has changed
since they last passed. ``.ci/heavy-tier.json`` records, from a run of the heavy tier that passed:

- **code**: every file under ``src/`` and ``scripts/`` and ``pyproject.toml``. The heavy tests drive
  imagekit's CLI in subprocesses and run its files inside containers, which no import graph shows,
  so the rule is all of it. A Python file is hashed by its syntax tree: a change to comments or
  layout alone keeps the record; any other change, docstrings included, makes it stale;
- **tests**: every heavy test file, the conftests, ``tests/helpers`` and ``tests/data``;
- **builds**: for each image a heavy test built, the stack file by its path in the tree with every
  file its ``extends:`` chain read, and what it rendered to now: the recipe's sha256 and the sha256
  of its build labels (the checks JSON, the facts) without the version;
- the site pins file, the site mirror's ``SHA256SUMS``, the machine's architecture, and the Python that ran
  the tests (:func:`interpreter`): a record made under pyenv's 3.11.7 vouches nothing for Debian's 3.11.2.

Anything ``status`` cannot compute (an unreadable or hand-edited record, an unknown version, a stack
that no longer renders, a missing file or mirror) means the heavy tier must run, with the reason. The
record is written only by a run of every heavy test that passed (``scripts/test.sh --heavy``), never
by hand: it carries a seal over its own content, and a record whose seal does not match is refused.

    python3 scripts/heavy_tier.py status [--json]   # exit 0: the record matches; 1: must run (why)
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

TOP = Path(__file__).resolve().parents[1]
RECORD = Path(os.environ.get("IMAGEKIT_HEAVY_RECORD_FILE") or TOP / ".ci" / "heavy-tier.json")
VERSION = 3

# Fixtures whose cold build takes many minutes on two cores: a test using one is heavy.
HEAVY_FIXTURES = frozenset({"cuda_images", "cuda12_images", "pytorch_images"})
# What the heavy tests run, directly or through the CLI and the containers they start.
CODE_DIRS = ("src", "scripts")
CODE_FILES = ("pyproject.toml",)
# Besides the test files themselves: what every heavy test stands on.
SUPPORT_GLOBS = ("tests/conftest.py", "tests/*/conftest.py", "tests/helpers/*.py", "tests/data/**/*")
SKIP_PARTS = ("__pycache__", ".pytest_cache", ".hypothesis")
# The tests' site pins (tests/conftest.py sets the same): the heavy builds take the mirror's files.
SITE_PINS = "tests/data/site-mirror-pins.yaml"
EVERY_TEST = "every heavy test"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest(path: Path) -> str:
    """A file's sha256; for Python, of its syntax tree (comments and layout do not count)."""
    data = path.read_bytes()
    if path.suffix == ".py":
        try:
            return "ast:" + _sha256(ast.dump(ast.parse(data, str(path))).encode())
        except (SyntaxError, ValueError):
            pass   # a file that does not parse is hashed whole: it differs from any that passed
    return _sha256(data)


@dataclass(frozen=True)
class Tree:
    """A checkout whose heavy-tier inputs are read: this one, or a copy (the self-test's)."""

    root: Path = TOP

    def rel(self, path: Path) -> str:
        """A path as the record keeps it: relative to the checkout when inside it."""
        path = Path(path).resolve()
        return str(path.relative_to(self.root.resolve())) if path.is_relative_to(self.root.resolve()) else str(path)

    def _files(self, top: Path) -> list[str]:
        return [self.rel(p) for p in top.rglob("*") if p.is_file() and not p.is_symlink()
                and not any(part in SKIP_PARTS or part.endswith(".egg-info") for part in p.parts)
                and p.suffix != ".pyc"]

    def code_files(self) -> list[str]:
        out = [f for d in CODE_DIRS for f in self._files(self.root / d)]
        return sorted(out + [f for f in CODE_FILES if (self.root / f).is_file()])

    def support_files(self) -> list[str]:
        """Helpers, conftests and data. Another tier's test module is none of them: fixtures do not
        cross test modules, and the heavy test files are hashed on their own."""
        found = {self.rel(p) for g in SUPPORT_GLOBS for p in self.root.glob(g)
                 if p.is_file() and not any(part in SKIP_PARTS for part in p.parts)}
        return sorted(found)

    def hashes(self, paths) -> dict[str, str]:
        out = {}
        for rel in sorted(set(paths)):
            path = self.root / rel
            out[rel] = digest(path) if path.is_file() else "missing"
        return out

    def inputs(self, tests) -> dict[str, str]:
        return self.hashes([*self.code_files(), *self.support_files(), *tests])

    def pins_hash(self) -> str:
        site = Path(os.environ.get("IMAGEKIT_SITE") or self.root / SITE_PINS)
        return _sha256(site.read_bytes()) if site.is_file() else "missing"

    def mirror_dir(self) -> Path | None:
        path = Path(os.environ.get("IMAGEKIT_TEST_MIRROR") or self.root.parent / "shared" / "mirror")
        return path if (path / "SHA256SUMS").is_file() else None

    def mirror_hash(self) -> str:
        mirror = self.mirror_dir()
        return _sha256((mirror / "SHA256SUMS").read_bytes()) if mirror else "missing"

    def heavy_test_files(self) -> list[str]:
        """Test files that hold a heavy test, read from their source: a test marked ``heavy`` (itself or
        its module), or one that uses a heavy fixture, directly or through a fixture of its module."""
        return sorted(self.rel(p) for p in (self.root / "tests").rglob("test_*.py")
                      if "helpers" not in p.parts and _holds_heavy_test(p))


def _holds_heavy_test(path: Path) -> bool:
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (SyntaxError, ValueError, OSError):
        return True   # cannot tell: count it (fail closed)
    nodes = list(ast.walk(tree))
    # `mark.heavy` anywhere in the code: on a test, a class, a module's pytestmark or a fixture's params.
    if any(isinstance(n, ast.Attribute) and n.attr == "heavy" and isinstance(n.value, ast.Attribute)
           and n.value.attr == "mark" for n in nodes):
        return True
    funcs = {n.name: {a.arg for a in n.args.args} for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    heavy = set(HEAVY_FIXTURES)
    while True:   # a module's fixture that takes a heavy fixture is heavy too
        more = {name for name, used in funcs.items() if used & heavy} - heavy
        if not more:
            return any(name.startswith("test_") for name in heavy & set(funcs))
        heavy |= more


def stack_files(path: Path, site=None) -> list[Path]:
    """The stack file at ``path`` and every parent its ``extends:`` chain reads, child first."""
    from imagekit import stack
    return stack.files_read(path, site)


def label_digest(loaded, target: str, recipe: str) -> str:
    """The sha256 of what the build labels an image with (checks and facts), less the version, which
    names the commit and so changes at every commit without changing the image."""
    from imagekit.image_facts import VERSION as VERSION_LABEL
    from imagekit.image_facts import writer
    labels = {k: v for k, v in writer.build_labels(loaded, target, recipe).items() if k != VERSION_LABEL}
    return _sha256(json.dumps(labels, sort_keys=True).encode())


@dataclass
class Build:
    """One image a heavy test built: enough to load and render it again from the tree as it is now."""

    stack: str | None  # the stack file, relative to the checkout; None for a file a test wrote
    name: str          # the file's name (a stack without `name:` is named after it)
    text: str | None   # a test-written stack's text (its test file is an input); None for the tree's
    files: dict[str, str]  # every file its extends chain read, and its digest
    variant: str | None
    arch: str
    target: str
    mirror: bool       # rendered with the site mirror
    recipe: str        # sha256 of the Dockerfile it rendered to
    labels: str        # label_digest
    tests: list[str] = field(default_factory=list)   # the heavy test files it fed

    @property
    def title(self) -> str:
        what = self.stack or f"written by {', '.join(self.tests) or 'a heavy test'}"
        return f"stack {what} ({self.arch}, {self.target}{', ' + self.variant if self.variant else ''})"

    def key(self) -> tuple:
        return (self.stack, self.text, self.variant, self.arch, self.target, self.mirror)

    @classmethod
    def of(cls, tree: Tree, loaded, target: str, recipe: str, tests=()) -> "Build":
        """The row for ``loaded`` (an imagekit Stack) built as ``target`` to ``recipe``."""
        path = Path(loaded.file)
        inside = tree.rel(path) != str(path.resolve())
        return cls(stack=tree.rel(path) if inside else None, name=path.name, text=None if inside else path.read_text(),
                   files=tree.hashes(tree.rel(p) for p in stack_files(path)) if inside else {},
                   variant=loaded.name if loaded.variant else None, arch=loaded.base.arch, target=target,
                   mirror=loaded.mirror is not None, recipe=recipe, labels=label_digest(loaded, target, recipe),
                   tests=sorted(set(tests)))

    def render_now(self, tree: Tree, mirror: Path | None) -> tuple[str, str]:
        """(recipe sha256, label digest) of this build from the tree as it is now; raises when it
        cannot be loaded or rendered."""
        from imagekit import render, stack
        if self.mirror and mirror is None:
            raise FileNotFoundError("the site mirror (../shared/mirror or IMAGEKIT_TEST_MIRROR) is missing")
        with tempfile.TemporaryDirectory(prefix="imagekit-heavy-") as tmp:
            if self.stack is not None:
                path = tree.root / self.stack
            else:
                path = Path(tmp) / self.name
                path.write_text(self.text or "")
            loaded = stack.load(str(path), self.variant, mirror=str(mirror) if self.mirror else None,
                                platform=self.arch)
            recipe = render.recipe_hash(render.render(loaded, "docker"))
            return recipe, label_digest(loaded, self.target, recipe)


RECORD_KEYS = ("commit", "date", "machine", "arch", "python", "load", "seconds", "passed", "tests", "inputs",
               "pins", "mirror", "builds")


@dataclass
class Record:
    commit: str
    date: str
    machine: str
    arch: str
    python: str                 # interpreter(): the Python the heavy tests ran under
    load: str
    seconds: float
    passed: int
    tests: list[str]            # the heavy test files
    inputs: dict[str, str]      # every file hashed: code, support and the heavy test files
    pins: str
    mirror: str
    builds: list[Build] = field(default_factory=list)

    def body(self) -> dict:
        return {"version": VERSION, **{k: getattr(self, k) for k in RECORD_KEYS if k != "builds"},
                "builds": [asdict(b) for b in self.builds]}

    def as_dict(self) -> dict:
        body = self.body()
        return {**body, "seal": seal(body)}

    @classmethod
    def from_dict(cls, data) -> "Record":
        """The record, or ValueError saying why it cannot be trusted."""
        if not isinstance(data, dict):
            raise ValueError("the record is not a JSON object")
        if data.get("version") != VERSION:
            raise ValueError(f"record version {data.get('version')!r}; this script reads version {VERSION}")
        body = {k: v for k, v in data.items() if k != "seal"}
        if data.get("seal") != seal(body):
            raise ValueError("its seal does not match its content (edited by hand, or truncated); only a "
                             "passing run of the heavy tier writes a record")
        missing = [k for k in RECORD_KEYS if k not in data]
        if missing:
            raise ValueError(f"the record lacks {', '.join(missing)}")
        try:
            return cls(**{k: data[k] for k in RECORD_KEYS if k != "builds"},
                       builds=[Build(**b) for b in data["builds"]])
        except TypeError as exc:
            raise ValueError(f"a build row is not one this script writes ({exc})") from None


def seal(body: dict) -> str:
    return _sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


@dataclass(frozen=True)
class Change:
    """One input that differs from the record, and the heavy tests it feeds."""

    what: str
    feeds: tuple[str, ...] = (EVERY_TEST,)

    def line(self) -> str:
        return f"{self.what}: feeds {', '.join(self.feeds)}"


def _helper_users(tree: Tree, tests: list[str]) -> dict[str, set[str]]:
    """tests/helpers/X.py -> the heavy test files that import helpers.X, directly or through other helpers."""
    def imported(path: Path) -> set[str]:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return set()
        names = set(re.findall(r"\bhelpers\.(\w+)", text))
        for group in re.findall(r"from helpers import \(?([\w ,\n]+)\)?", text):
            names.update(n.strip() for n in group.replace("\n", ",").split(",") if n.strip())
        return {f"tests/helpers/{n}.py" for n in names}
    users: dict[str, set[str]] = {}
    for test in tests:
        seen, todo = set(), imported(tree.root / test)
        while todo:
            helper = todo.pop()
            if helper not in seen:
                seen.add(helper)
                todo |= imported(tree.root / helper) - seen
        for helper in seen:
            users.setdefault(helper, set()).add(test)
    return users


def _feeds(rel: str, record: Record, users: dict[str, set[str]]) -> tuple[str, ...]:
    if rel in record.tests:
        return (rel,)
    if rel.startswith("tests/helpers/") and rel.endswith(".py") and rel != "tests/helpers/__init__.py":
        return tuple(sorted(users.get(rel, ()))) or ("no heavy test (no heavy test imports it)",)
    if rel.endswith("/conftest.py") and rel != "tests/conftest.py":
        under = tuple(t for t in record.tests if t.startswith(rel.rsplit("/", 1)[0] + "/"))
        return under or ("no heavy test (none below it)",)
    return (EVERY_TEST,)


def changes(record: Record, tree: Tree = Tree()) -> list[Change]:
    """What differs between the record and the tree: empty when the heavy tier need not run."""
    out: list[Change] = []
    if record.arch != platform.machine():
        out.append(Change(f"the record was made on {record.arch}, this machine is {platform.machine()}"))
    if record.python != interpreter():
        out.append(Change(f"the record was made under {record.python}, the tests run under {interpreter()}"))
    users = _helper_users(tree, record.tests)
    now = tree.inputs(record.tests)
    # A stack file a build read is reported with that build, which names the tests it fed.
    by_build = {rel for b in record.builds for rel in b.files}
    for rel in sorted(set(now) | set(record.inputs)):
        if now.get(rel) != record.inputs.get(rel) and rel not in by_build:
            how = ("added" if rel not in record.inputs else "removed" if rel not in now or now[rel] == "missing"
                   else "changed")
            out.append(Change(f"{rel} {how}", _feeds(rel, record, users)))
    for rel in sorted(set(tree.heavy_test_files()) - set(record.tests)):
        out.append(Change(f"{rel} holds heavy tests the record never ran", (rel,)))
    if tree.pins_hash() != record.pins:
        out.append(Change("the site pins file changed"))
    if tree.mirror_hash() != record.mirror:
        out.append(Change("the site mirror's SHA256SUMS changed" if tree.mirror_hash() != "missing"
                          else "the site mirror is missing (../shared/mirror or IMAGEKIT_TEST_MIRROR)"))
    mirror = tree.mirror_dir()
    for b in record.builds:
        feeds = tuple(b.tests) or (EVERY_TEST,)
        try:
            if b.stack is not None:
                chain = tree.hashes(tree.rel(p) for p in stack_files(tree.root / b.stack))
                for rel in sorted(set(chain) | set(b.files)):
                    if chain.get(rel) != b.files.get(rel):
                        how = ("changed" if rel in b.files and rel in chain else
                               "is new in its extends chain" if rel in chain else "is no longer in its extends chain")
                        out.append(Change(f"{b.title}: {rel} {how}", feeds))
            recipe, labels = b.render_now(tree, mirror)
        except Exception as exc:  # noqa: BLE001 - any failure to render means: not the recipe that passed
            out.append(Change(f"{b.title}: cannot be rendered now ({type(exc).__name__}: {exc})", feeds))
            continue
        if recipe != b.recipe:
            out.append(Change(f"{b.title}: renders to a different recipe", feeds))
        if labels != b.labels:
            out.append(Change(f"{b.title}: its build labels (checks, facts) differ", feeds))
    return out


def load_record(path: Path = RECORD) -> Record | None:
    """The record at ``path``; None when there is none; ValueError when it cannot be trusted."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"it is not JSON ({exc.msg} at line {exc.lineno}): truncated or edited by hand") from None
    return Record.from_dict(data)


def write_record(record: Record, path: Path = RECORD) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    tmp.write_text(json.dumps(record.as_dict(), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def head_commit(tree: Tree = Tree()) -> str:
    proc = subprocess.run(["git", "-C", str(tree.root), "rev-parse", "--short=12", "HEAD"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    return proc.stdout.strip() or "unknown"


def machine() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB"


def interpreter() -> str:
    """The Python running this (the venv's: test.sh runs ``status`` and pytest with it): implementation,
    version and the real path of the interpreter a venv was made from."""
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    return f"{platform.python_implementation()} {platform.python_version()} ({base})"


def new_record(tests, builds: list[Build], seconds: float, passed: int, *, load_at_start: float | None = None,
               tree: Tree = Tree()) -> Record:
    unique: dict[tuple, Build] = {}
    for b in builds:
        if b.key() in unique:
            unique[b.key()].tests = sorted(set(unique[b.key()].tests) | set(b.tests))
        else:
            unique[b.key()] = b
    load = f"{os.getloadavg()[0]:.1f} at the end"
    if load_at_start is not None:
        load = f"{load_at_start:.1f} at the start, {load}"
    tests = sorted(set(tests))
    return Record(commit=head_commit(tree), date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), machine=machine(),
                  arch=platform.machine(), python=interpreter(), load=load, seconds=round(seconds, 1), passed=passed,
                  tests=tests, inputs=tree.inputs(tests), pins=tree.pins_hash(), mirror=tree.mirror_hash(),
                  builds=sorted(unique.values(), key=lambda b: (b.stack or "", b.text or "", b.variant or "",
                                                                 b.arch, b.target, b.mirror)))


def status(tree: Tree = Tree(), path: Path = RECORD) -> tuple[Record | None, list[Change]]:
    """The record and what differs; anything that cannot be computed is a change (fail closed)."""
    try:
        record = load_record(path)
    except (OSError, ValueError) as exc:
        return None, [Change(f"{tree.rel(path)} cannot be trusted: {exc}")]
    if record is None:
        return None, [Change(f"no record ({tree.rel(path)})")]
    try:
        return record, changes(record, tree)
    except Exception as exc:  # noqa: BLE001 - a comparison that cannot be made is not a match
        return record, [Change(f"the record cannot be compared with the tree ({type(exc).__name__}: {exc})")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example:\n  .venv/bin/python scripts/heavy_tier.py status\n"
                                        "  bash scripts/test.sh --heavy     # run the heavy tier; record it if it passes")
    ap.add_argument("action", choices=("status",))
    ap.add_argument("--json", action="store_true", help="one JSON object: fresh, record, changes")
    args = ap.parse_args(argv)
    os.environ.setdefault("IMAGEKIT_SITE", str(TOP / SITE_PINS))
    record, found = status()
    if args.json:
        print(json.dumps({"fresh": not found, "changes": [{"input": c.what, "feeds": list(c.feeds)} for c in found],
                          "record": None if record is None else {k: getattr(record, k) for k in
                                                                 ("commit", "date", "machine", "load", "seconds",
                                                                  "passed")}}))
    elif not found:
        print(f"heavy tier: unchanged since it passed at {record.commit} ({record.date}, {record.passed} tests, "
              f"{record.seconds / 60:.0f} min on {record.machine})")
    elif record is None:
        print(f"heavy tier: must run: {found[0].what}")
    else:
        print(f"heavy tier: must run: {len(found)} input{'s' * (len(found) != 1)} changed since the record at "
              f"{record.commit} ({record.date}):")
        for c in found[:40]:
            print(f"  - {c.line()}")
        if len(found) > 40:
            print(f"  - and {len(found) - 40} more (--json lists them all)")
    return 0 if not found else 1


if __name__ == "__main__":
    # Render with this checkout's imagekit, not whichever one the interpreter has installed: a copy of
    # the tree (the self-test's) is judged by its own code.
    sys.path.insert(0, str(TOP / "src"))
    sys.exit(main())
