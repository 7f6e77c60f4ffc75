"""Proof that a component is one new file: what the commit that added it touched, and who names it.

A component's own test calls :func:`assert_added_alone`. It reads the git history
of the checkout (CI runs a full clone of main), so a component that needed edits
elsewhere (a rule, a launcher's list, a test's hard-coded set) fails here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from imagekit.components import contract_problems, registry

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "imagekit"


def _git(*args: str) -> str:
    proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def assert_added_alone(module: str, name: str, external: tuple[str, ...] = ()) -> None:
    """The commit that added ``components/<module>.py`` touched only it and its tests, and no other
    source module names the component ``name``. ``external``: another project's names that contain
    it (a hook's annotation key, say), which are that project's vocabulary, not this component."""
    own = {f"src/imagekit/components/{module}.py"}
    tests = f"tests/components/test_{module}.py"
    if not (ROOT / ".git").exists():
        if os.environ.get("CI"):
            pytest.fail("CI needs a git checkout to prove the component was added alone", pytrace=False)
        pytest.skip("not a git checkout")
    if _git("rev-parse", "--is-shallow-repository").strip() == "true":
        pytest.fail("a shallow clone hides the commit that added the component; clone with full history",
                    pytrace=False)
    added = _git("log", "--diff-filter=A", "--format=%H", "--", *own).split()
    assert added, f"no commit adds {own}"
    touched = set(_git("show", "--name-only", "--format=", added[-1]).split())
    assert touched - own - {tests} == set(), \
        f"adding {name} ({added[-1][:12]}) also touched {sorted(touched - own - {tests})}"
    mentions = []
    for path in SOURCE.rglob("*"):
        if path.is_file() and path.suffix == ".py" and path.name != f"{module}.py":
            text = path.read_text(errors="replace")
            for word in external:
                text = text.replace(word, "")
            if name in text or module in text:
                mentions.append(str(path.relative_to(ROOT)))
    assert not mentions, f"{name} is named outside its module: {mentions}"


def assert_site_component_alone(path: Path, name: str) -> None:
    """A site component is one module outside imagekit: its file is not under imagekit's source,
    imagekit's source never names it, and it keeps the component contract the shipped ones keep."""
    assert not path.resolve().is_relative_to(SOURCE), f"{path} is inside imagekit's source"
    cls = registry()[name]
    assert cls.origin and path.name in cls.origin, cls.origin
    assert contract_problems(cls) == []
    mentions = [str(p.relative_to(ROOT)) for p in SOURCE.rglob("*.py") if name in p.read_text(errors="replace")]
    assert not mentions, f"{name} is named inside imagekit: {mentions}"
