"""JSON someone else wrote (a DSSE envelope and its statement, a registry's documents, an entry.json):
parsed with ``json.loads``, and nesting deeper than the parser goes refused as malformed.

Python's JSON decoder recurses once per level and stops at the interpreter's recursion limit
(1000 by default) with a ``RecursionError``, which is no ``ValueError``: a 200,000-deep envelope
used to end the importer as "a bug" and ``imagekit verify`` with a traceback (H7 of
../shared/reviews/security-4.md). What imagekit itself writes nests a dozen levels at most.
"""

from __future__ import annotations

import json
import sys
from typing import Any


class TooDeep(ValueError):
    """A JSON document that nests deeper than the parser goes: malformed, like any other ValueError."""


def loads(data: str | bytes | bytearray) -> Any:
    """``json.loads(data)``; ValueError (``TooDeep``) for nesting too deep, as for any malformed JSON."""
    try:
        return json.loads(data)
    except RecursionError:
        raise TooDeep(f"it nests deeper than the {sys.getrecursionlimit()} levels a JSON document may") from None
