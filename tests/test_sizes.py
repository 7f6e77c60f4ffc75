"""``sizes.parse_size``: one size grammar for the store's --max-size and the validator's sizes."""

import pytest

from imagekit.util.errors import UsageError
from imagekit.util.sizes import format_size, parse_size


def test_parse_size():
    assert parse_size("50G") == 50 << 30 and parse_size("500M") == 500 << 20
    assert parse_size("1.5T") == int(1.5 * (1 << 40)) and parse_size("123") == 123
    assert parse_size("2GiB") == 2 << 30 and parse_size("0") == 0
    with pytest.raises(UsageError, match="bad size"):
        parse_size("lots")
    with pytest.raises(ValueError, match="bad size"):   # what the file readers catch, to add file and key
        parse_size("1Q")
    assert parse_size("1P") == 1 << 50 and parse_size(8) == 8 and parse_size("8K") == 8192


def test_format_size():
    assert format_size(8 << 30) == "8 GiB" and format_size(1536) == "1536 B"
