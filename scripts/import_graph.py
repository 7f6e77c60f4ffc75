#!/usr/bin/env python3
"""The import graph of src/imagekit, read from the source with ``ast`` (nothing is imported).

Every ``import imagekit…`` / ``from imagekit… import …`` / relative import is an edge, wherever it
sits: at module level, under ``if TYPE_CHECKING:`` or inside a function. ``from imagekit.a import b``
is an edge to ``imagekit.a.b`` when ``b`` is a module, else to ``imagekit.a``.

    python scripts/import_graph.py [--json]

prints the cycles (strongly connected components), the function-level imagekit imports, the longest
chain of imports, module sizes and the parameter counts of the library's entry points.
tests/test_import_layers.py uses the same functions to hold the layers written in docs/development.md.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = "imagekit"

# The library's front doors whose parameter counts issue 26 tracks: (module, qualified name).
ENTRY_POINTS = (
    ("imagekit.pipeline", "build_all"),
    ("imagekit.export", "export_image"),
    ("imagekit.build", "build"),
    ("imagekit.validate.system_yaml", "SectionReader.get"),
)


# The package whose modules are loaded by discovery, not by import statements.
PLUGINS = "imagekit.components"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str  # "module", "type-checking", "function", "discovery" or "table"
    line: int


def modules(src: Path = SRC) -> dict[str, Path]:
    """Module name -> file, for every .py under src/imagekit."""
    found = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, kind: str):
    """(import node, kind) for every import below ``node``; kind says where it sits."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, kind
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _walk(child, "function")
        elif isinstance(child, ast.If) and kind == "module" and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), "type-checking")
            for stmt in child.orelse:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), "module")
        else:
            yield from _walk(child, kind)


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name == PACKAGE or a.name.startswith(PACKAGE + ".")]
    base = node.module or ""
    if node.level:
        parts = module.split(".")
        if not is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    if not (base == PACKAGE or base.startswith(PACKAGE + ".")):
        return []
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in known else base)
    return out


def edges(src: Path = SRC) -> list[Edge]:
    mods = modules(src)
    known = set(mods)
    found = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        for node, kind in _walk(tree, "module"):
            for target in _targets(node, name, path.name == "__init__.py", known):
                if target != name and target in known:
                    found.append(Edge(name, target, kind, node.lineno))
        # A table's "imagekit.module:attribute" loads that module when its row is used
        # (imagekit.util.lazy): drawn as the edge it is.
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ":" in node.value:
                target = node.value.split(":", 1)[0]
                if target in known and target != name and node.value.startswith(PACKAGE + "."):
                    found.append(Edge(name, target, "table", node.lineno))
    # The component registry imports every component module by name when first asked for
    # (components/__init__.py): drawn here as the edges they are.
    found += [Edge(PLUGINS, name, "discovery", 0) for name in sorted(known)
              if name.startswith(PLUGINS + ".") and not name.rsplit(".", 1)[1].startswith("_")]
    return found


def graph(all_edges: list[Edge]) -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for e in all_edges:
        g.setdefault(e.source, set()).add(e.target)
        g.setdefault(e.target, set())
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def longest_chain(g: dict[str, set[str]]) -> list[str]:
    """The longest path of imports (modules in one cycle count once, as one node)."""
    comp_of: dict[str, str] = {}
    for component in cycles(g):
        for m in component:
            comp_of[m] = "{" + ", ".join(component) + "}"
    dag: dict[str, set[str]] = {}
    for a, targets in g.items():
        ca = comp_of.get(a, a)
        dag.setdefault(ca, set())
        for b in targets:
            cb = comp_of.get(b, b)
            if ca != cb:
                dag[ca].add(cb)
                dag.setdefault(cb, set())
    best: dict[str, list[str]] = {}

    def longest_from(n: str) -> list[str]:
        if n not in best:
            tails = [longest_from(t) for t in sorted(dag[n])]
            best[n] = [n] + max(tails, key=len, default=[])
        return best[n]

    sys.setrecursionlimit(10_000)
    return max((longest_from(n) for n in sorted(dag)), key=len, default=[])


def function_level(all_edges: list[Edge], src: Path = SRC) -> list[tuple[str, int]]:
    """(module, line) of each import *statement* of imagekit inside a function."""
    return sorted({(e.source, e.line) for e in all_edges if e.kind == "function"})


def sizes(src: Path = SRC) -> dict[str, int]:
    return {name: len(path.read_text().splitlines()) for name, path in modules(src).items()}


def parameter_counts(src: Path = SRC) -> dict[str, int]:
    """Parameters of each entry point (``self`` not counted; ``*args``/``**kw`` count one each)."""
    mods = modules(src)
    counts = {}
    for module, qualname in ENTRY_POINTS:
        body = ast.parse(mods[module].read_text()).body
        *owners, name = qualname.split(".")
        for owner in owners:
            body = next((n.body for n in body if isinstance(n, ast.ClassDef) and n.name == owner), [])
        for node in body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                a = node.args
                params = [p for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg not in ("self", "cls")]
                counts[f"{module}.{qualname}"] = (len(params) + (a.vararg is not None)
                                                  + (a.kwarg is not None))
    return counts


def report(src: Path = SRC) -> dict:
    all_edges = edges(src)
    g = graph(all_edges)
    fl = function_level(all_edges, src)
    chain = longest_chain(g)
    size = sizes(src)
    return {
        "modules": len(size),
        "lines": sum(size.values()),
        "edges": len({(e.source, e.target) for e in all_edges}),
        "cycles": cycles(g),
        "function_level_imports": len(fl),
        "function_level_modules": len({m for m, _ in fl}),
        "function_level": [f"{m}:{line}" for m, line in fl],
        "longest_chain": chain,
        "parameter_counts": parameter_counts(src),
        "largest_modules": dict(sorted(size.items(), key=lambda kv: -kv[1])[:12]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--src", type=Path, default=SRC, help="a src/ directory (default: this checkout's)")
    opts = parser.parse_args()
    r = report(opts.src)
    if opts.json:
        print(json.dumps(r, indent=2))
        return
    print(f"{r['modules']} modules, {r['lines']} lines, {r['edges']} import edges")
    print(f"cycles: {len(r['cycles'])}")
    for c in r["cycles"]:
        print(f"  {len(c)} modules: {' '.join(c)}")
    print(f"function-level imagekit imports: {r['function_level_imports']} statements "
          f"in {r['function_level_modules']} modules")
    print(f"longest chain ({len(r['longest_chain'])}): {' -> '.join(r['longest_chain'])}")
    print("entry-point parameters: " + ", ".join(f"{k} {v}" for k, v in r["parameter_counts"].items()))
    print("largest modules: " + ", ".join(f"{k} {v}" for k, v in r["largest_modules"].items()))


if __name__ == "__main__":
    main()
