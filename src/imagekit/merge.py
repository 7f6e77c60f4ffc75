"""How a child stack's keys merge into its parent's (``extends:``), and a matrix overlay into its stack.

Mappings merge key by key and the child wins. Scalars are replaced. Lists are replaced too, except
the lists a site adds to rather than restates, which are *appended* to the parent's:

- ``checks`` (a check is known by its ``name``),
- ``packages.devel`` and ``packages.runtime`` (a package by its name; a per-distro item by any
  of the names it gives),
- any component's ``packages`` and ``pip`` (``python.packages``; a pip requirement by its project
  name, so ``numpy==2.1.3`` in the child replaces ``numpy==1.26.4`` in the parent).

In an appended list, a child item whose name the parent already has replaces the parent's item in
place; ``{remove: NAME}`` drops the parent's item of that name, and ``{remove: "*"}`` every item
the parent had (so ``[{remove: "*"}, a, b]`` replaces the whole list). A ``remove`` that matches
nothing is an error naming its file and line: a typo must not leave the parent's item in place.
docs/site-extensions.md says the same for stack writers.
"""

from __future__ import annotations

import re
from typing import Any

from imagekit.util.errors import StackError
from imagekit.util.yamlpos import PosDict, PosList

# Key paths whose lists append; "*" matches any one key (a component's name).
APPENDED = (("checks",), ("packages", "devel"), ("packages", "runtime"),
            ("components", "*", "packages"), ("components", "*", "pip"))
REMOVE = "remove"
ALL = "*"
_PROJECT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def appended(path: tuple[str, ...]) -> bool:
    """True when the list at ``path`` (keys from the stack's top) appends to its parent's."""
    return any(len(rule) == len(path) and all(r in ("*", p) for r, p in zip(rule, path)) for rule in APPENDED)


def merge(parent: Any, child: Any, path: tuple[str, ...] = (), *, parent_file: str | None = None) -> Any:
    """``child`` merged over ``parent`` (either may be None: nothing there). ``parent_file`` names
    the parent in errors about a ``remove`` that matches nothing."""
    if isinstance(child, dict) and (parent is None or isinstance(parent, dict)):
        parent = parent if parent is not None else PosDict()
        out = PosDict(file=getattr(child, "file", None), line=getattr(child, "line", None))
        for key, value in parent.items():
            out[key] = value
            out.where[key] = parent.pos(key) if hasattr(parent, "pos") else (None, None)
        for key, value in child.items():
            out[key] = merge(parent.get(key), value, (*path, str(key)), parent_file=parent_file)
            out.where[key] = child.pos(key) if hasattr(child, "pos") else (None, None)
        return out
    if isinstance(child, list) and appended(path) and (parent is None or isinstance(parent, list)):
        return _append(parent or PosList(), child, path, parent_file)
    return child


def _append(parent: list, child: list, path: tuple[str, ...], parent_file: str | None) -> PosList:
    out = PosList(file=getattr(child, "file", None), line=getattr(child, "line", None))
    out.files = []
    for i, item in enumerate(parent):
        out.append(item)
        out.lines.append(_line(parent, i))
        out.files.append(_file(parent, i))
    inherited = len(out)
    key = ".".join(path)
    for i, item in enumerate(child):
        line, file = _line(child, i), _file(child, i)
        if isinstance(item, dict) and REMOVE in item:
            target = item[REMOVE]
            if len(item) != 1 or not isinstance(target, str) or not target:
                raise StackError("a remove item is `{remove: NAME}` alone", file=file, line=line,
                                 key=f"{key}[{i + 1}]",
                                 hint=f'e.g. `- {{remove: {_example(path)}}}`, or `- {{remove: "*"}}` for every '
                                      "inherited item")
            hits = [j for j in range(inherited) if out[j] is not None and (target == ALL
                                                                          or target in names(out[j], path))]
            if not hits:
                have = sorted({n for j in range(inherited) if out[j] is not None for n in names(out[j], path)})
                raise StackError(f"removes {target!r}, which {_whose(parent_file)} does not have", file=file,
                                 line=line, key=f"{key}[{i + 1}]",
                                 hint=("inherited: " + ", ".join(have)) if have else
                                 "nothing is inherited here: drop the remove item")
            for j in hits:
                out[j] = None     # a hole: later items keep their positions until the end
            continue
        mine = names(item, path)
        same = [j for j in range(inherited) if out[j] is not None and mine & names(out[j], path)]
        if same:
            out[same[0]], out.lines[same[0]], out.files[same[0]] = item, line, file
            for j in same[1:]:
                out[j] = None
        else:
            out.append(item)
            out.lines.append(line)
            out.files.append(file)
    keep = [j for j, item in enumerate(out) if item is not None]
    result = PosList([out[j] for j in keep], file=out.file, line=out.line)
    result.lines = [out.lines[j] for j in keep]
    result.files = [out.files[j] for j in keep]
    return result


