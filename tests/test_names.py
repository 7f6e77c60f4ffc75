"""Names that say what they are (docs/development.md): read from the source with ``ast``, nothing imported.

- no two exception classes share a name, so an ``except`` or a traceback names one thing;
- no class is named ``Check`` outside ``imagekit.checks``, where a check is a spec an image must meet;
- no two module names differ only by a trailing ``s`` (``check``/``checks`` was a runner and the kinds).
"""

from __future__ import annotations

import ast
import builtins
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Each entry: a clash another change removes, kept here until it lands. The tests below also fail
# when an entry no longer clashes, so the entry goes with the clash.
PENDING_EXCEPTIONS: dict[str, str] = {}
PENDING_STEMS: dict[tuple[str, str], str] = {}


def _classes(src: Path) -> list[tuple[str, list[str], str]]:
    """(name, base names, where) for every class under ``src``/imagekit; a base is named by its last part."""
    out = []
    for path in sorted((src / "imagekit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = [b.attr if isinstance(b, ast.Attribute) else b.id if isinstance(b, ast.Name) else ""
                         for b in node.bases]
                out.append((node.name, bases, f"{path.relative_to(src)}:{node.lineno}"))
    return out


def exception_classes(src: Path = SRC) -> dict[str, list[str]]:
    """Exception class name -> where each class of that name is defined. A class is an exception
    when a base is a builtin exception or (by name) an exception class of the package."""
    classes = _classes(src)
    known = {n for n in dir(builtins) if isinstance(getattr(builtins, n), type)
             and issubclass(getattr(builtins, n), BaseException)}
    grew = True
    while grew:
        before = len(known)
        known |= {name for name, bases, _ in classes if any(b in known for b in bases)}
        grew = len(known) > before
    found: dict[str, list[str]] = defaultdict(list)
    for name, bases, where in classes:
        if any(b in known for b in bases):
            found[name].append(where)
    return dict(found)


def checks_outside_checks(src: Path = SRC) -> list[str]:
    return [where for name, _b, where in _classes(src)
            if name == "Check" and not where.startswith("imagekit/checks/")]


def module_stems(src: Path = SRC) -> dict[str, list[str]]:
    """The last part of each module's name (a package's own name for its ``__init__``) -> its modules."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted((src / "imagekit").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[parts[-1]].append(".".join(parts))
    return dict(found)


def stems_a_trailing_s_apart(src: Path = SRC) -> list[tuple[str, str]]:
    stems = module_stems(src)
    return sorted((s, s + "s") for s in stems if s + "s" in stems)


def test_no_two_exception_classes_share_a_name():
    shared = {n: w for n, w in exception_classes().items() if len(w) > 1}
    unexpected = {n: w for n, w in shared.items() if n not in PENDING_EXCEPTIONS}
    assert not unexpected, f"exception classes of one name: {unexpected}; give each its own"
    gone = sorted(set(PENDING_EXCEPTIONS) - set(shared))
    assert not gone, f"these names are unique now: remove them from PENDING_EXCEPTIONS: {gone}"


def test_no_class_named_check_outside_the_checks_package():
    assert checks_outside_checks() == [], "a check is imagekit.checks' spec; name this one for what it is"


def test_no_two_module_names_differ_by_a_trailing_s():
    pairs = stems_a_trailing_s_apart()
    unexpected = [p for p in pairs if p not in PENDING_STEMS]
    assert not unexpected, f"modules whose names differ by a trailing s: {unexpected}; name each for its job"
    gone = sorted(set(PENDING_STEMS) - set(pairs))
    assert not gone, f"these pairs are gone: remove them from PENDING_STEMS: {gone}"


def test_the_name_checks_catch_a_tree_that_breaks_them(tmp_path):
    """Each check above must be able to fail: a tiny package with a shared exception name (one of
    them through a package base class), a Check outside checks/ and a check/checks pair is caught."""
    pkg = tmp_path / "imagekit"
    (pkg / "checks").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("class ImagekitError(Exception):\n    pass\n")
    (pkg / "a.py").write_text("from imagekit import errors\n\nclass Missing(errors.ImagekitError):\n    pass\n")
    (pkg / "b.py").write_text("class Missing(LookupError):\n    pass\n\nclass Check:\n    pass\n")
    (pkg / "check.py").write_text("class NotAnError:\n    pass\n")
    (pkg / "checks" / "__init__.py").write_text("class Check:\n    pass\n")
    assert exception_classes(tmp_path) == {"ImagekitError": ["imagekit/errors.py:1"],
                                           "Missing": ["imagekit/a.py:3", "imagekit/b.py:1"]}
    assert checks_outside_checks(tmp_path) == ["imagekit/b.py:4"]
    assert stems_a_trailing_s_apart(tmp_path) == [("check", "checks")]
