"""The platform of each image config this user's importer has read, by the config's digest (the image ID).

A config is content-addressed: its digest fixes its os, architecture and variant for good. The importer
must refuse an image this node cannot run before Pyxis creates a container (``platforms.check_runs_here``),
and for a plain manifest the platform is in the config blob, which many registries serve through a
redirect to object storage: a second request, often to a second host. With this record a repeat hit asks
the registry for the manifest alone; only a user's first get of an image reads the config.

The record is this user's: ``${XDG_CACHE_HOME:-~/.cache}/imagekit/platforms/HEX.json``, in a directory
that is ours and writable by nobody else (as the store's read stamps, :mod:`imagekit.util.private_records`).
Whoever could change it could only misname the platform of their own jobs' images; a record that is
missing, unreadable or not a platform is passed over, and the registry asked.
"""

from __future__ import annotations

import re
from pathlib import Path

from imagekit.export.store.keys import user_cache
from imagekit.util import private_records
from imagekit.util.platforms import Platform

_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_FIELD = re.compile(r"[a-z0-9._-]{1,32}")


def directory() -> Path:
    return user_cache() / "platforms"


def _path(digest: str, where: Path | None) -> Path | None:
    m = _DIGEST.fullmatch(digest or "")
    base = where if where is not None else directory()
    return base / f"{m.group(1)}.json" if m and private_records.own_private_dir(base) else None


def known(digest: str, where: Path | None = None) -> Platform | None:
    """The platform recorded for the config ``digest``, or None."""
    path = _path(digest, where)
    if path is None:
        return None
    doc = private_records.read(path, 1024)
    if not isinstance(doc, dict) or set(doc) - {"os", "architecture", "variant"}:
        return None
    values = [doc.get("os"), doc.get("architecture")] + ([doc["variant"]] if "variant" in doc else [])
    if not all(isinstance(v, str) and _FIELD.fullmatch(v) for v in values):
        return None
    return Platform(doc["os"], doc["architecture"], doc.get("variant"))


def remember(digest: str, platform: Platform, where: Path | None = None) -> None:
    """Record ``platform`` for the config ``digest``. Best effort: a failure costs a request next time."""
    base = where if where is not None else directory()
    private_records.make_private_dir(base)
    path = _path(digest, where)
    if path is None or not platform.architecture:
        return
    private_records.write(path, platform.as_dict())
