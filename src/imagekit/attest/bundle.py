"""The ``.intoto.jsonl`` file: the signed statements (DSSE envelopes, one per line) about a file.

It travels beside what it is about: ``mpi.sqsh.intoto.jsonl`` beside ``mpi.sqsh``,
``attestations.intoto.jsonl`` beside a store entry's ``image.sqsh`` (added beside the entry, never
changing it), and each envelope as an OCI referrer of the image's manifest. One line per envelope
is the convention SLSA's generators use for ``.intoto.jsonl`` files.
"""

from __future__ import annotations

import os
from pathlib import Path

from imagekit.util import atomic
from imagekit.attest import BUNDLE_SUFFIX, dsse
from imagekit.util.errors import UsageError

ENTRY_NAME = "attestations" + BUNDLE_SUFFIX      # beside a store entry's file
MAX_BUNDLE = 4 * dsse.MAX_ENVELOPE


def beside(path: str | os.PathLike) -> Path:
    """Where the bundle of ``path`` lives: ``PATH.intoto.jsonl``."""
    p = Path(path)
    return p.with_name(p.name + BUNDLE_SUFFIX)


def dumps(envelopes: list[dict]) -> bytes:
    return b"".join(dsse.encode(e) + b"\n" for e in envelopes)


def loads(data: bytes, where: str) -> list[dsse.Envelope]:
    """Every envelope of a bundle's bytes (blank lines skipped); EnvelopeError on a bad line."""
    if len(data) > MAX_BUNDLE:
        raise dsse.EnvelopeError(f"{where}: {len(data)} bytes, more than the {MAX_BUNDLE} a bundle may hold")
    out = []
    for n, line in enumerate(data.split(b"\n"), 1):
        if line.strip():
            out.append(dsse.parse(line, f"{where}:{n}"))
    return out


def read(path: str | os.PathLike) -> list[dsse.Envelope]:
    """The envelopes in the bundle file ``path``; [] when there is none."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            data = fh.read(MAX_BUNDLE + 1)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UsageError(f"{p}: cannot read the signatures ({exc.strerror})") from None
    return loads(data, str(p))


def write(path: str | os.PathLike, envelopes: list[dict], mode: int = 0o644) -> Path:
    """Write a bundle atomically (temporary name, then rename)."""
    with atomic.target(path, mode) as tmp:
        tmp.write_bytes(dumps(envelopes))
    return Path(path)
