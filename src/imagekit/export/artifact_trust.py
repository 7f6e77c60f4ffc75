"""Which pushed export artifacts the Pyxis importer may start, and the checks before one enters a store.

A referrer is listed by whoever can push to the image's repository: an artifact is
trusted like the repository's tags, not like the image's digest. So the importer uses
artifacts only from repositories the site names in ``IMAGEKIT_TRUSTED_ARTIFACTS``
(comma-separated ``REGISTRY/REPOSITORY`` patterns, ``*`` and ``?`` as in the shell, e.g.
``registry.example.org:5000/hpc/*``): repositories only CI can push to. Any other
repository's artifacts are ignored and the image is converted instead.

An accepted artifact must still be an Enroot export of *this* image before it enters a
store: its manifest's subject is the image's manifest digest, its annotations name the
image's config digest, the enroot format and a valid preset, its one layer has the digest
the registry verified as it streamed, and the file is a squashfs 4.0 whose superblock
fits the file. A referrer that fails any of this is skipped with a warning, and the next
one (or a conversion) is used.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from imagekit import sif_reader
from imagekit.export import artifacts

ENV = "IMAGEKIT_TRUSTED_ARTIFACTS"
_PRESET = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def patterns(env: Mapping[str, str]) -> list[str]:
    return [p.strip() for p in env.get(ENV, "").replace("\n", ",").split(",") if p.strip()]


def trusted(registry: str, repository: str, env: Mapping[str, str]) -> str | None:
    """The pattern of ``IMAGEKIT_TRUSTED_ARTIFACTS`` that accepts this repository, or None."""
    name = f"{registry}/{repository}"
    return next((p for p in patterns(env) if fnmatch.fnmatchcase(name, p)), None)


@dataclass(frozen=True)
class Candidate:
    digest: str          # the artifact manifest's digest
    preset: str
    entry: dict          # the referrers entry


def enroot_candidates(entries: list[dict], config_digest: str, warn: Callable[[str], None]) -> list[Candidate]:
    """Enroot export referrers of the image with config ``config_digest``, newest listed first.
    Malformed ones (bad digest, preset, or another image's config) are skipped with a warning: one
    bad referrer never stops the importer. One whose format annotation names another format is no
    enroot artifact (artifacts.matching leaves it out)."""
    found = []
    for entry in reversed(artifacts.matching(entries, "enroot")):
        notes = entry.get("annotations") if isinstance(entry.get("annotations"), dict) else {}
        digest = entry.get("digest")
        preset = notes.get(artifacts.A_PRESET)
        problem = None
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            problem = f"its digest {digest!r} is not sha256:<64 hex>"
        elif not isinstance(preset, str) or not _PRESET.fullmatch(preset):
            problem = f"its preset annotation {preset!r} is not a preset name"
        elif notes.get(artifacts.A_CONFIG) != config_digest:
            problem = (f"it names image {notes.get(artifacts.A_CONFIG)!r}, not {config_digest}"
                       if notes.get(artifacts.A_CONFIG) else "it does not name the image's config digest")
        if problem:
            warn(f"skipping the enroot artifact {digest if isinstance(digest, str) else '?'}: {problem}")
            continue
        found.append(Candidate(digest, preset, entry))
    return found


def check_squashfs(path: Path) -> None:
    """IntegrityError (DamagedImage, exit 6) unless ``path`` is a squashfs 4.0 image whose superblock fits
    the file."""
    sif_reader.check_squashfs_file(path)
