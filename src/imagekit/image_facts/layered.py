"""An image's facts without an engine: a registry reference, an OCI layout or a ``docker save`` tarball.

``imagekit report``, ``check`` and ``preflight`` read these the way ``imagekit export`` reads them
(:func:`imagekit.export.image_source.open_source`): for a registry, the manifest and the config
blob only, never a layer; for a layout or a tarball, its index, manifest and config. The config
gives the labels, the environment, the architecture and the history; the manifest the stored
(compressed) size of each layer.

Which text names which source is the export's rule (``docker://``, ``REGISTRY#REPO``, ``oci:``,
``oci-archive:``, ``docker-archive:``, ``containers-storage:``); a plain name is an engine image.
:func:`registry_fallback` also reads a plain ``HOST/REPO:TAG`` from its registry when no engine
answers, as a user with a Pyxis reference in hand means it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from imagekit.export.image_source import LayeredSource, is_engine_image, open_source
from imagekit.image_facts import ImageFacts, from_labels, parse_env

FILE_TRANSPORTS = ("oci:", "oci-archive:", "docker-archive:")


@dataclass
class Layered:
    """What a layered source says about its image, beside its facts."""

    ref: str
    image_id: str
    facts: ImageFacts
    architecture: str = ""
    stored_bytes: int = 0                                   # the layers as stored (compressed)
    history: list[dict[str, Any]] = field(default_factory=list)   # oldest first: created_by, bytes


def is_layered(ref: str) -> bool:
    """True for the forms read without an engine (not ``.sqsh``/``.sif`` files, not engine names)."""
    return not is_engine_image(ref) and not ref.startswith(("docker-daemon:", "containers-storage:"))


def looks_like_registry(ref: str) -> bool:
    """``HOST[:PORT]/REPO[:TAG]``: a first part with a dot or a port, or ``localhost`` (Docker's rule)."""
    first, sep, _ = ref.partition("/")
    return bool(sep) and ("." in first or ":" in first or first == "localhost")


def registry_fallback(ref: str) -> str:
    """The ``docker://`` form of a plain reference, to read from its registry."""
    return "docker://" + ref


def read(ref: str) -> Layered:
    """Facts, history and sizes of the image ``ref`` names, from its config (no layer is read)."""
    source = open_source(ref)
    assert isinstance(source, LayeredSource), ref
    digest, config, layers = source.loaded()
    inner = config.get("config") or {}
    facts = from_labels(dict(inner.get("Labels") or {}) or None, ref=ref, reason=f"{ref} records no labels",
                        env=parse_env(inner.get("Env") or []))
    sizes = [layer.size or 0 for layer in layers]
    history = []
    for entry in config.get("history") or []:
        empty = bool(entry.get("empty_layer"))
        history.append({"created_by": entry.get("created_by", ""), "bytes": 0 if empty or not sizes else sizes.pop(0)})
    return Layered(ref=ref, image_id=digest, facts=facts, architecture=config.get("architecture") or "",
                   stored_bytes=sum(layer.size or 0 for layer in layers), history=history)
