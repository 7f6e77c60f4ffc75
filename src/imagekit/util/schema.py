"""Typed options with defaults, and validation that names file, line and key.

Used for the stack file's own keys and for every component's options, so that
both reject unknown keys (with a "did you mean") and wrong types the same way.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Mapping

from imagekit.util import quoting
from imagekit.util.errors import StackError

TYPE_NAMES = {str: "a string", bool: "true or false", int: "an integer", list: "a list",
              dict: "a mapping", float: "a number"}


@dataclass(frozen=True)
class Option:
    type: type
    default: Any = None
    help: str = ""
    choices: tuple | None = None
    required: bool = False
    item_type: type | None = None  # for lists
    # Strings (and string items) must match this whole; `pattern_help` says what is valid.
    pattern: str | None = None
    pattern_help: str = ""
    # Only shell commands meant as code (a check's `run`) may span lines: every other string
    # lands on one line of a Dockerfile, a definition file or a label.
    multiline: bool = False


def validate(data: Mapping, options: Mapping[str, Option], *, context: str) -> dict:
    """Check ``data`` (a PosDict) against ``options``; return it with defaults filled in."""
    for key in data:
        if key not in options:
            raise unknown_key(data, key, options, context)
    out = {}
    for key, opt in options.items():
        if key not in data or data[key] is None:
            if opt.required:
                file, line = _pos(data, None)
                raise StackError(f"missing required key {key!r}", file=file, line=line, key=context,
                                 hint=f"add `{key}:` ({opt.help or TYPE_NAMES.get(opt.type, opt.type.__name__)})")
            out[key] = list(opt.default) if isinstance(opt.default, (list, tuple)) else opt.default
            continue
        out[key] = check_value(data, key, data[key], opt, context)
    return out


def check_value(data: Mapping, key: str, value: Any, opt: Option, context: str) -> Any:
    file, line = _pos(data, key)
    dotted = f"{context}.{key}" if context else key
    if opt.type is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        raise StackError(f"expected a string, got the number {value!r}", file=file, line=line, key=dotted,
                         hint=f'quote it: {key}: "{value}" (YAML reads 12.10 as the number 12.1)')
    if not isinstance(value, opt.type) or (opt.type is int and isinstance(value, bool)):
        raise StackError(f"expected {TYPE_NAMES.get(opt.type, opt.type.__name__)}, got {_describe(value)}",
                         file=file, line=line, key=dotted, hint=opt.help or None)
    if opt.choices is not None and value not in opt.choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in opt.choices], n=1)
        maybe = f"did you mean {close[0]!r}? " if close else ""
        raise StackError(f"invalid value {value!r}", file=file, line=line, key=dotted,
                         hint=f"{maybe}valid: {', '.join(map(str, opt.choices))}")
    if opt.type is str:
        check_text(value, opt, file, line, dotted)
    if opt.type is list and opt.item_type is not None:
        for i, item in enumerate(value):
            lines, files = getattr(value, "lines", []), getattr(value, "files", [])
            item_line = lines[i] if i < len(lines) else line
            file = files[i] if i < len(files) and files[i] else getattr(value, "file", None) or file
            if not isinstance(item, opt.item_type):
                raise StackError(f"item {i + 1} must be {TYPE_NAMES.get(opt.item_type)}, got {_describe(item)}",
                                 file=file, line=item_line, key=dotted)
            if opt.item_type is str:
                check_text(item, opt, file, item_line, f"{dotted}[{i + 1}]")
    return value


def check_text(value: str, opt: Option, file: str | None, line: int | None, key: str) -> str:
    """Stack strings end up in recipes, labels and scripts: one line each (unless the option is
    code), and the option's pattern when it has one."""
    try:
        if opt.multiline:
            quoting.valid_text(value, "stack", key)
        else:
            quoting.no_control(value, "stack", key)
    except quoting.UnsafeValue as exc:
        raise StackError(exc.message.removeprefix(f"stack: {key} "), file=file, line=line, key=key,
                         hint="write it on one line, without control characters") from None
    if opt.pattern is not None and not re.fullmatch(opt.pattern, value):
        raise StackError(f"invalid value {quoting.shown(value)}", file=file, line=line, key=key,
                         hint=opt.pattern_help or f"it must match {opt.pattern}")
    return value


def unknown_key(data: Mapping, key: str, valid: Mapping | list, context: str) -> StackError:
    file, line = _pos(data, key)
    names = sorted(valid)
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    maybe = f"did you mean {close[0]!r}? " if close else ""
    dotted = f"{context}.{key}" if context else key
    return StackError("unknown key", file=file, line=line, key=dotted,
                      hint=f"{maybe}valid keys: {', '.join(names)}")


def _pos(data: Any, key: str | None) -> tuple[str | None, int | None]:
    if key is not None and hasattr(data, "pos"):
        return data.pos(key)
    return getattr(data, "file", None), getattr(data, "line", None)


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"
