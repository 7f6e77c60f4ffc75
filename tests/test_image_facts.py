"""The image-facts contract: labels written from a stack read back as one typed object,
from an engine image, an Enroot .sqsh and a .sif, for the current and the previous schema."""

from __future__ import annotations

import json
import subprocess

import pytest

from imagekit import image_facts
from imagekit.image_facts import reader, writer
from imagekit.checks import stack_checks
from imagekit.image_facts import LabelSchemaError
from helpers.stack_helpers import DEBIAN, load_text

MPI_STACK = DEBIAN + """\
components:
  sshd: {}
  ofed: {}
  ucx: {source: distro}
  pmix: {source: distro}
  openmpi: {source: distro, pmix: true}
  python: {packages: [mpi4py]}
"""


def _labels(tmp_path, text=MPI_STACK, target="runtime"):
    s = load_text(tmp_path, text)
    return s, {**writer.recipe_labels(s), **writer.build_labels(s, target, "ab" * 32)}


def test_labels_round_trip_as_typed_facts(tmp_path):
    s, labels = _labels(tmp_path)
    facts = image_facts.from_labels(labels, ref="img")
    assert facts.schema == image_facts.SCHEMA and facts.known
    assert facts.stack == s.name and facts.target == "runtime" and facts.recipe_sha256 == "ab" * 32
    assert list(facts.components) == list(s.components)
    for name, comp in s.components.items():
        assert facts.version(name) == comp.version and facts.components[name].source == comp.source
    assert {role: r.component for role, r in facts.roles.items()} == s.roles()
    assert facts.provider("mpi").name == "openmpi" and facts.role_version("mpi") == s.get("openmpi").version
    assert facts.provider("rdma").name == "ofed" and facts.has_role("sshd") and not facts.has_role("cuda")
    assert facts.fact("openmpi", "pmix") == "true"
    assert facts.benchmark.command[:3] == ["python3", "-m", "mpi4py.bench"]
    assert [c["id"] for c in facts.checks] == [c.id for c in stack_checks(s)]


def test_every_label_is_in_the_imagekit_namespace_or_oci(tmp_path):
    _s, labels = _labels(tmp_path)
    assert all(k.startswith((image_facts.PREFIX, "org.opencontainers.image.")) for k in labels)


def test_a_schema_1_image_still_reads_with_the_same_roles_and_benchmark(tmp_path):
    """Images built before roles existed carry no schema, role or benchmark labels."""
    _s, labels = _labels(tmp_path)
    current = image_facts.from_labels(labels)
    old = {k: v for k, v in labels.items()
           if not k.startswith((image_facts.SCHEMA_LABEL, image_facts.PREFIX + "role.", image_facts.BENCHMARK))}
    facts = image_facts.from_labels(old)
    assert facts.schema == 1
    assert facts.roles == current.roles and facts.benchmark == current.benchmark
    assert facts.checks == current.checks
    # Names that labels written by hand used then still fill their roles.
    hand = image_facts.from_labels({image_facts.COMPONENTS: "rdma-core,mvapich2",
                                    image_facts.component_label("mvapich2", "version"): "2.3.7"})
    assert hand.provider("rdma").name == "rdma-core" and hand.role_version("mpi") == "2.3.7"


def test_a_newer_schema_gets_a_clear_message():
    with pytest.raises(LabelSchemaError, match=r"built by a newer imagekit \(label schema 9\)") as info:
        image_facts.from_labels({image_facts.SCHEMA_LABEL: "9"}, ref="site/img:1")
    assert "site/img:1" in str(info.value) and "upgrade imagekit" in info.value.hint
    with pytest.raises(LabelSchemaError, match="is not a schema number"):
        image_facts.from_labels({image_facts.SCHEMA_LABEL: "two"})


@pytest.mark.parametrize("raw", ['{"command": "rm -rf /"}', '{"command": []}', "not json",
                                 '{"command": ["a"], "env": {"X": 1}}'])
def test_a_damaged_benchmark_label_is_refused(raw):
    with pytest.raises(LabelSchemaError, match="is not a benchmark"):
        image_facts.from_labels({image_facts.SCHEMA_LABEL: "2", image_facts.BENCHMARK: raw})


@pytest.mark.parametrize("raw", ["{", '{"id": "x"}', '["x"]'])
def test_a_damaged_checks_label_is_refused(raw):
    with pytest.raises(LabelSchemaError, match="label io.imagekit.checks is not"):
        image_facts.from_labels({image_facts.CHECKS: raw})


def test_roles_of_a_bundle_record_the_version_of_what_fills_them(tmp_path, monkeypatch):
    """A bundle (HPC-X 2.22 carries Open MPI 4.1.7) writes role.<role>.version; others do not."""
    s, _ = _labels(tmp_path)
    mpi = s.get("openmpi")
    monkeypatch.setattr(type(mpi), "role_versions", lambda self: {"mpi": "9.9.9"})
    labels = writer.recipe_labels(s)
    assert labels[image_facts.role_label("mpi", "version")] == "9.9.9"
    assert image_facts.role_label("pmix", "version") not in labels
    assert image_facts.from_labels(labels).role_version("mpi") == "9.9.9"


