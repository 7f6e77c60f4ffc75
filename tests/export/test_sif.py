"""SIF: the reader rejects damaged files; the native writer's output checked field by field.

Apptainer cannot be installed here: the layout is checked against the SIF
format facts from apptainer/sif (header/descriptor sizes, data types,
alignment) by an independent struct parse, and the runtime scripts are run
with /bin/sh inside the extracted root filesystem.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import uuid
from pathlib import Path

import pytest

from imagekit.export import export_image, sif
from export_helpers import engine_tree, tree_listing, unsquash


def _tiny_sif(tmp_path: Path) -> Path:
    """A SIF made by the writer's own pieces around a tiny squashfs (no engine needed)."""
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d/f").write_text("x\n")
    tar = subprocess.run(["tar", "-C", str(src), "-cf", "-", "d"], capture_output=True, check=True).stdout
    objects = [sif._Object(sif.DATA_DEFFILE, b"bootstrap: docker-daemon\nfrom: t\n"),
               sif._Object(sif.DATA_PARTITION, None,
                           extra=sif.PARTITION_EXTRA.pack(sif.FS_SQUASHFS, sif.PART_PRIMSYS, b"02"))]
    offset = sif._layout(objects)[-1].offset
    out = tmp_path / "tiny.sif"
    subprocess.run(["sqfstar", "-force", "-quiet", "-no-progress", "-offset", str(offset), str(out)],
                   input=tar, check=True, capture_output=True)
    descriptors = sif._layout(objects, out.stat().st_size - offset)
    with open(out, "r+b") as fh:
        sif.write_prefix(fh, objects, descriptors, arch="02", ident=uuid.uuid4(), when=1)
    return out


def test_reader_accepts_tiny_sif(tmp_path):
    info = sif.read_sif(_tiny_sif(tmp_path))
    assert [d.datatype for d in info.descriptors] == [sif.DATA_DEFFILE, sif.DATA_PARTITION]
    assert info.read(info.primary_partition())[:4] == b"hsqs"


def _corrupt(path: Path, offset: int, data: bytes) -> Path:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)
    return path


@pytest.mark.parametrize("damage", ["magic", "version", "descr-offset", "object-offset",
                                    "truncated", "used-count", "arch", "empty"])
def test_reader_rejects_damaged_sif(tmp_path, damage):
    path = _tiny_sif(tmp_path)
    if damage == "magic":
        _corrupt(path, 32, b"NOT_MAGIC")
    elif damage == "version":
        _corrupt(path, 42, b"99")
    elif damage == "descr-offset":
        _corrupt(path, 32 + 10 + 3 + 3 + 16 + 8 * 4, struct.pack("<q", 1 << 40))
    elif damage == "object-offset":      # first descriptor's offset field points past EOF
        _corrupt(path, 4096 + 4 + 1 + 12, struct.pack("<q", 1 << 40))
    elif damage == "truncated":
        with open(path, "r+b") as fh:
            fh.truncate(path.stat().st_size - 4096)
    elif damage == "used-count":          # header claims a different number of free slots
        _corrupt(path, 32 + 10 + 3 + 3 + 16 + 8 * 2, struct.pack("<q", 40))
    elif damage == "arch":
        _corrupt(path, 45, b"04")
    elif damage == "empty":
        path.write_bytes(b"")
    with pytest.raises(sif.SifFormatError):
        sif.read_sif(path)


# ---------------------------------------------------------------- engine


@pytest.fixture(scope="module")
def odd_sif(odd_image, tmp_path_factory):
    out = tmp_path_factory.mktemp("sif") / "odd.sif"
    return out, export_image(odd_image, "sif", out)


@pytest.mark.engine
def test_sif_header_and_descriptors(odd_image, odd_sif):
    from imagekit.export.squash import image_inspect

    path, result = odd_sif
    raw = path.read_bytes()
    size = len(raw)
    launch, magic, version, arch = raw[0:32], raw[32:42], raw[42:45], raw[45:48]
    assert launch == b"#!/usr/bin/env run-singularity\n\0" and magic == b"SIF_MAGIC\0"
    assert version == b"01\0" and arch == b"02\0"                      # amd64
    created, modified, dfree, dtotal, doff, dsize, data_off, data_size = struct.unpack_from("<8q", raw, 64)
    assert (dfree, dtotal, doff, dsize, data_off) == (45, 48, 4096, 48 * 585, 4096 + 48 * 585)
    assert data_off + data_size == size and created == modified > 0
    descs = []
    for i in range(3):
        descs.append(struct.unpack_from("<i?IIIqqqqqqq128s384s", raw, 4096 + i * 585))
    assert not struct.unpack_from("<i?", raw, 4096 + 3 * 585)[1]      # slot 4 unused
    types = [d[0] for d in descs]
    assert types == [0x4001, 0x4006, 0x4004]
    end = data_off
    for i, d in enumerate(descs):
        dtype, used, ident, group, link, off, n, padded = d[:8]
        assert used and ident == i + 1 and group == 0xF0000001 and link == 0
        assert off % 4096 == 0 and padded == off - end + n
        end = off + n
    assert end == size
    deffile = raw[descs[0][5]:descs[0][5] + descs[0][6]]
    assert deffile == f"bootstrap: docker-daemon\nfrom: {odd_image}\n".encode()
    assert descs[1][12].rstrip(b"\0") == b"oci-config.json"
    oci = json.loads(raw[descs[1][5]:descs[1][5] + descs[1][6]])
    config = image_inspect(odd_image)["Config"]
    assert oci["Env"] == config["Env"] and oci["Entrypoint"] == config["Entrypoint"]
    assert oci["Cmd"] == config["Cmd"] and oci["Labels"] == config["Labels"]
    fstype, parttype, parch = struct.unpack_from("<ii3s", descs[2][13])
    assert (fstype, parttype, parch) == (1, 2, b"02\0")
    assert raw[descs[2][5]:descs[2][5] + 4] == b"hsqs"
    info = sif.read_sif(path)
    assert info.primary_partition().size == descs[2][6] and result.bytes == size


