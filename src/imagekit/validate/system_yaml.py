"""Reading a system model's YAML sections key by key (:mod:`imagekit.validate.system` builds the
System from them): each value checked for type, range and valid choices, and every error naming the
file, the line and the dotted key (exit 2)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Optional

from imagekit.util import schema
from imagekit.util.errors import StackError


@dataclass(frozen=True)
class Key:
    """One key of a model's section: its type, whether it must be there, its default and its valid values."""

    name: str
    kind: type
    required: bool = False
    default: Any = None
    low: Optional[float] = None
    high: Optional[float] = None
    choices: Optional[tuple] = None


class SectionReader:
    """Reads the sections of one model file: each key checked for type, range and choices, and each
    error a StackError naming the file, the line and the dotted key."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.lines: dict[str, int] = {}

    def error(self, data: Any, key: Optional[str], context: str, message: str, hint: Optional[str] = None) -> StackError:
        line = None
        if key is not None and hasattr(data, "pos"):
            line = data.pos(key)[1]
        elif hasattr(data, "line"):
            line = data.line
        dotted = ".".join(p for p in (context, key) if p)
        return StackError(message, file=self.file, line=line, key=dotted or None, hint=hint)

    def mapping(self, data: Any, key: str, parent: Any, allowed: set, required: bool = True) -> dict:
        value = data.get(key) if isinstance(data, dict) else None
        if value is None:
            if required:
                raise self.error(parent, None, "", f"missing required key {key!r}",
                                 hint=f"add `{key}:` with {', '.join(sorted(allowed))}")
            return {}
        if not isinstance(value, dict):
            raise self.error(data, key, "", "expected a mapping")

        for k in value:
            if k not in allowed:
                raise schema.unknown_key(value, str(k), sorted(allowed), key)
        return value

    def get(self, data: dict, context: str, spec: Key) -> Any:
        """The value of ``spec`` in the section ``data`` (``context`` names it in errors), checked."""
        key, kind, low, high, choices = spec.name, spec.kind, spec.low, spec.high, spec.choices
        if key not in data or data[key] is None:
            if spec.required:
                raise self.error(data, None, context, f"missing required key {key!r}",
                                 hint=f"add `{key}:` under `{context}:`" if context else f"add `{key}:`")
            return spec.default
        value = data[key]
        if hasattr(data, "pos"):
            self.lines[f"{context}.{key}" if context else key] = data.pos(key)[1] or 0
        ok = isinstance(value, kind) and not isinstance(value, bool) if kind in (int, float) else isinstance(value, kind)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
            raise self.error(data, key, context, f"expected {names[kind]}, got {value!r}")
        if choices is not None and value not in choices:
            close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
            raise self.error(data, key, context, f"invalid value {value!r}",
                             hint=(f"did you mean {close[0]!r}? " if close else "") + f"valid: {', '.join(choices)}")
        if low is not None and value < low or high is not None and value > high:
            span = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
            raise self.error(data, key, context, f"{value!r} is out of range", hint=f"give a value {span}")
        return value
