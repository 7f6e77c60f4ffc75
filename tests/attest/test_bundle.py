"""The ``.intoto.jsonl`` file is opened as an ``oci:`` blob is (H7 of ../shared/reviews/security-4.md):
a FIFO or a device where it should be is refused before a byte is read (it used to hang the importer
and ``imagekit verify`` until killed), a link is never followed, and an envelope that nests 200,000
deep is one malformed envelope, refused in one line (it used to be a RecursionError traceback).
``imagekit verify`` runs as a real process; its ``timeout=`` is a hang guard, never a measurement."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.attest import bundle, dsse, keys, signer

HANG_GUARD = 60
IMAGEKIT = Path(sys.executable).parent / "imagekit"
DEEP = b'{"payloadType":"x","payload":"","signatures":' + b"[" * 200_000 + b"]" * 200_000 + b"}"


@pytest.fixture
def sqsh(tmp_path) -> Path:
    """A real squashfs, and a key pair beside it (``ci.key``, ``ci.pub``)."""
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "hello").write_text("hi\n")
    out = tmp_path / "image.sqsh"
    subprocess.run(["mksquashfs", str(tmp_path / "root"), str(out), "-quiet", "-noappend"], check=True)
    keys.write_pair(keys.generate(), tmp_path / "ci")
    return out


def verify(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(IMAGEKIT), "verify", str(path), "--key", str(path.parent / "ci.pub")],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=HANG_GUARD)


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "directory"])
def test_a_statements_file_that_is_no_regular_file_is_refused_before_reading(sqsh, kind):
    side = bundle.beside(sqsh)
    if kind == "fifo":
        os.mkfifo(side)
    elif kind == "directory":
        side.mkdir()
    else:
        side.symlink_to("/dev/zero")
    res = verify(sqsh)
    assert res.returncode == 12 and "Traceback" not in res.stderr, res.stderr
    said = "symbolic link" if kind.startswith("link") else "not a regular file"
    assert str(side) in res.stderr and said in res.stderr, res.stderr


def test_a_deep_envelope_is_one_refusal_not_a_traceback(sqsh):
    bundle.beside(sqsh).write_bytes(DEEP + b"\n")
    res = verify(sqsh)
    assert res.returncode == 12 and "Traceback" not in res.stderr, res.stderr
    assert "nests deeper than" in res.stderr and len(res.stderr.strip().splitlines()) <= 2, res.stderr


def test_a_malformed_envelope_is_skipped_and_the_good_ones_count(sqsh, tmp_path):
    """One bad line (deep, truncated) among good envelopes: each is skipped with a warning, never the
    whole file."""
    key = keys.load_private(tmp_path / "ci.key")
    good = dsse.encode(signer.sign(b"{}", "application/vnd.in-toto+json", key))
    bundle.beside(sqsh).write_bytes(DEEP + b"\n" + good + b"\n" + good[:40] + b"\n")
    said: list[str] = []
    found = bundle.read(bundle.beside(sqsh), said.append)
    assert [e.raw for e in found] == [good]
    assert len(said) == 2 and "nests deeper" in said[0] and "not complete JSON" in said[1], said
