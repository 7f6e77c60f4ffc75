"""The package's layers, as docs/development.md's "Layers" table writes them, held against the import graph.

The graph comes from the source (scripts/import_graph.py, ``ast``; nothing is imported): every
``imagekit`` import at module level, under ``TYPE_CHECKING`` or inside a function is an edge.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
import import_graph  # noqa: E402

RUN_SIDE = ("launch", "launch.*", "validate", "validate.*")
BUILD_SIDE = ("components", "components.*", "stack", "rules", "render", "build", "image_facts.writer",
              "recipes.*")
def layers(text: str | None = None) -> list[tuple[int, str, list[str]]]:
    """(number, name, patterns) for each row of docs/development.md's layers table."""
    text = text if text is not None else (ROOT / "docs" / "development.md").read_text()
    m = re.search(r"<!-- layers:begin.*?-->\n(.*?)<!-- layers:end -->", text, re.S)
    assert m, "docs/development.md has no <!-- layers:begin --> ... <!-- layers:end --> table"
    rows = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit():
            rows.append((int(cells[0]), cells[1], re.findall(r"`([^`]+)`", cells[2])))
    return rows


def _short(module: str) -> str:
    return module.removeprefix("imagekit.") if module != "imagekit" else "imagekit"


def _matches(module: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(_short(module), p) for p in patterns)


def layer_of(module: str, rows) -> int | None:
    """The layer of the most specific pattern that matches (an exact name beats any wildcard)."""
    best: tuple[int, int] | None = None   # (specificity, layer)
    for number, _name, patterns in rows:
        for p in patterns:
            if fnmatch.fnmatchcase(_short(module), p):
                rank = 10_000 if "*" not in p else len(p)
                if best is None or rank > best[0]:
                    best = (rank, number)
    return best[1] if best else None


@pytest.fixture(scope="module")
def graph():
    edges = import_graph.edges()
    return edges, import_graph.graph(edges), layers()


def test_every_module_has_a_layer(graph):
    _edges, _g, rows = graph
    unplaced = [m for m in import_graph.modules() if layer_of(m, rows) is None]
    assert not unplaced, f"add these modules to docs/development.md's layers table: {unplaced}"


def test_no_import_cycle(graph):
    _edges, g, _rows = graph
    assert import_graph.cycles(g) == []


def test_imports_point_down(graph):
    edges, _g, rows = graph
    up = [f"{e.source}:{e.line} (layer {layer_of(e.source, rows)}) imports {e.target} "
          f"(layer {layer_of(e.target, rows)})"
          for e in edges if (layer_of(e.target, rows) or 0) > (layer_of(e.source, rows) or 0)]
    assert not up, "\n".join(up)


def test_a_package_init_sits_no_higher_than_its_modules(graph):
    """Importing ``a.b`` runs ``a/__init__``: a package above its own module would load the layers
    above that module with it."""
    _edges, _g, rows = graph
    bad = []
    for module in import_graph.modules():
        parts = module.split(".")
        for i in range(1, len(parts)):
            package = ".".join(parts[:i])
            if (layer_of(package, rows) or 0) > (layer_of(module, rows) or 0):
                bad.append(f"{package} (layer {layer_of(package, rows)}) holds {module} "
                           f"(layer {layer_of(module, rows)})")
    assert not bad, "\n".join(bad)


def _reach(g: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for n in g.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def _imports_hpccm(module: str) -> bool:
    tree = ast.parse(import_graph.modules()[module].read_text())
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        if any(n == "hpccm" or n.startswith("hpccm.") for n in names):
            return True
    return False


def test_the_run_side_never_reaches_the_build_side(graph):
    """launch and validate learn what the build knew from image labels, never by loading components
    (which loads HPCCM and every component module into each launch)."""
    _edges, g, _rows = graph
    bad = []
    for module in import_graph.modules():
        if not _matches(module, RUN_SIDE):
            continue
        reached = _reach(g, module) | {module}
        build = sorted(r for r in reached if _matches(r, BUILD_SIDE))
        hpccm = sorted(r for r in reached if _imports_hpccm(r))
        if build or hpccm:
            bad.append(f"{module} reaches {build + [f'hpccm (via {h})' for h in hpccm]}")
    assert not bad, "\n".join(bad)


def test_imports_sit_at_the_top(graph):
    """No module imports imagekit inside a function (docs/development.md, "Layers"). The deferred loadings are
    tables, not import statements: a row names its module (imagekit.util.lazy), drawn as a "table" edge."""
    edges, _g, _rows = graph
    inside = import_graph.function_level(edges)
    assert not inside, "move these imports to the top of their module: " + "; ".join(
        f"{m} line {line}" for m, line in inside)


def test_the_layer_checks_catch_a_broken_graph(tmp_path):
    """The checks above must be able to fail: a copy of a tiny package with an upward import and a
    cycle is caught."""
    pkg = tmp_path / "src" / "imagekit"
    (pkg / "launch").mkdir(parents=True)
    (pkg / "util").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "util" / "__init__.py").write_text("")
    (pkg / "util" / "errors.py").write_text("def f():\n    from imagekit import stack\n")
    (pkg / "stack.py").write_text("from imagekit.util import errors\n")
    (pkg / "launch" / "__init__.py").write_text("")
    (pkg / "launch" / "slurm.py").write_text("from imagekit import stack\n")
    edges = import_graph.edges(tmp_path / "src")
    g = import_graph.graph(edges)
    assert import_graph.cycles(g) == [["imagekit.stack", "imagekit.util.errors"]]
    rows = layers()
    up = [e for e in edges if layer_of(e.target, rows) > layer_of(e.source, rows)]
    assert [(e.source, e.target, e.kind) for e in up] == [("imagekit.util.errors", "imagekit.stack", "function")]
    assert import_graph.function_level(edges) == [("imagekit.util.errors", 2)]
    assert any(_matches(r, BUILD_SIDE) for r in _reach(g, "imagekit.launch.slurm"))
