"""Loading by name: the tables whose entries load their module only when one is used.

A few paths must stay small: ``imagekit --help``, an export store hit, the Pyxis importer's hit. Where
such a path reads a table whose rows lead to heavy code (the CLI's commands, the export formats'
converters, the export package's own names, ``export --sign``), the row names its target as
``"module:attribute"`` and :func:`load` imports it when the row is used. Every other import sits at the
top of its module (docs/development.md, "Layers"), and scripts/import_graph.py draws each such name as
an edge, so the layer checks see these too.
"""

from __future__ import annotations

import importlib
from typing import Any


def load(target: str) -> Any:
    """The attribute ``"module:attribute"`` names, its module imported now if it was not yet."""
    module, sep, attribute = target.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"not a 'module:attribute' name: {target!r}")
    return getattr(importlib.import_module(module), attribute)
