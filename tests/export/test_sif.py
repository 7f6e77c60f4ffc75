"""SIF: the native writer's output checked field by field (the reader's own checks: tests/test_sif_reader.py).

Apptainer cannot be installed here: the layout is checked against the SIF
format facts from apptainer/sif (header/descriptor sizes, data types,
alignment) and Apptainer 1.4's build and inspect sources (object order,
inspect-metadata.json, labels, symlinks, file mode) by an independent struct
parse and unsquashfs, and the runtime scripts are run with /bin/sh inside the
extracted root filesystem.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from imagekit.export import ExportRequest, export_image, sif
from helpers.export_helpers import engine_tree, tree_listing, unsquash
from helpers.sif_files import tiny_sif as _tiny_sif


# ---------------------------------------------------------------- engine


@pytest.fixture(scope="module")
def odd_sif(odd_image, tmp_path_factory):
    out = tmp_path_factory.mktemp("sif") / "odd.sif"
    return out, export_image(odd_image, ExportRequest("sif"), out)


def _descriptors(raw: bytes, n: int) -> list[tuple]:
    return [struct.unpack_from("<i?IIIqqqqqqq128s384s", raw, 4096 + i * 585) for i in range(n)]


def _data(raw: bytes, d: tuple) -> bytes:
    return raw[d[5]:d[5] + d[6]]


@pytest.mark.engine
def test_sif_header_and_descriptors(odd_image, odd_sif):
    from imagekit.engines.docker import inspect

    path, result = odd_sif
    raw = path.read_bytes()
    size = len(raw)
    launch, magic, version, arch = raw[0:32], raw[32:42], raw[42:45], raw[45:48]
    assert launch == b"#!/usr/bin/env run-singularity\n\0" and magic == b"SIF_MAGIC\0"
    assert version == b"01\0" and arch == b"02\0"                      # amd64
    created, modified, dfree, dtotal, doff, dsize, data_off, data_size = struct.unpack_from("<8q", raw, 64)
    assert (dfree, dtotal, doff, dsize, data_off) == (44, 48, 4096, 48 * 585, 4096 + 48 * 585)
    assert data_off + data_size == size and created == modified > 0
    descs = _descriptors(raw, 4)
    assert not struct.unpack_from("<i?", raw, 4096 + 4 * 585)[1]      # slot 5 unused
    # Apptainer 1.4's order: definition, JSON objects sorted by name, then the partition.
    assert [(d[0], d[12].rstrip(b"\0")) for d in descs] == [
        (0x4001, b""), (0x4006, b"inspect-metadata.json"), (0x4006, b"oci-config.json"), (0x4004, b"")]
    end = data_off
    for i, d in enumerate(descs):
        dtype, used, ident, group, link, off, n, padded = d[:8]
        assert used and ident == i + 1 and group == 0xF0000001 and link == 0
        assert off % 4096 == 0 and padded == off - end + n
        end = off + n
    assert end == size
    assert _data(raw, descs[0]) == f"bootstrap: docker-daemon\nfrom: {odd_image}\n".encode()
    oci = json.loads(_data(raw, descs[2]))
    config = inspect(odd_image).attrs["Config"]
    assert oci["Env"] == config["Env"] and oci["Entrypoint"] == config["Entrypoint"]
    assert oci["Cmd"] == config["Cmd"] and oci["Labels"] == config["Labels"]
    fstype, parttype, parch = struct.unpack_from("<ii3s", descs[3][13])
    assert (fstype, parttype, parch) == (1, 2, b"02\0")
    assert raw[descs[3][5]:descs[3][5] + 4] == b"hsqs"
    info = sif.read_sif(path)
    assert info.primary_partition().size == descs[3][6] and result.bytes == size


@pytest.mark.engine
def test_the_default_sif_is_gzip_at_zlibs_default_level(odd_sif):
    """The SIF default is gzip-6 (half gzip-9's CPU for 0.2 % more bytes, bench/export.py --to sif): the
    partition's superblock, as unsquashfs reads it, says gzip with compression-level 6."""
    path, result = odd_sif
    part = sif.read_sif(path).primary_partition()
    said = subprocess.run(["unsquashfs", "-s", "-o", str(part.offset), str(path)], capture_output=True,
                          text=True, check=True).stdout
    assert result.compression == "gzip-6"
    assert re.search(r"^Compression gzip$", said, re.M) and re.search(r"compression-level 6\b", said), said


@pytest.mark.engine
def test_sif_file_is_executable_like_apptainers(odd_sif):
    """apptainer/sif creates the file with mode 0755 less the umask."""
    import os

    umask = os.umask(0)
    os.umask(umask)
    # Through the export store the output is a hard link to a read-only entry: r-x, like 0755 less w.
    assert odd_sif[0].stat().st_mode & 0o7777 == 0o755 & ~umask & ~0o222
    assert sif.file_mode() == 0o755 & ~umask


def test_sif_starts_through_its_launch_script(tmp_path, monkeypatch):
    """``./x.sif ARGS`` is run by the kernel as ``/usr/bin/env run-singularity ./x.sif ARGS``
    (Apptainer's run-singularity is ``apptainer run "$@"``). Apptainer cannot be installed here:
    a run-singularity on PATH records what the kernel handed it. The file is written as the
    export writes it (``atomic.target`` with :func:`sif.file_mode`)."""
    import os

    from imagekit.util import atomic

    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / "run-singularity"
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    tiny = _tiny_sif(tmp_path)
    out = tmp_path / "x.sif"
    with atomic.target(out, sif.file_mode()) as tmp:
        tmp.write_bytes(tiny.read_bytes())
    proc = subprocess.run(["./x.sif", "a b", "$HOME"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["./x.sif", "a b", "$HOME"]
    out.chmod(0o644)     # what the file was before: not executable
    with pytest.raises(PermissionError):
        subprocess.run(["./x.sif"], cwd=tmp_path)


@pytest.fixture(scope="module")
def sif_tree(odd_sif, tmp_path_factory):
    info = sif.read_sif(odd_sif[0])
    part = info.primary_partition()
    return unsquash(odd_sif[0], tmp_path_factory.mktemp("sif-tree") / "root", offset=part.offset)


@pytest.mark.engine
def test_sif_tree_matches_image_plus_layout(odd_image, sif_tree, docker_bin):
    from imagekit.export import singularity_d

    ref = engine_tree(docker_bin, odd_image)
    # Docker's init layer made /etc/hostname and /etc/mtab for the container (layers.made_by_docker).
    expected = {n for n in ref if n and n != ".dockerenv" and not n.startswith("dev/")} - {"etc/hostname", "etc/mtab"}
    got = tree_listing(sif_tree)
    assert "etc/hostname" in ref and "etc/mtab" in ref and not {"etc/hostname", "etc/mtab"} & set(got)
    assert expected <= set(got)
    added = set(got) - expected
    assert added == ({*singularity_d.files({})} | set(singularity_d.SYMLINKS)
                     | {d for d in singularity_d.BASE_DIRS}) - expected
    # Ownership is kept (Apptainer builds as root), so is the setuid bit.
    assert got["opt/data/file.txt"].st_uid == 1234 and got["opt/data/file.txt"].st_gid == 5678
    assert got["opt/data/suid"].st_mode & 0o7777 == 0o4755
    assert (sif_tree / "opt/data/hard").stat().st_ino == (sif_tree / "opt/data/file.txt").stat().st_ino
    # Apptainer's symlinks (base_environment.go): /singularity, not an /apptainer of our own.
    links = {name: (sif_tree / name).readlink().as_posix()
             for name in ("singularity", ".run", ".exec", ".test", ".shell", "environment")}
    assert links == {"singularity": ".singularity.d/runscript", ".run": ".singularity.d/actions/run",
                     ".exec": ".singularity.d/actions/exec", ".test": ".singularity.d/actions/test",
                     ".shell": ".singularity.d/actions/shell", "environment": ".singularity.d/env/90-environment.sh"}
    assert not (sif_tree / "apptainer").exists()
    for script in ("runscript", "actions/run", "actions/exec", "env/10-docker2singularity.sh"):
        assert got[f".singularity.d/{script}"].st_mode & 0o777 == 0o755
    assert (sif_tree / "etc/hosts").read_text() == ""
    assert (sif_tree / ".singularity.d/Singularity").read_text() == f"bootstrap: docker-daemon\nfrom: {odd_image}\n"
    assert got[".singularity.d/Singularity"].st_mode & 0o777 == 0o644


@pytest.mark.engine
def test_sif_labels_json_has_image_and_build_labels(odd_image, odd_sif, sif_tree):
    """labels.json as Apptainer's build leaves it (metadata.go): the image's labels, then the
    org.label-schema.* build labels over them, tab-indented."""
    from imagekit.engines.docker import inspect

    text = (sif_tree / ".singularity.d/labels.json").read_text()
    labels = json.loads(text)
    when = sif.read_sif(odd_sif[0]).created
    image_labels = inspect(odd_image).attrs["Config"]["Labels"]
    assert image_labels["io.imagekit.test"] == "yes" and image_labels["org.example.note"] == "two words"
    assert {k: labels.pop(k) for k in image_labels} == image_labels
    date = labels.pop("org.label-schema.build-date")
    assert re.fullmatch(r"[A-Z][a-z]+day_\d{1,2}_[A-Z][a-z]+_\d{4}_\d{1,2}:\d{1,2}:\d{1,2}_UTC", date)
    import time
    t = time.gmtime(when)
    assert date.split("_")[1:4] == [str(t.tm_mday), time.strftime("%B", t), str(t.tm_year)]
    assert labels == {"org.label-schema.schema-version": "1.0", "org.label-schema.build-arch": "amd64",
                      "org.label-schema.usage.singularity.deffile.bootstrap": "docker-daemon",
                      "org.label-schema.usage.singularity.deffile.from": odd_image}
    assert text.startswith('{\n\t"') and '\n\t"io.imagekit.test": "yes",\n' in text


def _inspect_all_like_apptainer(tree: Path) -> dict:
    """What ``apptainer inspect --all`` reads from a root filesystem (cmd/internal/cli/inspect.go),
    written here from that source, independently of imagekit: each file's text without its
    trailing newlines; labels.json parsed; the env scripts 10-docker*.sh and 9*-environment.sh
    by path; attributes that are empty left out."""
    def text(rel: str) -> str:
        path = tree / ".singularity.d" / rel
        return path.read_text().rstrip("\n") if path.is_file() else ""

    env = {f"/.singularity.d/env/{p.name}": p.read_text().rstrip("\n")
           for pattern in ("10-docker*.sh", "9*-environment.sh")
           for p in sorted((tree / ".singularity.d/env").glob(pattern))}
    attributes = {"environment": env, "labels": json.loads(text("labels.json") or "{}"),
                  "runscript": text("runscript"), "test": text("test"), "helpfile": text("runscript.help"),
                  "deffile": text("Singularity"), "startscript": text("startscript")}
    return {"data": {"attributes": {k: v for k, v in attributes.items() if v}}, "type": "container"}


@pytest.mark.engine
def test_sif_inspect_metadata_says_what_the_partition_holds(odd_sif, sif_tree):
    """The inspect-metadata.json object (generic JSON, by name) that Apptainer ≥ 1.4 reads for
    `apptainer inspect` equals what inspecting the unsquashed root filesystem gives, in the
    shape of Apptainer's pkg/inspect Metadata (Go's field order, compact, maps sorted)."""
    info = sif.read_sif(odd_sif[0])
    (obj,) = [d for d in info.descriptors if d.name == "inspect-metadata.json"]
    assert obj.datatype == sif.DATA_GENERIC_JSON
    raw = info.read(obj)
    metadata = json.loads(raw)
    assert metadata == _inspect_all_like_apptainer(sif_tree)
    assert list(metadata) == ["data", "type"]
    assert list(metadata["data"]["attributes"]) == ["environment", "labels", "runscript", "deffile", "startscript"]
    assert list(metadata["data"]["attributes"]["labels"]) == sorted(metadata["data"]["attributes"]["labels"])
    assert b"\n" not in raw and b": " not in raw.split(b'"labels"')[0]
    assert "GREETING" in metadata["data"]["attributes"]["environment"]["/.singularity.d/env/10-docker2singularity.sh"]


def _in_tree(tree: Path, *argv: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([shutil.which("chroot"), str(tree), *argv], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.engine
def test_sif_runtime_scripts_behave(sif_tree):
    """run/exec actions as Apptainer invokes them: env scripts sourced, Docker's arg rule; the
    arguments evaluated by the shell like Apptainer's runscript, or not under --no-eval."""
    assert _in_tree(sif_tree, "/.singularity.d/actions/run") == "ep arg it's cmd one two\n"
    assert _in_tree(sif_tree, "/.singularity.d/actions/run", "a", "b c") == "ep arg it's a b c\n"
    assert _in_tree(sif_tree, "/.singularity.d/actions/run", "$GREETING", "-n") == "ep arg it's hello world -n\n"
    assert _in_tree(sif_tree, "/.singularity.d/actions/run", "$GREETING", "-n",
                    env={"SINGULARITY_NO_EVAL": "1"}) == "ep arg it's $GREETING -n\n"
    assert _in_tree(sif_tree, "/singularity", "x") == "ep arg it's x\n"
    out = _in_tree(sif_tree, "/.singularity.d/actions/exec", "/bin/sh", "-c",
                   'printf "%s|%s|%s|" "$GREETING" "$QUOTED" "${EMPTY-unset}"; echo "$PATH"')
    assert out == ("hello world|it's \"quoted\" $x \\ back||"
                   "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n")


def test_via_apptainer_calls_apptainer_build_and_writes_atomically(tmp_path, monkeypatch):
    """A stub on PATH stands in for Apptainer (the real one runs in test_apptainer_differential.py): it
    records its arguments and writes the file, to show imagekit's documented call (`apptainer build
    [--mksquashfs-args ...] OUT docker-daemon://IMAGE`) and that a failing apptainer leaves nothing
    behind."""
    import os
    import stat

    from imagekit.util.errors import ImagekitError
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
    sif._via_apptainer("site/img:1", out, "gzip-6")      # the default: its level passed through
    assert log.read_text().splitlines()[1:3] == ["--mksquashfs-args", "-comp gzip -Xcompression-level 6"]
    assert argv[-1] == "docker-daemon://site/img:1" and argv[-2].endswith(".part")
    assert out.read_text() == "SIF\n" and result.tool == "apptainer"
    monkeypatch.setenv("FAIL", "1")
    with pytest.raises(ImagekitError, match="FATAL: boom"):
        sif._via_apptainer("site/img:1", tmp_path / "y.sif", "gzip")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["argv", "bin", "x.sif"]


def test_build_labels_have_apptainers_shape_and_win_over_the_images():
    """Apptainer 1.4's addBuildLabels: the keys, and build-date as Go prints it. The reference
    date is the label of a SIF Apptainer's own e2e test data holds ("Monday_2_August_2021_14:9:36_CDT",
    a build at 1627931376); imagekit writes the same instant in UTC."""
    from imagekit.export import singularity_d

    labels = singularity_d.labels({"Labels": {"org.label-schema.schema-version": "9", "a&b": "<x>\n"}},
                                  "site/img:1", "arm64", 1627931376)
    assert labels == {"a&b": "<x>\n", "org.label-schema.build-arch": "arm64",
                      "org.label-schema.build-date": "Monday_2_August_2021_19:9:36_UTC",
                      "org.label-schema.schema-version": "1.0",
                      "org.label-schema.usage.singularity.deffile.bootstrap": "docker-daemon",
                      "org.label-schema.usage.singularity.deffile.from": "site/img:1"}
    text = singularity_d.labels_json({"Labels": {"a&b": "<x>\n"}}, "site/img:1", "arm64", 0)
    # Go's encoding/json escapes <, > and & (HTML-safe); the text still parses back to the labels.
    assert '"a\\u0026b": "\\u003cx\\u003e\\n"' in text and json.loads(text)["a&b"] == "<x>\n"
    assert "Thursday_1_January_1970_0:0:0_UTC" in text


def test_inspect_metadata_leaves_out_what_is_empty():
    """pkg/inspect's fields are `omitempty`: no apps, test or helpfile for an image from Docker."""
    from imagekit.export import singularity_d

    layout = singularity_d.files({"Cmd": ["sh"]}, "site/img:1")
    metadata = json.loads(singularity_d.inspect_metadata(layout))
    assert metadata["type"] == "container"
    attributes = metadata["data"]["attributes"]
    assert list(attributes) == ["environment", "labels", "runscript", "deffile", "startscript"]
    assert attributes["deffile"] == "bootstrap: docker-daemon\nfrom: site/img:1"
    assert attributes["startscript"] == "#!/bin/sh"
    assert list(attributes["environment"]) == ["/.singularity.d/env/10-docker2singularity.sh",
                                               "/.singularity.d/env/90-environment.sh"]
