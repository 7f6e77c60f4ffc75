"""Base images pinned by digest, with the tag kept for reading: ``name:tag@sha256:<64 hex>``.

Docker, BuildKit and Apptainer pull such a reference by its digest, so a rebuild gets the same
base after NVIDIA re-tags or deletes a tag; the tag says what the digest is. Before a build the
pin is compared with what the tag names now, so that a digest copied from the wrong tag (or a
tag that moved) is one clear error before any step runs, instead of a build on a base nobody
meant: the local engine's copy of the tag when it has one (its RepoDigests), else the registry's
manifest for the tag. Where neither can be asked (no engine copy, no registry in reach) the pin
stays unverified and the build says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from imagekit.engines import Engine
from imagekit.engines.image import ImageMissing
from imagekit.util.errors import EngineError, StackError
from imagekit.registry import client as registry_client
from imagekit.registry import reference as registry_reference

PINNED = re.compile(r"(?P<name>[^@\s]+?)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?@(?P<digest>sha256:[0-9a-f]{64})")


@dataclass(frozen=True)
class Pin:
    name: str
    tag: str | None
    digest: str

    @property
    def tagged(self) -> str:
        return f"{self.name}:{self.tag}"


def parse(ref: str) -> Pin | None:
    """The pin in ``ref`` (None for a reference without a digest)."""
    found = PINNED.fullmatch(ref)
    return Pin(found["name"], found["tag"], found["digest"]) if found else None


def engine_digests(images: Engine, tagged: str) -> list[str] | None:
    """The digests ``images`` records for its copy of ``tagged`` (None when it has none)."""
    try:
        image = images.inspect(tagged)
    except (ImageMissing, EngineError):
        return None
    return [d.rpartition("@")[2] for d in image.attrs.get("RepoDigests") or [] if "@" in d]


def _registry_digest(tagged: str) -> str | None:
    """The digest the registry serves for ``tagged`` (the index of a multi-platform image); None when the
    registry cannot be asked from here."""
    try:
        ref = registry_reference.parse(tagged)
        return registry_client.RegistryClient.for_reference(ref).get_manifest(ref.repository, ref.tag).digest
    except Exception:  # noqa: BLE001 - any failure to ask (offline, auth, DNS) leaves the pin unverified
        return None


def verify(stack, images: Engine, *, registry_digest: Callable[[str], str | None] = _registry_digest) -> list[str]:
    """Compare every digest-pinned base of ``stack`` with its tag (``images``' copy of the tag when it has
    one, else the registry's); notes for pins nothing could verify.

    StackError (file, key, both digests) when the tag names another image than the digest."""
    notes = []
    # base.runtime is base.image unless the stack names another one: each reference is checked once.
    refs = {stack.base.image: "base.image"}
    refs.setdefault(stack.base.runtime, "base.runtime")
    for ref, key in refs.items():
        pin = parse(ref)
        if pin is None or pin.tag is None:
            continue
        local = engine_digests(images, pin.tagged)
        if local:
            if pin.digest in local:
                continue
            found, where = local[0], "the local engine's copy of the tag"
        else:
            found, where = registry_digest(pin.tagged), "the registry"
            if found is None:
                notes.append(f"{key}: {pin.tagged}@{pin.digest[:19]}… not verified against its tag (no engine copy, "
                             "registry not reachable); the build pulls it by digest")
                continue
            if found == pin.digest:
                continue
        raise StackError(f"{ref} pins {pin.digest}, but {where} has {pin.tagged} at {found}",
                         file=stack.file, key=key,
                         hint=f"if the tag moved on purpose, pin the new image: `{pin.tagged}@{found}`; if the digest "
                              "was copied from another tag (a -runtime for a -devel, one platform's manifest for the "
                              "multi-platform index), copy it again from the tag you mean")
    return notes
