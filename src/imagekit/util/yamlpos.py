"""YAML loading that remembers where every key came from.

Errors about a stack must name the file, the line and the key, so mappings are
loaded as ``PosDict``: a dict that also records, per key, the file and line
where that key was written. Duplicate keys are errors (PyYAML silently keeps
the last one).

Files may come from others (a stack in a pull request), so every load is bounded: the file's
size, the number of YAML nodes (an alias counts as often as it is used, so a "billion laughs"
of a few aliases stops at the bound instead of expanding) and how deeply they nest. Each bound
is one StackError naming the file. The defaults suit any YAML imagekit reads; stack files pass
their own, smaller ones (:data:`imagekit.stack.MAX_STACK_BYTES`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from imagekit.util.errors import StackError

try:
    from yaml.cyaml import CParser          # libyaml's parser, in PyYAML's wheels and Debian's package
except ImportError:                         # pragma: no cover - PyYAML built without libyaml
    CParser = None


class PosDict(dict):
    """A dict with ``where[key] = (file, line)`` and its own ``file``/``line``."""

    def __init__(self, *args: Any, file: str | None = None, line: int | None = None) -> None:
        super().__init__(*args)
        self.file, self.line = file, line
        self.where: dict[str, tuple[str | None, int | None]] = {}

    def pos(self, key: str) -> tuple[str | None, int | None]:
        return self.where.get(key, (self.file, self.line))


class PosList(list):
    def __init__(self, *args: Any, file: str | None = None, line: int | None = None) -> None:
        super().__init__(*args)
        self.file, self.line = file, line
        self.lines: list[int | None] = []
        # Each item's file where it differs from the list's (a list merged from a parent stack's).
        self.files: list[str | None] = []


MAX_BYTES = 16 << 20        # defaults: far above any YAML file imagekit reads
MAX_NODES = 1_000_000
MAX_DEPTH = 64
NODES_HINT = "a stack file has a few hundred nodes; an anchor's nodes count each time an alias uses it"
DEPTH_HINT = "a stack file nests a few levels deep"


class _Bound(Exception):
    """A bound passed while composing (turned into a StackError naming the file)."""

    def __init__(self, what: str, line: int, hint: str) -> None:
        super().__init__(what)
        self.what, self.line, self.hint = what, line, hint


class _Loader(yaml.SafeLoader):
    """SafeLoader that counts the nodes it composes and how deeply they nest."""

    max_nodes = MAX_NODES
    max_depth = MAX_DEPTH

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.nodes = 0
        self.depth = 0

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        self.nodes += 1
        self.depth += 1
        try:
            if self.nodes > self.max_nodes:
                raise _Bound(f"has more than {self.max_nodes} YAML nodes", self.peek_event().start_mark.line + 1,
                             NODES_HINT)
            if self.depth > self.max_depth:
                raise _Bound(f"nests deeper than {self.max_depth} levels", self.peek_event().start_mark.line + 1,
                             DEPTH_HINT)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _precheck(text: str, max_nodes: int, max_depth: int) -> None:
    """The node and nesting bounds, checked first with libyaml's parser (C) where PyYAML has it.

    PyYAML's own scanner looks ahead across a whole flow collection before the composer sees a
    node, so a 64 KiB file of ``[[[[…`` or ``[1,1,1,…`` costs it about a second before any bound
    in :class:`_Loader` can act; libyaml's events cost microseconds. Its syntax errors are left to
    the full parse below, which words them as PyYAML does."""
    if CParser is None:
        return
    parser = CParser(text)
    nodes = depth = 0
    try:
        while (event := parser.get_event()) is not None:
            if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
                nodes += 1
                if nodes > max_nodes:
                    raise _Bound(f"has more than {max_nodes} YAML nodes", event.start_mark.line + 1, NODES_HINT)
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > max_depth:
                    raise _Bound(f"nests deeper than {max_depth} levels", event.start_mark.line + 1, DEPTH_HINT)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        if "nesting depth" in str(exc.problem):          # libyaml's own limit (1000), past ours
            mark = exc.problem_mark
            raise _Bound(f"nests deeper than {max_depth} levels", mark.line + 1 if mark else 1, DEPTH_HINT) from None
    except yaml.YAMLError:
        pass
    finally:
        parser.dispose()


def read(path: Path, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of ``path`` (StackError naming it when it is missing, unreadable or past ``max_bytes``):
    for a caller that records what it parsed, and hands them to :func:`load`."""
    name = str(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise StackError("file not found", file=name) from None
    except OSError as exc:
        raise StackError(f"cannot read: {exc.strerror}", file=name) from None
    if len(raw) > max_bytes:
        raise StackError(f"is larger than {max_bytes} bytes, the most this file may be", file=name,
                         hint="is this the right file? (a stack file is a few KiB)")
    return raw


def load(path: Path, *, max_bytes: int = MAX_BYTES, max_nodes: int = MAX_NODES, raw: bytes | None = None) -> Any:
    """Parse ``path`` (or ``raw``, its bytes already :func:`read`); raise StackError with file:line for
    malformed YAML or duplicate keys, or a file past ``max_bytes`` or ``max_nodes`` (aliases counted as
    expanded; see the module docstring)."""
    name = str(path)
    raw = read(path, max_bytes) if raw is None else raw
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StackError(f"byte {raw[exc.start:exc.start + 1]!r} is not UTF-8", file=name,
                         line=raw.count(b"\n", 0, exc.start) + 1, hint="save the file as UTF-8") from None
    loader = _Loader(text)
    loader.max_nodes = max_nodes
    try:
        _precheck(text, max_nodes, loader.max_depth)
        node = loader.get_single_node()
    except _Bound as exc:
        raise StackError(f"{exc.what}: refused", file=name, line=exc.line, hint=exc.hint) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        # An unclosed bracket or quote is only noticed at the end of the stream (a
        # line past the file's end); the line that opened it is the useful one.
        if mark is not None and exc.context_mark is not None and mark.index >= len(text.rstrip()):
            mark = exc.context_mark
        line = mark.line + 1 if mark else None
        raise StackError(f"malformed YAML: {exc.problem or exc.context}", file=name, line=line,
                         hint="check indentation and quoting at that line") from None
    finally:
        loader.dispose()
    if node is None:
        return PosDict(file=name, line=1)
    return _convert(node, name, [max_nodes])


def _convert(node: yaml.Node, file: str, left: list[int]) -> Any:
    # ``left`` counts down every node converted, an alias's each time it is used: the expansion bound.
    left[0] -= 1
    line = node.start_mark.line + 1
    if left[0] < 0:
        raise StackError("has too many YAML nodes once its aliases are expanded: refused", file=file, line=line,
                         hint=NODES_HINT)
    if isinstance(node, yaml.MappingNode):
        out = PosDict(file=file, line=line)
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise StackError("YAML merge keys (<<) are not supported; use `extends:`",
                                 file=file, line=key_node.start_mark.line + 1)
            key = _scalar(key_node)
            if not isinstance(key, str):
                key = str(key)
            if key in out:
                first = out.where[key][1]
                raise StackError(f"duplicate key (first written at line {first})", file=file,
                                 line=key_node.start_mark.line + 1, key=key)
            out[key] = _convert(value_node, file, left)
            out.where[key] = (file, key_node.start_mark.line + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        out_list = PosList(file=file, line=line)
        for item in node.value:
            out_list.append(_convert(item, file, left))
            out_list.lines.append(item.start_mark.line + 1)
        return out_list
    return _scalar(node)


_constructor = yaml.constructor.SafeConstructor()


def _scalar(node: yaml.Node) -> Any:
    return _constructor.construct_object(node, deep=True)
