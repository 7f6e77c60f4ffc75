"""GitHub Actions expressions (``${{ ... }}``), evaluated here so that a test can run a workflow's jobs as
a runner would (tests/helpers/ci_adopt.py).

What the workflow templates use, as GitHub documents it (docs.github.com, "Evaluate expressions"):
literals (strings in single quotes, numbers, true, false, null), context paths (``vars.X``, ``matrix.x``,
``needs.job.outputs.y``, ``a['b']``), ``!``, ``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``, ``&&`` and ``||``
(which return an operand, not a boolean), parentheses, and the functions fromJSON, toJSON, format,
contains, startsWith, endsWith, join, always, success, failure and cancelled. A missing property is null.
Strings compare ignoring case; values of different types compare as numbers.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_TOKEN = re.compile(r"""\s*(?:
    (?P<str>'(?:[^']|'')*')
  | (?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|0x[0-9a-fA-F]+)
  | (?P<op>\|\||&&|==|!=|<=|>=|[!<>()\[\],.*])
  | (?P<name>[A-Za-z_][A-Za-z0-9_-]*)
)""", re.X)
_WHOLE = re.compile(r"^\s*\$\{\{(.*)\}\}\s*$", re.S)
_PART = re.compile(r"\$\{\{(.*?)\}\}", re.S)


class ExpressionError(ValueError):
    pass


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExpressionError(f"cannot read {text[pos:]!r} in {text!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def truthy(value: Any) -> bool:
    if isinstance(value, float) and math.isnan(value):
        return False
    return value not in (None, False, 0, "")


def text(value: Any) -> str:
    """A value as GitHub writes it into a string (an env value, a script)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _number(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip() or 0)
        except ValueError:
            return math.nan
    return math.nan


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    if type(a) is type(b) or (isinstance(a, (dict, list)) and isinstance(b, (dict, list))):
        return a == b
    return _number(a) == _number(b)


def _fmt(template: str, *args: Any) -> str:
    return re.sub(r"\{(\d+)\}", lambda m: text(args[int(m.group(1))]), template.replace("{{", "\0").replace(
        "}}", "\1")).replace("\0", "{").replace("\1", "}")


FUNCTIONS = {
    "fromjson": lambda s: json.loads(s),
    "tojson": lambda v: json.dumps(v, indent=2),
    "format": _fmt,
    "contains": lambda hay, needle: (any(_equal(x, needle) for x in hay) if isinstance(hay, list)
                                     else text(needle).lower() in text(hay).lower()),
    "startswith": lambda s, p: text(s).lower().startswith(text(p).lower()),
    "endswith": lambda s, p: text(s).lower().endswith(text(p).lower()),
    "join": lambda items, sep=",": text(sep).join(text(i) for i in (items if isinstance(items, list) else [items])),
    "always": lambda: True,
    "success": lambda: True,      # the harness stops a job at its first failing step
    "failure": lambda: False,
    "cancelled": lambda: False,
}


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], context: dict[str, Any]) -> None:
        self.tokens, self.pos, self.context = tokens, 0, context

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def take(self, want: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise ExpressionError("unexpected end of expression")
        tok = self.tokens[self.pos]
        if want is not None and tok[1] != want:
            raise ExpressionError(f"expected {want!r}, got {tok[1]!r}")
        self.pos += 1
        return tok

    def parse(self) -> Any:
        value = self.or_()
        if self.pos != len(self.tokens):
            raise ExpressionError(f"unexpected {self.peek()!r}")
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == "||":
            self.take()
            right = self.and_()
            value = value if truthy(value) else right
        return value

    def and_(self) -> Any:
        value = self.equality()
        while self.peek() == "&&":
            self.take()
            right = self.equality()
            value = right if truthy(value) else value
        return value

    def equality(self) -> Any:
        value = self.comparison()
        while self.peek() in ("==", "!="):
            op = self.take()[1]
            right = self.comparison()
            value = _equal(value, right) if op == "==" else not _equal(value, right)
        return value

    def comparison(self) -> Any:
        value = self.unary()
        while self.peek() in ("<", "<=", ">", ">="):
            op = self.take()[1]
            a, b = _number(value), _number(self.unary())
            value = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return value

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not truthy(self.unary())
        return self.postfix(self.primary())

    def primary(self) -> Any:
        kind, tok = self.take()
        if tok == "(":
            value = self.or_()
            self.take(")")
            return value
        if kind == "str":
            return tok[1:-1].replace("''", "'")
        if kind == "num":
            return float(int(tok, 16)) if tok.startswith("0x") else float(tok)
        if kind != "name":
            raise ExpressionError(f"unexpected {tok!r}")
        low = tok.lower()
        if low in ("true", "false"):
            return low == "true"
        if low == "null":
            return None
        if self.peek() == "(":
            self.take("(")
            args = []
            while self.peek() != ")":
                args.append(self.or_())
                if self.peek() == ",":
                    self.take()
            self.take(")")
            if low not in FUNCTIONS:
                raise ExpressionError(f"unknown function {tok}()")
            return FUNCTIONS[low](*args)
        return self.context.get(tok)

    def postfix(self, value: Any) -> Any:
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                key = self.take()[1]
            else:
                key = self.or_()
                self.take("]")
            if isinstance(value, dict):
                value = next((v for k, v in value.items() if k.lower() == text(key).lower()), None)
            elif isinstance(value, list) and isinstance(key, float):
                value = value[int(key)] if 0 <= int(key) < len(value) else None
            else:
                value = None
        return value


def evaluate(expression: str, context: dict[str, Any]) -> Any:
    """The value of one expression (without ``${{ }}``)."""
    return _Parser(_tokens(expression), context).parse()


def interpolate(value: Any, context: dict[str, Any]) -> Any:
    """A workflow value with its ``${{ }}`` evaluated: a value that is one expression keeps the
    expression's type (a list for runs-on, rows for a matrix); others become text."""
    if not isinstance(value, str):
        return value
    whole = _WHOLE.match(value)
    if whole and "${{" not in whole.group(1):
        return evaluate(whole.group(1), context)
    return _PART.sub(lambda m: text(evaluate(m.group(1), context)), value)


def condition(value: Any, context: dict[str, Any]) -> bool:
    """An ``if:``: an expression with or without ``${{ }}``; absent, success()."""
    if value is None:
        return True
    if isinstance(value, bool):
        return value
    whole = _WHOLE.match(value)
    return truthy(evaluate(whole.group(1) if whole else value, context))
