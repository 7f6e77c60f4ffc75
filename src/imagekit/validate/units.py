"""Byte sizes as nccl-tests and OSU write them (binary K/M/G, like ``-b 8 -e 8G``)."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(value: "str | int") -> int:
    """``"1G"`` -> 1073741824; ints pass through. Raises ValueError on anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"negative size: {value}")
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"not a size: {value!r} (use bytes or K/M/G, e.g. 1G)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def format_size(size: int) -> str:
    """Exact binary units when they divide evenly (8 GiB), else bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"
