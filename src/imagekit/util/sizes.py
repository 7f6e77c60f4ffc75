"""Byte sizes, one grammar for every option and file that takes one: ``50G``, ``1.5T``, ``2GiB``, ``123``.

Units are powers of 1024 (K, M, G, T, P), as nccl-tests and OSU write them (``-b 8 -e 8G``) and as
``imagekit store gc --max-size`` takes them.
"""

from __future__ import annotations

import re

from imagekit.util.errors import UsageError

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:i?B)?\s*", re.IGNORECASE)
_POWERS = " KMGTP"


class SizeError(UsageError, ValueError):
    """A size that does not parse: a usage error for an option, a ValueError for the file readers,
    which add the file, line and key themselves."""


def parse_size(value: "str | int") -> int:
    """``"1G"`` -> 1073741824; ints pass through. Raises SizeError (a ValueError) on anything else."""
    if isinstance(value, bool):
        raise SizeError(f"not a size: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise SizeError(f"negative size: {value}")
        return value
    m = _SIZE.fullmatch(str(value))
    if not m:
        raise SizeError(f"bad size {value!r}: write a number with an optional K, M, G, T or P (powers of 1024), "
                        "e.g. 50G")
    return int(float(m.group(1)) * 1024 ** _POWERS.index(m.group(2).upper() or " "))


def human(n: float) -> str:
    """A size for people: 1.5 GiB, 512 B."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def format_size(size: int) -> str:
    """Exact binary units when they divide evenly (8 GiB), else bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"
