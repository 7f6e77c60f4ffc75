"""One table of export formats: every stage that names a suffix or a mode reads it."""

from __future__ import annotations

import pytest

from imagekit import export
from imagekit.errors import UsageError
from imagekit.export import artifacts, formats, sif
from imagekit.export.store import keys


def test_every_stage_reads_the_one_table():
    assert export.FORMATS == tuple(formats.FORMATS) == ("enroot", "sif")
    assert export.SUFFIX == keys.SUFFIX == {"enroot": ".sqsh", "sif": ".sif"}
    for name, fmt in formats.FORMATS.items():
        assert (artifacts.kind(name).suffix, artifacts.kind(name).mode) == (fmt.suffix, fmt.mode)
    assert sif.FILE_MODE == formats.get("sif").mode == 0o755


def test_an_unknown_format_names_the_valid_ones():
    with pytest.raises(UsageError, match="unknown export format 'enrot'") as info:
        formats.get("enrot")
    assert info.value.hint == "use one of: enroot, sif"