def test_missing_file_images_say_why():
    facts = reader.read("./nowhere.sqsh")
    assert facts.labels is None and "not on this host" in facts.reason


@pytest.mark.engine
def test_an_image_its_sqsh_and_its_sif_give_the_same_facts(tmp_path, base_image):
    """Read back after `imagekit export`: Enroot's /etc/rc comments and the SIF's OCI config."""
    from imagekit.engines import docker as engine
    from imagekit.export import ExportRequest, export_image

    _s, labels = _labels(tmp_path)
    tag = "imagekit-test/facts:latest"
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(f"FROM {base_image}\n")
    cmd = [engine.docker_cli(), "build", "-q", "-t", tag]
    cmd += [a for k, v in sorted(labels.items()) for a in ("--label", f"{k}={v}")]
    proc = subprocess.run(cmd + [str(tmp_path / "ctx")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    from_engine = reader.read(tag)
    assert from_engine.known and from_engine.provider("mpi").name == "openmpi"
    for fmt, name in (("enroot", "x.sqsh"), ("sif", "x.sif")):
        out = tmp_path / name
        export_image(tag, ExportRequest(fmt), out)
        from_file = reader.read(str(out))
        assert from_file.known, (fmt, from_file.reason)
        assert {**from_file.as_dict(), "ref": tag} == from_engine.as_dict(), fmt
        assert from_file.checks == from_engine.checks and from_file.benchmark == from_engine.benchmark
    assert json.loads(labels[image_facts.CHECKS]) == from_engine.checks


def test_env_entries_parse_as_enroot_and_docker_read_them():
    """Config.Env entries and /etc/environment lines: the first '=' splits, a later entry wins
    (Enroot's hook keeps the last line's value), lines without '=' are not variables."""
    lines = ["A=1", "B=x=y z", "", "# a comment=no", "junk", "A=2", "EMPTY="]
    assert image_facts.parse_env(lines) == {"A": "2", "B": "x=y z", "EMPTY": ""}


def test_recorded_env_travels_with_the_facts():
    facts = image_facts.from_labels({}, ref="img", env={"NVIDIA_VISIBLE_DEVICES": "all"})
    assert facts.env == {"NVIDIA_VISIBLE_DEVICES": "all"}
    unread = image_facts.from_labels(None, ref="img", reason="not here")
    assert unread.env is None and unread.reason == "not here"
    assert reader.read("./nowhere.sif").env is None    # not on this host: unknown, not empty


def test_a_squashfs_without_labels_still_gives_its_env(tmp_path):
    """`enroot import` of an image without labels: no /etc/rc comments, but /etc/environment counts."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "environment").write_text("PATH=/usr/bin\nNVIDIA_VISIBLE_DEVICES=all\n")
    out = tmp_path / "plain.sqsh"
    subprocess.run(["mksquashfs", str(root), str(out), "-quiet", "-no-progress"], check=True,
                   stdout=subprocess.DEVNULL)
    facts = reader.read(str(out))
    assert facts.labels is None and "records no labels" in facts.reason
    assert facts.env == {"PATH": "/usr/bin", "NVIDIA_VISIBLE_DEVICES": "all"}


@pytest.mark.engine
def test_the_env_reads_the_same_from_an_image_its_sqsh_and_its_sif(tmp_path, base_image):
    """Config.Env from the engine, Enroot's /etc/environment in the .sqsh, the OCI config in the .sif,
    each made by `imagekit export`; and an image without the variable reads as not setting it."""
    from helpers import gpu_image

    tag = gpu_image.build(base_image)
    from_engine = reader.read(tag)
    assert from_engine.env is not None and from_engine.env.items() >= gpu_image.ENV.items()
    assert from_engine.labels is not None and not from_engine.known     # unlabelled: env read all the same
    for fmt, name in (("enroot", "gpu.sqsh"), ("sif", "gpu.sif")):
        from_file = reader.read(str(gpu_image.export(tag, fmt, tmp_path / name)))
        assert from_file.env == from_engine.env, fmt
    plain = reader.read(base_image)
    assert plain.env is not None and "NVIDIA_VISIBLE_DEVICES" not in plain.env


def test_the_docs_document_every_label_written(tmp_path):
    """Sites read the labels themselves: every key the writer produces has a row in docs/check.md's table."""
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "check.md").read_text()
    table = doc.split("## Image labels", 1)[1].split("\n## ", 1)[0]
    patterns = []
    for row in re.findall(r"^\| (`io\.imagekit[^|]*)\|", table, re.M):
        names = re.findall(r"`([^`]+)`", row)
        full = [names[0]] + [names[0].rsplit(".", 1)[0] + n if n.startswith(".") else n for n in names[1:]]
        for name in full:
            patterns.append(re.escape(name).replace("NAME", "[^.]+").replace("ROLE", "[^.]+").replace("KEY", "[^.]+"))
    _s, labels = _labels(tmp_path)
    labels.update(writer.base_labels("debian", "bookworm", "http://mirror", ["main"]))
    for key in labels:
        if key.startswith(image_facts.PREFIX):
            assert any(re.fullmatch(p, key) for p in patterns), f"{key} is not documented in docs/check.md"
