"""``export.ExportRequest``: a bad format, preset, tool or via is refused when the request is made,
before any image is read (the image named in the CLI tests does not exist: had it been read first,
the error would name the image)."""

import pytest
from click.testing import CliRunner

from imagekit.cli import main
from imagekit.errors import UsageError
from imagekit.export import DEFAULT_PRESET, ExportRequest

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
        assert ExportRequest(fmt).preset == DEFAULT_PRESET[fmt]
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


def test_a_format_added_alone_is_one_writer_and_one_row(tmp_path, monkeypatch):
    """The export axis: a new format is a Format (formats.FORMATS) and a Converter row, and nothing else
    asks for a format by name. A made-up 'tarball' format exports through the same request, store-less."""
    from imagekit import export as export_mod
    from imagekit.export import formats
    from imagekit.export.output import ExportResult

    written = []

    def write(source, target, request, progress):
        written.append((request.format, request.preset))
        target.write_bytes(b"x")
        return ExportResult(path=str(target), format=request.format, image=source.text, bytes=1,
                            sha256="0" * 64, seconds=0.0, tool="test", compression=request.preset)

    fmt = formats.Format("tarball", ".tar", 0o644)
    monkeypatch.setitem(formats.FORMATS, "tarball", fmt)
    monkeypatch.setitem(export_mod.CONVERTERS, "tarball",
                        export_mod.Converter(fmt, write, "plain", lambda p: None))
    request = ExportRequest("tarball")
    assert request.preset == "plain"
    with pytest.raises(UsageError, match="--via apptainer applies to --to sif only"):
        ExportRequest("tarball", via="apptainer")
    monkeypatch.setenv("IMAGEKIT_STATE", str(tmp_path / "state"))   # report's record of the export
    monkeypatch.setattr(export_mod, "open_source", lambda image, platform=None: _FakeSource(image))
    result = export_mod.export_image("img:1", request, tmp_path / "out.tar", store=False)
    assert written == [("tarball", "plain")] and result.format == "tarball"


class _FakeSource:
    def __init__(self, text: str) -> None:
        self.text = text
        self.stem = "img+1"

    def image_id(self) -> str:
        return "sha256:" + "1" * 64
