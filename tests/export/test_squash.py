"""Compression presets: each one really gives the squashfs it names.

No engine needed: a small tar stream made here goes through the same command
lines the export pipeline runs (real sqfstar, `mksquashfs -tar` and tar2sqfs),
and the result's superblock is read back with `unsquashfs -s`.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from imagekit.util.errors import UsageError
from imagekit.export import squash
from imagekit.export.squash import MIB, Preset
from helpers.export_helpers import assert_superblock, superblock, unsquash

FILES = {
    "big/text": b"".join(b"line %d of a compressible file\n" % i for i in range(120_000)),  # ~3.7 MB
    "small/a": b"hello\n",
    "small/b": bytes(range(256)) * 40,
}


def _tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("big", "small"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, data in FILES.items():
            info = tarfile.TarInfo(name)
            info.size, info.uid = len(data), 1000
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


TAR = _tar()


def build(p: Preset | str, out: Path, tool: str = "auto", epoch: int | None = None) -> str:
    name, path = squash.pick_tool(tool, p if isinstance(p, Preset) else squash.preset(p))
    spec = squash.SquashSpec(preset=p, tool=name, epoch=epoch)
    subprocess.run(squash.tool_command(name, path, spec, out), input=TAR, check=True,
                   capture_output=True)
    return name


def assert_contents(sqsh: Path, tmp_path: Path, all_root: bool = True) -> None:
    tree = unsquash(sqsh, tmp_path / f"{sqsh.stem}-tree")
    for name, data in FILES.items():
        assert (tree / name).read_bytes() == data
        # -all-root (tar2sqfs has none: the export pipeline rewrites the owners in the stream)
        assert (tree / name).stat().st_uid == (0 if all_root else 1000)


@pytest.mark.parametrize("name", sorted(squash.PRESETS))
def test_named_preset_gives_its_superblock(name, tmp_path):
    out = tmp_path / f"{name}.sqsh"
    build(name, out)
    assert_superblock(superblock(out), squash.PRESETS[name])
    assert_contents(out, tmp_path)


@pytest.mark.parametrize("p", [Preset("zstd", level=19, block=256 << 10),
                               Preset("lzo", algorithm="lzo1x_1", raw_data=True),
                               Preset("lz4", hc=True, block=1 * MIB),
                               Preset("gzip", level=1, tailends=False)],
                         ids=lambda p: p.label())
def test_compressor_options_reach_the_file(p, tmp_path):
    """Levels and algorithms go through `mksquashfs -tar`, not sqfstar (which misreads -X)."""
    out = tmp_path / "x.sqsh"
    assert build(p, out) == "mksquashfs"
    assert_superblock(superblock(out), p)
    assert_contents(out, tmp_path)


@pytest.mark.parametrize("name", ["shared-fs", "gzip", "zstd"])
def test_tar2sqfs_gives_the_same_superblock(name, tmp_path):
    out = tmp_path / "ng.sqsh"
    assert build(name, out, tool="tar2sqfs") == "tar2sqfs"
    assert_superblock(superblock(out), squash.PRESETS[name])
    assert_contents(out, tmp_path, all_root=False)


def test_enroot_preset_is_mksquashfs_on_a_directory(tmp_path):
    """Enroot runs `mksquashfs DIR OUT -all-root -comp lzo -noD`: the same superblock flags."""
    root = tmp_path / "root"
    for name, data in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    ref = tmp_path / "ref.sqsh"
    subprocess.run(["mksquashfs", str(root), str(ref), "-all-root", "-comp", "lzo", "-noD",
                    "-no-xattrs", "-quiet", "-no-progress"], check=True, capture_output=True)
    ours = tmp_path / "ours.sqsh"
    build("enroot", ours)
    strip = ("Found a valid", "Creation or last append", "Filesystem size", "Number of")
    lines = [[x for x in superblock(p).splitlines() if not x.startswith(strip)] for p in (ref, ours)]
    assert lines[0] == lines[1]


def test_sqfstar_and_mksquashfs_tar_write_the_same_bytes(tmp_path):
    a, b = tmp_path / "a.sqsh", tmp_path / "b.sqsh"
    build("enroot", a, tool="sqfstar", epoch=1_700_000_000)
    build("enroot", b, tool="mksquashfs", epoch=1_700_000_000)
    assert a.read_bytes() == b.read_bytes()


def test_sqfstar_refuses_presets_with_compressor_options():
    with pytest.raises(UsageError, match="--tool mksquashfs"):
        squash.pick_tool("sqfstar", squash.PRESETS["shared-fs"])
    assert squash.pick_tool("auto", squash.PRESETS["shared-fs"])[0] == "mksquashfs"
    assert squash.pick_tool("auto", squash.PRESETS["enroot"])[0] == "sqfstar"


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(UsageError, match="unknown compression preset 'fastest'") as err:
        squash.preset("fastest")
    assert "enroot" in err.value.hint and "shared-fs" in err.value.hint


def test_default_presets_exist():
    assert squash.DEFAULT_PRESET in squash.PRESETS
    assert squash.DEFAULT_STORE_PRESET in squash.PRESETS
