"""NCCL_DEBUG=INFO transport classification (imagekit.validate.nccl_log.classify)."""

from __future__ import annotations

import pytest

from imagekit.validate.nccl_log import classify


@pytest.mark.parametrize("via,want", [
    ("NET/IB/0/GDRDMA", ["IB", "GDRDMA"]), ("NET/IBext_v8/2/GDRDMA", ["IB", "GDRDMA"]),
    ("NET/Socket/1", ["Socket"]), ("P2P/IPC/read", ["P2P"]), ("P2P/CUMEM", ["P2P"]),
    ("SHM/direct/direct", ["SHM"]), ("NET/AWS Libfabric/0/GDRDMA", ["NET:AWS Libfabric", "GDRDMA"]),
])
def test_classify(via: str, want: list) -> None:
    assert classify(via) == want
