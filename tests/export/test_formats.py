"""The export axis: one row per format (export/formats.py), and every stage reads a format from its row.

The proof, as for components: a format added alone is one row plus one converter. The test below adds
a made-up ``tar`` format (a converter of a dozen lines that writes the image's flattened root
filesystem as a tar) with no other file edited, and runs the real export path: the request, the store
(its entry and key version) and the registry artifact's manifest all take it from the row.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from imagekit import export
from imagekit.util.errors import UsageError
from imagekit.export import ExportRequest, artifacts, export_image, formats, sif
from imagekit.export.image_source import Source, open_source
from imagekit.export.output import ExportResult, atomic_output, prepare_target, sha256_file
from imagekit.export.store import Store, find
from imagekit.registry import client as reg
from imagekit.registry.reference import parse
from helpers.layered import docker_archive

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "imagekit"


def test_every_stage_reads_the_one_table(tmp_path):
    assert formats.names() == ("enroot", "sif") == formats.with_artifacts()
    for name, fmt in formats.FORMATS.items():
        assert (artifacts.kind(name).suffix, artifacts.kind(name).mode) == (fmt.suffix, fmt.mode)
        assert artifacts.kind(name).artifact_type == fmt.artifact.artifact_type
        assert ExportRequest(name).preset == fmt.default_preset in fmt.presets
        assert Store.open(tmp_path).key("sha256:" + "a" * 64, name, fmt.default_preset).version == fmt.store_version
    assert {n: f.suffix for n, f in formats.FORMATS.items()} == {"enroot": ".sqsh", "sif": ".sif"}
    assert sif.FILE_MODE == formats.get("sif").mode == 0o755
    assert formats.vias() == ("native", "apptainer")


def test_an_unknown_format_names_the_valid_ones():
    with pytest.raises(UsageError, match="unknown export format 'enrot'") as info:
        formats.get("enrot")
    assert info.value.hint == "use one of: enroot, sif"


def test_every_converter_has_the_one_signature():
    """``(source, target, request, *, progress)``: the export path calls each the same way."""
    for fmt in formats.FORMATS.values():
        params = inspect.signature(fmt.load_converter()).parameters
        assert list(params) == ["source", "target", "request", "progress"], fmt.name
        assert params["progress"].kind is inspect.Parameter.KEYWORD_ONLY


# --- the proof: a format added alone ---------------------------------------------------------------

def tar_convert(source: "str | Source", target: Path, request, *, progress=None) -> ExportResult:
    """The whole of a new format's converter: the image's flattened root filesystem, as a tar."""
    source = source if isinstance(source, Source) else open_source(source)
    target = prepare_target(target, request.force)
    with source.rootfs() as root, atomic_output(target) as tmp:
        with open(tmp, "wb") as out:
            shutil.copyfileobj(root.file, out)
        root.finish()
    return ExportResult(path=str(target), format=request.format, image=source.text, bytes=target.stat().st_size,
                        sha256=sha256_file(target), seconds=0.0, tool="tar", compression=request.preset)


TAR = formats.Format("tar", ".tar", 0o644, tar_convert, "plain", ("plain",), store_version=7,
                     artifact=formats.ArtifactKind("application/vnd.example.tar.v1", reg.OCI_EMPTY,
                                                   "application/vnd.example.tar.layer.v1.tar"))


@pytest.fixture
def tar_format(monkeypatch, tmp_path):
    """The made-up format in the table, as a new row would be; the records of `imagekit report` kept
    in the test's own state directory."""
    monkeypatch.setitem(formats.FORMATS, "tar", TAR)
    monkeypatch.setenv("IMAGEKIT_STATE", str(tmp_path / "state"))
    return TAR


