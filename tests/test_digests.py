"""One sha256 loop: the same digest as hashlib's, and a store entry's read refuses a link."""

from __future__ import annotations

import hashlib
import os

import pytest

from imagekit.util import digests
from imagekit.export import output
from imagekit.export.store import verify


def test_it_is_hashlibs_digest_across_chunk_boundaries(tmp_path):
    data = os.urandom(digests.CHUNK * 2 + 17)
    path = tmp_path / "f"
    path.write_bytes(data)
    want = hashlib.sha256(data).hexdigest()
    assert digests.sha256_and_size(path) == (want, len(data))
    assert output.sha256_file(path) == verify.sha256_file(path) == want


def test_a_store_entry_is_never_read_through_a_link(tmp_path):
    (tmp_path / "real").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert output.sha256_file(tmp_path / "link") == hashlib.sha256(b"x").hexdigest()
    with pytest.raises(OSError):
        verify.sha256_file(tmp_path / "link")