@pytest.fixture(scope="module")
def sif_tree(odd_sif, tmp_path_factory):
    info = sif.read_sif(odd_sif[0])
    part = info.primary_partition()
    return unsquash(odd_sif[0], tmp_path_factory.mktemp("sif-tree") / "root", offset=part.offset)


@pytest.mark.engine
def test_sif_tree_matches_image_plus_layout(odd_image, sif_tree, docker_bin):
    from imagekit.export import singularity_d

    ref = engine_tree(docker_bin, odd_image)
    expected = {n for n in ref if n and n != ".dockerenv" and not n.startswith("dev/")}
    got = tree_listing(sif_tree)
    assert expected <= set(got)
    added = set(got) - expected
    assert added == ({*singularity_d.files({})} | set(singularity_d.SYMLINKS)
                     | {d for d in singularity_d.BASE_DIRS}) - expected
    # Ownership is kept (Apptainer builds as root), so is the setuid bit.
    assert got["opt/data/file.txt"].st_uid == 1234 and got["opt/data/file.txt"].st_gid == 5678
    assert got["opt/data/suid"].st_mode & 0o7777 == 0o4755
    assert (sif_tree / "opt/data/hard").stat().st_ino == (sif_tree / "opt/data/file.txt").stat().st_ino
    assert (sif_tree / "apptainer").readlink().as_posix() == ".singularity.d/runscript"
    for script in ("runscript", "actions/run", "actions/exec", "env/10-docker2singularity.sh"):
        assert got[f".singularity.d/{script}"].st_mode & 0o777 == 0o755
    assert (sif_tree / "etc/hosts").read_text() == ""
    labels = json.loads((sif_tree / ".singularity.d/labels.json").read_text())
    assert labels["io.imagekit.test"] == "yes"


def _in_tree(tree: Path, *argv: str) -> str:
    proc = subprocess.run([shutil.which("chroot"), str(tree), *argv], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.engine
def test_sif_runtime_scripts_behave(sif_tree):
    """run/exec actions as Apptainer invokes them: env scripts sourced, Docker's arg rule."""
    assert _in_tree(sif_tree, "/.singularity.d/actions/run") == "ep arg it's cmd one two\n"
    assert _in_tree(sif_tree, "/.singularity.d/actions/run", "a", "b c") == "ep arg it's a b c\n"
    out = _in_tree(sif_tree, "/.singularity.d/actions/exec", "/bin/sh", "-c",
                   'printf "%s|%s|%s|" "$GREETING" "$QUOTED" "${EMPTY-unset}"; echo "$PATH"')
    assert out == ("hello world|it's \"quoted\" $x \\ back||"
                   "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n")


def test_via_apptainer_calls_apptainer_build_and_writes_atomically(tmp_path, monkeypatch):
    """Apptainer cannot be installed here: a stub on PATH records its arguments and writes the file,
    to show imagekit's documented call (`apptainer build [--mksquashfs-args ...] OUT docker-daemon://IMAGE`)
    and that a failing apptainer leaves nothing behind."""
    import os
    import stat

    from imagekit.errors import ImagekitError
    from imagekit.export import sif

    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "argv"
    stub = bindir / "apptainer"
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "' + str(log) + '"\n'
                    '[ -n "$FAIL" ] && { echo "FATAL: boom" >&2; exit 255; }\n'
                    'out=""; for a in "$@"; do case "$a" in docker-daemon://*) ;; *.part) out="$a";; esac; done\n'
                    'echo SIF > "$out"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "x.sif"
    result = sif._via_apptainer("site/img:1", out, "zstd")
    argv = log.read_text().splitlines()
    assert argv[0] == "build" and argv[1:3] == ["--mksquashfs-args", "-comp zstd"]
    assert argv[-1] == "docker-daemon://site/img:1" and argv[-2].endswith(".part")
    assert out.read_text() == "SIF\n" and result.tool == "apptainer"
    monkeypatch.setenv("FAIL", "1")
    with pytest.raises(ImagekitError, match="FATAL: boom"):
        sif._via_apptainer("site/img:1", tmp_path / "y.sif", "gzip")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["argv", "bin", "x.sif"]
