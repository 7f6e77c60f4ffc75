"""Entries: one published file and its ``entry.json``, read defensively.

``entry.json`` is data another process (another user, an older or newer imagekit, a
damaged disk) wrote: every field is checked for its type and form, and anything else
makes the entry skipped with a warning naming the file and what is wrong, never a
traceback in ``store ls``, ``store gc`` or the importer.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from imagekit.export.store import notices
from imagekit.export import formats
from imagekit.export.store.keys import ID_RE, NAME_RE, StoreKey
from imagekit.util import untrusted_json

META = "entry.json"
MAX_META = 64 << 10        # an entry.json is a few hundred bytes; refuse to parse a huge one
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass
class Entry:
    """One published file in the store."""

    path: Path                    # the file itself
    image_id: str
    format: str
    preset: str
    options: tuple[str, ...]
    version: int                  # imagekit's export format version
    sha256: str                   # hex, recorded by the publisher
    bytes: int
    created: float
    last_used: float
    tool: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    seal: dict[str, int] | None = None     # the file as its publisher hashed it (store.verify)

    @property
    def dir(self) -> Path:
        return self.path.parent

    @property
    def key(self) -> StoreKey:
        return StoreKey(self.image_id, self.format, self.preset, self.options, self.version)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["path"] = str(self.path)
        d["options"] = list(self.options)
        return d


def meta_for(key: StoreKey, sha256: str, size: int, tool: str, extra: dict[str, Any],
             seal: dict[str, int] | None = None) -> dict[str, Any]:
    meta = {"image_id": key.image_id, "format": key.format, "preset": key.preset,
            "options": list(key.options), "version": key.version, "sha256": sha256,
            "bytes": size, "created": time.time(), "tool": tool, "extra": extra}
    if seal is not None:
        meta["sealed"] = seal
    return meta


SEAL_FIELDS = ("ino", "size", "mtime_ns")


def _seal(value: Any) -> dict[str, int] | None:
    """The publisher's seal, or None when there is none or it is not one this imagekit reads (the
    file is then hashed in full, as before seals: never a reason to skip the entry)."""
    if not isinstance(value, dict):
        return None
    seal = {k: value.get(k) for k in SEAL_FIELDS}
    if all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in seal.values()):
        return seal
    return None


class Malformed(ValueError):
    """What is wrong with an entry.json, in words."""


def _field(meta: dict, name: str, kind: type | tuple[type, ...], check=None, what: str = "") -> Any:
    if name not in meta:
        raise Malformed(f"no {name!r}")
    value = meta[name]
    # bool is an int in Python; a version or size of `true` is still malformed
    if not isinstance(value, kind) or isinstance(value, bool):
        raise Malformed(f"{name!r} is {type(value).__name__}, not {what or kind}")
    if check is not None and not check(value):
        raise Malformed(f"{name!r} is {value!r}, not {what}")
    return value


def parse_meta(meta: Any, fmt: str) -> dict[str, Any]:
    """The validated fields of an entry.json document; Malformed says what is wrong."""
    if not isinstance(meta, dict):
        raise Malformed(f"is a JSON {type(meta).__name__}, not an object")
    out = {
        "image_id": _field(meta, "image_id", str, lambda v: ID_RE.fullmatch(v) and v.startswith("sha256:"),
                           "sha256:<64 hex>"),
        "format": _field(meta, "format", str, lambda v: v == fmt, f"{fmt!r} (its directory's format)"),
        "preset": _field(meta, "preset", str, NAME_RE.fullmatch, "a preset name"),
        "version": _field(meta, "version", int, lambda v: v >= 0, "a version number"),
        "sha256": _field(meta, "sha256", str, _HEX64.fullmatch, "64 lowercase hex digits"),
        "bytes": _field(meta, "bytes", int, lambda v: v >= 0, "a size in bytes"),
        "created": float(_field(meta, "created", (int, float), None, "a time")),
    }
    options = meta.get("options", [])
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise Malformed("'options' is not a list of strings")
    out["options"] = tuple(options)
    tool, extra = meta.get("tool", ""), meta.get("extra", {})
    if not isinstance(tool, str):
        raise Malformed("'tool' is not a string")
    if not isinstance(extra, dict):
        raise Malformed("'extra' is not an object")
    out["tool"], out["extra"] = tool, extra
    out["seal"] = _seal(meta.get("sealed"))
    return out


def read_entry(directory: Path, fmt: str) -> Entry | None:
    """The entry in ``directory``; None when there is none, or it is malformed (with a warning).

    Nothing here follows a symbolic link: a link where an entry, its file or its entry.json
    should be is not an entry.
    """
    
    data = directory / f"image{formats.get(fmt).suffix}"
    try:
        st_dir = os.lstat(directory)
        if not stat.S_ISDIR(st_dir.st_mode):
            return None
        st_data = os.lstat(data)
        fd = os.open(directory / META, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            raw = os.read(fd, MAX_META + 1)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return None          # half-removed, or not an entry: nothing to say
    except OSError as exc:
        notices.warn(f"skipping store entry {directory}: {exc.strerror}")
        return None
    try:
        if not stat.S_ISREG(st_data.st_mode):
            raise Malformed(f"{data.name} is not a regular file")
        if len(raw) > MAX_META:
            raise Malformed(f"is larger than {MAX_META} bytes")
        try:
            doc = untrusted_json.loads(raw)
        except ValueError as exc:
            raise Malformed(f"is not JSON ({exc})") from None
        meta = parse_meta(doc, fmt)
    except Malformed as exc:
        notices.warn(f"skipping store entry {directory}: {META} {exc}")
        return None
    return Entry(path=data, last_used=st_dir.st_mtime, **meta)