def test_a_format_added_alone_is_one_row_and_one_converter(tar_format, tmp_path, monkeypatch):
    archive = docker_archive(tmp_path / "image.tar", [[("d", "etc"), ("f", "etc/hello", b"hello\n")]],
                             "imagekit-test/tar-format:1")
    image = f"docker-archive:{archive}"
    request = ExportRequest("tar")
    assert request.preset == "plain" and "tar" in formats.names() and "tar" in formats.with_artifacts()
    with pytest.raises(UsageError, match="unknown compression preset 'zstd'") as info:
        ExportRequest("tar", preset="zstd")
    assert info.value.hint == "use one of: plain"
    with pytest.raises(UsageError, match="--via apptainer applies to --to sif only"):
        ExportRequest("tar", via="apptainer")
    monkeypatch.chdir(tmp_path)
    assert export.default_output(image, "tar").name == f"{open_source(image).stem}.tar"

    # The real export path, through the store: the file, the entry and its key version.
    store = tmp_path / "store"
    result = export_image(image, request, tmp_path / "out.tar", store=store)
    with tarfile.open(result.path) as tar:
        assert tar.extractfile("etc/hello").read() == b"hello\n"
    assert (result.format, result.compression, result.store_hit) == ("tar", "plain", False)
    entry = Path(result.store_entry)
    assert entry.name == "image.tar" and entry.parent.parent.name == "tar"
    [found] = find(Store.open(store), open_source(image).image_id(), "tar")
    assert (found.path, found.version, found.preset) == (entry, 7, "plain")
    again = export_image(image, request, tmp_path / "again.tar", store=store)
    assert again.store_hit and again.sha256 == result.sha256

    # A newer converter (its row's store version bumped) is not served the older entry.
    monkeypatch.setitem(formats.FORMATS, "tar", dataclasses.replace(TAR, store_version=8))
    newer = export_image(image, request, tmp_path / "newer.tar", store=store)
    assert not newer.store_hit and Path(newer.store_entry) != entry

    # The registry artifact's manifest, from the row's kind.
    file = artifacts.ExportedFile("tar", Path(result.path), "plain", sha256=f"sha256:{result.sha256}",
                                  size=result.bytes)
    subject = reg.Resolved(parse("127.0.0.1:5000/t/tar:1"), "sha256:" + "b" * 64, reg.OCI_MANIFEST, 100,
                           open_source(image).image_id())
    doc = json.loads(artifacts.artifact_manifest(file, subject))
    assert doc["artifactType"] == "application/vnd.example.tar.v1"
    assert doc["layers"][0]["mediaType"] == "application/vnd.example.tar.layer.v1.tar"
    assert doc["layers"][0]["annotations"][artifacts.TITLE] == "image.tar"
    entry_doc = artifacts.referrer_descriptor("sha256:" + "c" * 64, artifacts.artifact_manifest(file, subject))
    assert artifacts.matching([entry_doc], "tar") == [entry_doc] and artifacts.matching([entry_doc], "enroot") == []


# --- no module asks for a format by name -------------------------------------------------------------

NAMES = {"fmt", "format", "to"}


def name_tests(source: str, known: tuple[str, ...]) -> list[int]:
    """Lines where ``fmt``/``format`` (a name or an attribute) is compared with a format's name, or a
    loop runs over a literal tuple of format names: what a row should answer instead."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = any((isinstance(s, ast.Name) and s.id in NAMES) or (isinstance(s, ast.Attribute)
                                                                         and s.attr in NAMES) for s in sides)
            literal = [c for s in sides for c in ([s] if isinstance(s, ast.Constant) else getattr(s, "elts", []))
                       if isinstance(c, ast.Constant) and c.value in known]
            if named and literal:
                found.append(node.lineno)
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, (ast.Tuple, ast.List)):
            if sum(isinstance(e, ast.Constant) and e.value in known for e in node.iter.elts) >= 2:
                found.append(node.iter.lineno)
    return sorted(found)


def test_no_module_asks_for_a_format_by_name():
    """Export, the CLI and the flows at the package root read the rows: no ``fmt == "sif"``.
    The Pyxis importer and its helpers serve Enroot's format by nature and name it as data."""
    places = [*sorted((SRC / "export").rglob("*.py")), *sorted((SRC / "cli").glob("*.py")),
              *sorted(SRC.glob("*.py"))]
    hits = [f"{p.relative_to(ROOT)}:{line}" for p in places
            for line in name_tests(p.read_text(), formats.names())]
    assert hits == []


def test_the_name_scan_can_fail():
    broken = 'if fmt == "sif":\n    pass\nif request.format in ("enroot",):\n    pass\nfor f in ("enroot", "sif"):\n    pass\n'
    assert name_tests(broken, ("enroot", "sif")) == [1, 3, 5]
