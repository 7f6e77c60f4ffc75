"""``export.ExportRequest``: a bad format, preset, tool or via is refused when the request is made,
before any image is read (the image named in the CLI tests does not exist: had it been read first,
the error would name the image)."""

import pytest
from click.testing import CliRunner

from imagekit.cli import main
from imagekit.util.errors import UsageError
from imagekit.export import ExportRequest, formats

MISSING = "imagekit-test/no-such-image:never"


@pytest.mark.parametrize("kw, message", [
    (dict(format="enrot"), "unknown export format 'enrot'"),
    (dict(format="enroot", preset="fastest"), "unknown compression preset 'fastest'"),
    (dict(format="sif", preset="lz4"), "unknown SIF compression 'lz4'"),
    (dict(format="enroot", tool="gensquashfs"), "unknown squashfs tool 'gensquashfs'"),
    (dict(format="enroot", via="apptainer"), "--via apptainer applies to --to sif only"),
    (dict(format="sif", via="singularity"), "unknown --via 'singularity'"),
])
def test_a_bad_option_fails_when_the_request_is_made(kw, message):
    with pytest.raises(UsageError, match=message):
        ExportRequest(**kw)


def test_no_preset_is_the_formats_default_and_options_are_a_tuple():
    for fmt in ("enroot", "sif"):
        assert ExportRequest(fmt).preset == formats.get(fmt).default_preset
    r = ExportRequest("enroot", squash_opts=["-b", "256K"], tool="tar2sqfs")
    assert r.squash_opts == ("-b", "256K")
    assert r.store_options() == ("squash-opt=-b", "squash-opt=256K", "tool=tar2sqfs")


def test_the_cli_refuses_a_bad_preset_before_reading_the_image(tmp_path):
    out = tmp_path / "x.sqsh"
    result = CliRunner().invoke(main, ["export", MISSING, "--to", "enroot", "--preset", "fastest", "-o", str(out),
                                       "--store", str(tmp_path / "store")])
    assert result.exit_code == 2, result.output
    assert "unknown compression preset 'fastest'" in result.output and MISSING not in result.output
    assert not out.exists() and not (tmp_path / "store").exists()


def test_push_refuses_a_bad_preset_before_pushing(tmp_path):
    """`push --with enroot --preset fastest`: the export's request fails first, so nothing is pushed
    (the image does not exist and the registry is not there: either would have been the error)."""
    result = CliRunner().invoke(main, ["push", MISSING, "--to", "127.0.0.1:9/imagekit-test/none:1",
                                       "--with", "enroot", "--preset", "fastest"])
    assert result.exit_code == 2, result.output
    assert "unknown compression preset 'fastest'" in result.output and MISSING not in result.output