def names(item: Any, path: tuple[str, ...]) -> set[str]:
    """What an item of the list at ``path`` is known by (empty: never matched, always appended)."""
    if path == ("checks",):
        return {item["name"]} if isinstance(item, dict) and isinstance(item.get("name"), str) else set()
    if path[-1] == "pip" and isinstance(item, str):
        m = _PROJECT.match(item.strip())
        return {_normalise(m.group())} if m else {item}
    if isinstance(item, str):
        return {item}
    if isinstance(item, dict):   # a per-distro package: {debian12: libfoo1, debian13: libfoo2}
        return {v for v in item.values() if isinstance(v, str)}
    return set()


def strip_removes(data: Any, path: tuple[str, ...] = ()) -> Any:
    """A stack that extends nothing: any ``remove`` item in it has nothing to remove (an error)."""
    return merge(None, data, path, parent_file=None)


def _normalise(project: str) -> str:
    return re.sub(r"[-_.]+", "-", project).lower()


def _whose(parent_file: str | None) -> str:
    return f"the parent ({parent_file})" if parent_file else "nothing this stack extends"


def _example(path: tuple[str, ...]) -> str:
    return {"checks": "mpi4py-ring", "pip": "numpy"}.get(path[-1], "htop")


def _line(items: list, i: int) -> int | None:
    lines = getattr(items, "lines", [])
    return lines[i] if i < len(lines) else getattr(items, "line", None)


def _file(items: list, i: int) -> str | None:
    files = getattr(items, "files", [])
    return files[i] if i < len(files) and files[i] else getattr(items, "file", None)


def diff(parent: Any, child: Any, path: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """What ``child`` (a merged stack) changed from ``parent``: one entry per added (``+``), removed
    (``-``) or changed (``~``) key or appended-list item, in the parent's key order."""
    key = ".".join(path)
    if isinstance(parent, dict) and isinstance(child, dict):
        out: list[dict[str, Any]] = []
        for k in [*parent, *(k for k in child if k not in parent)]:
            sub = (*path, str(k))
            if k not in child:
                out.append({"op": "-", "key": ".".join(sub), "parent": _plain(parent[k])})
            elif k not in parent:
                out.append({"op": "+", "key": ".".join(sub), "child": _plain(child[k])})
            else:
                out += diff(parent[k], child[k], sub)
        return out
    if isinstance(parent, list) and isinstance(child, list) and appended(path):
        before = {_ident(i, path): i for i in parent}
        after = {_ident(i, path): i for i in child}
        out = [{"op": "-", "key": key, "item": k} for k in before if k not in after]
        out += [{"op": "~", "key": key, "item": k, "parent": _plain(before[k]), "child": _plain(after[k])}
                for k in before if k in after and _plain(before[k]) != _plain(after[k])]
        return out + [{"op": "+", "key": key, "item": k} for k in after if k not in before]
    if _plain(parent) != _plain(child):
        return [{"op": "~", "key": key, "parent": _plain(parent), "child": _plain(child)}]
    return []


def _ident(item: Any, path: tuple[str, ...]) -> str:
    known = sorted(names(item, path))
    return known[0] if known else repr(_plain(item))


def _plain(value: Any) -> Any:
    """Plain dicts and lists (PosDict/PosList carry positions that must not count as changes)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
