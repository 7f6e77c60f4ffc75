"""The ``.intoto.jsonl`` file: the signed statements (DSSE envelopes, one per line) about a file.

It travels beside what it is about: ``mpi.sqsh.intoto.jsonl`` beside ``mpi.sqsh``,
``attestations.intoto.jsonl`` beside a store entry's ``image.sqsh`` (added beside the entry, never
changing it), and each envelope as an OCI referrer of the image's manifest. One line per envelope
is the convention SLSA's generators use for ``.intoto.jsonl`` files.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Callable

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


def loads(data: bytes, where: str, warn: Callable[[str], None] | None = None) -> list[dsse.Envelope]:
    """Every envelope of a bundle's bytes (blank lines skipped). A malformed line is one envelope
    skipped, said through ``warn``, like an envelope signed by an unknown key; EnvelopeError only when
    no line is an envelope."""
    if len(data) > MAX_BUNDLE:
        raise dsse.EnvelopeError(f"{where}: {len(data)} bytes, more than the {MAX_BUNDLE} a bundle may hold")
    out, problems = [], []
    for n, line in enumerate(data.split(b"\n"), 1):
        if line.strip():
            try:
                out.append(dsse.parse(line, f"{where}:{n}"))
            except dsse.EnvelopeError as exc:
                problems.append(exc)
                if warn:
                    warn(f"skipping an envelope: {exc.message}")
    if problems and not out:
        raise problems[0]
    return out


def read(path: str | os.PathLike, warn: Callable[[str], None] | None = None) -> list[dsse.Envelope]:
    """The envelopes in the bundle file ``path``; [] when there is none. Opened as an ``oci:`` blob is
    (docs/security.md): never through a symbolic link, never blocking on a FIFO, and only a regular file
    of at most MAX_BUNDLE bytes is read; anything else is EnvelopeError naming it, before a byte is read."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise dsse.EnvelopeError(f"{p} is a symbolic link: signatures are read from a file, never through a "
                                     "link", f"put the file itself there (cp --remove-destination)") from None
        raise UsageError(f"{p}: cannot read the signatures ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise dsse.EnvelopeError(f"{p} is not a regular file (a FIFO, a device or a directory): refused before "
                                     "reading", "signatures are a file of DSSE envelopes, one a line")
        if st.st_size > MAX_BUNDLE:
            raise dsse.EnvelopeError(f"{p}: {st.st_size} bytes, more than the {MAX_BUNDLE} a bundle may hold")
        os.set_blocking(fd, True)
        with open(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_BUNDLE + 1)
    finally:
        os.close(fd)
    return loads(data, str(p), warn)


def write(path: str | os.PathLike, envelopes: list[dict], mode: int = 0o644) -> Path:
    """Write a bundle atomically (temporary name, then rename)."""
    with atomic.target(path, mode) as tmp:
        tmp.write_bytes(dumps(envelopes))
    return Path(path)
