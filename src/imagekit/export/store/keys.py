"""Store keys: what determines an entry's bytes, and where a user's own store lives.

A key is the image ID (``sha256:…``, the digest of the image's config, which is also
the ``config.digest`` of its registry manifest), the format, the compression preset,
the options that change the bytes, and imagekit's export format version (the format's row,
``formats.Format.store_version``). The entry's
directory name is the preset, the version and a hash of the options, so every entry of
one image in one format is one directory listing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from imagekit.util.errors import UsageError
from imagekit.export import formats

# The option an entry pulled from a registry artifact carries: a local export (whose key has no
# such option) never finds the registry's bytes, and what came from where stays visible.
ARTIFACT_OPTION = "source=artifact"
# Options that never change what a container sees: the squashfs tool (the same files), the
# timestamps SOURCE_DATE_EPOCH pins, and where the bytes came from. Anything else (``squash-opt=``
# can drop or add files: ``-e usr``, pseudo-files) makes a variant that is served only to whoever
# asks for exactly it, never for a plain image reference.
_NEUTRAL = re.compile(r"(?:tool=[A-Za-z0-9_.-]+|epoch=[0-9]+|source=artifact)")

ID_RE = re.compile(r"(?:sha256:)?([0-9a-f]{64})")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def default_root() -> Path:
    """The user's own store: ``$IMAGEKIT_STORE``, else ``${XDG_CACHE_HOME:-~/.cache}/imagekit/store``."""
    env = os.environ.get("IMAGEKIT_STORE")
    if env:
        return Path(env).expanduser()
    return user_cache() / "store"


def user_cache() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/imagekit``: this user's, never shared."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "imagekit"


@dataclass(frozen=True)
class StoreKey:
    """What determines an entry's bytes. ``slug`` names it on disk."""

    image_id: str                 # sha256:<64 hex>
    format: str
    preset: str
    options: tuple[str, ...]
    version: int

    @property
    def hex(self) -> str:
        return self.image_id.split(":", 1)[1]

    @property
    def name(self) -> str:
        """The entry directory's name: preset, version and a hash of the options."""
        opts = hashlib.sha256(json.dumps(list(self.options)).encode()).hexdigest()[:12]
        return f"{self.preset}-v{self.version}-{opts}"

    @property
    def slug(self) -> str:
        """One flat file name for the whole key (locks, holds, temporaries)."""
        return f"{self.hex}.{self.format}.{self.name}"


def make_key(image_id: str, fmt: str, preset: str, options: tuple[str, ...] = ()) -> StoreKey:
    """A validated key; UsageError naming the bad part and what is valid."""
    match = ID_RE.fullmatch(image_id or "")
    if match is None:
        raise UsageError(f"{image_id!r} is not an image ID", "give the image's sha256:<64 hex> ID "
                         "(docker image inspect -f '{{.Id}}', or the manifest's config.digest)")
    row = formats.get(fmt)
    if not isinstance(preset, str) or not NAME_RE.fullmatch(preset):
        raise UsageError(f"bad preset name {preset!r}", "letters, digits, '.', '_', '+', '-'")
    return StoreKey(f"sha256:{match.group(1)}", fmt, preset, tuple(str(o) for o in options),
                    row.store_version)


def content_neutral(options: tuple[str, ...]) -> bool:
    """True when the options leave the container's files as a plain export makes them."""
    return all(_NEUTRAL.fullmatch(o) for o in options)
