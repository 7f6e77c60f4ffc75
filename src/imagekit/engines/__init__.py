"""The image engines by name: ``docker`` (:mod:`imagekit.engine`) and ``podman`` (:mod:`imagekit.podman`).

Both modules answer ``inspect``, ``image_exists``, ``image_id`` and ``tag``; the choice lives
here, above both, so that neither imports the other's module back.
"""

from __future__ import annotations

from types import ModuleType

from imagekit import engine, podman
from imagekit.errors import UsageError

ENGINES = engine.ENGINES


def of(name: str) -> ModuleType:
    """The module that answers ``inspect``, ``image_exists``, ``image_id`` and ``tag`` for ``name``."""
    if name == "docker":
        return engine
    if name == "podman":
        return podman
    raise UsageError(f"unknown engine {name!r}", f"use one of: {', '.join(ENGINES)}")
