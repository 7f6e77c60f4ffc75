"""YAML loading that remembers where every key came from.

Errors about a stack must name the file, the line and the key, so mappings are
loaded as ``PosDict``: a dict that also records, per key, the file and line
where that key was written. Duplicate keys are errors (PyYAML silently keeps
the last one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from imagekit.errors import StackError


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


class _Loader(yaml.SafeLoader):
    pass


def load(path: Path) -> Any:
    """Parse ``path``; raise StackError with file:line for malformed YAML or duplicate keys."""
    name = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise StackError("file not found", file=name) from None
    except OSError as exc:
        raise StackError(f"cannot read: {exc.strerror}", file=name) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StackError(f"byte {raw[exc.start:exc.start + 1]!r} is not UTF-8", file=name,
                         line=raw.count(b"\n", 0, exc.start) + 1, hint="save the file as UTF-8") from None
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        # An unclosed bracket or quote is only noticed at the end of the stream (a
        # line past the file's end); the line that opened it is the useful one.
        if mark is not None and exc.context_mark is not None and mark.index >= len(text.rstrip()):
            mark = exc.context_mark
        line = mark.line + 1 if mark else None
        raise StackError(f"malformed YAML: {exc.problem or exc.context}", file=name, line=line,
                         hint="check indentation and quoting at that line") from None
    if node is None:
        return PosDict(file=name, line=1)
    return _convert(node, name)


def _convert(node: yaml.Node, file: str) -> Any:
    line = node.start_mark.line + 1
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
            out[key] = _convert(value_node, file)
            out.where[key] = (file, key_node.start_mark.line + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        out_list = PosList(file=file, line=line)
        for item in node.value:
            out_list.append(_convert(item, file))
            out_list.lines.append(item.start_mark.line + 1)
        return out_list
    return _scalar(node)


_constructor = yaml.constructor.SafeConstructor()


def _scalar(node: yaml.Node) -> Any:
    return _constructor.construct_object(node, deep=True)
