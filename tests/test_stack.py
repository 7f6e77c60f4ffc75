"""The Stack model: loading, `extends`, `matrix`, tags, stack checks and lookup by name."""

from __future__ import annotations

import json
import os

import pytest

from imagekit import checks, sources
from imagekit import stack as stack_mod
from imagekit.util.errors import StackError
from helpers.stack_helpers import CUDA, DEBIAN, expect_error, line_of, write

MPI = DEBIAN + """\
components:
  python:  {packages: [mpi4py]}
  openmpi: {source: distro, ucx: false}
  sshd:    {}
"""


# -- plain stacks ---------------------------------------------------------

def test_plain_stack_resolves(tmp_path):
    path = write(tmp_path, MPI)
    stacks = stack_mod.load_all(path)
    assert len(stacks) == 1
    s = stacks[0]
    assert (s.name, s.stack_name, s.variant, s.file) == ("t", "t", {}, str(path))
    assert (s.base.image, s.base.runtime, s.base.distro, s.base.arch) == (
        "imagekit/debian:bookworm", "imagekit/debian:bookworm", "debian12", "x86_64")
    assert s.base.hpccm_distro == "ubuntu22" and s.base.family == "deb"
    assert s.image == "imagekit/t:latest"


def test_components_are_ordered_by_layer_not_by_file_order(tmp_path):
    s = stack_mod.load(write(tmp_path, MPI))
    assert list(s.components) == ["sshd", "openmpi", "python"]


@pytest.mark.parametrize("value", ["{}", "", "true"])
def test_component_with_defaults(tmp_path, value):
    s = stack_mod.load(write(tmp_path, DEBIAN + f"components:\n  sshd: {value}\n"))
    assert s.get("sshd").version == "9.2" and s.get("sshd").source == "distro"


def test_distro_versions_follow_the_distro(tmp_path):
    s = stack_mod.load(write(tmp_path, DEBIAN.replace("debian12", "ubuntu24") + "components:\n  pmix: {source: distro}\n"))
    assert s.get("pmix").version == "5.0.1"


def test_describe_is_plain_data(tmp_path):
    import json

    info = stack_mod.load(write(tmp_path, MPI)).describe()
    assert json.loads(json.dumps(info)) == info
    assert [c["name"] for c in info["components"]] == ["sshd", "openmpi", "python"]
    assert info["components"][1] == {"name": "openmpi", "version": "4.1.4", "source": "distro", "ucx": False,
                                     "pmix": False, "cuda": False, "slurm": True, "pmi2": False}


@pytest.mark.parametrize("text, line, key, fragment", [
    ("description: d\n", 1, None, "missing required key 'name'"),
    ("name: t\n", 1, None, "missing required key 'base'"),
    ("name: t\nbase:\n  image: x\n", 3, "base", "missing required key 'distro'"),
    ("name: t\nbase:\n  distro: debian12\n", 3, "base", "missing required key 'image'"),
    ("name: t\nbase:\n  image: x\n  distro: debian14\n", 4, "base.distro", "invalid value 'debian14'"),
    ("name: t\nbase:\n  image: x\n  distro: debian12\n  arch: arm64\n", 5, "base.arch", "invalid value 'arm64'"),
    ("name: t\nbase:\n  image: x\n  distro: debian12\n  imgae: y\n", 5, "base.imgae", "did you mean 'image'?"),
    ("name: t\nbase:\n  image: x\n  distro: debian12\ncomponent: {}\n", 5, "component", "did you mean 'components'?"),
    ("name: t\nbase: x\n", 2, "base", "expected a mapping"),
    ("name: t\nbase:\n  image: x\n  distro: debian12\ncomponents: []\n", 5, "components", "expected a mapping"),
    ("name: t\nbase:\n  image: x\n  distro: debian12\ncomponents:\n  opnempi: {}\n", 6, "components.opnempi",
     "did you mean 'openmpi'?"),
    ("name: t\nbase:\n  image: x\n  distro: debian12\ncomponents:\n  sshd: 1\n", 6, "components.sshd",
     "expected a mapping of options"),
])
def test_bad_top_level_input(tmp_path, text, line, key, fragment):
    path = write(tmp_path, text)
    # Missing top-level keys are located at the file's first line; everything else at its own line.
    expect_error(lambda: stack_mod.load_all(path), path, line, key, fragment,
                 fix="expected a mapping of options" not in fragment)


def test_a_stack_file_must_be_a_mapping(tmp_path):
    path = write(tmp_path, "- a\n- b\n")
    expect_error(lambda: stack_mod.load_all(path), path, 1, None, "a stack file is a mapping", fix=False)


# -- extends --------------------------------------------------------------

PARENT = """\
description: parent
base:
  image: imagekit/debian:bookworm
  distro: debian12
components:
  sshd:    {}
  python:  {packages: [mpi4py, numpy]}
  openmpi: {source: distro, ucx: false, slurm: true}
tags: ["parent:{name}"]
"""


def test_extends_deep_merges_and_child_wins(tmp_path):
    write(tmp_path, PARENT, "base/parent.yaml")
    child = write(tmp_path, """\
        name: child
        extends: base/parent
        base:
          arch: aarch64
        components:
          openmpi: {slurm: false, pmix: true}
          pmix:    {source: distro}
          python:  {packages: [scipy]}
          sshd:    false
        tags: ["child:{name}"]
        """)
    s = stack_mod.load(child)
    assert s.description == "parent"
    # An `imagekit base` image has one local tag per arch (`imagekit base debian:bookworm --arch arm64`).
    assert (s.base.image, s.base.distro, s.base.arch) == ("imagekit/debian:bookworm-arm64", "debian12", "aarch64")
    mpi = s.get("openmpi")
    assert (mpi.source, mpi.enabled("ucx"), mpi.enabled("slurm"), mpi.enabled("pmix")) == (
        "distro", False, False, True)
    assert s.get("python").opts["packages"] == ["mpi4py", "numpy", "scipy"], "package lists append"
    assert s.tags == ["child:child-arm64"], "other lists (tags) are replaced (an aarch64 tag carries -arm64)"
    assert not s.has("sshd"), "`sshd: false` drops the inherited component"
    assert list(s.components) == ["pmix", "openmpi", "python"]


@pytest.mark.parametrize("ref", ["parent", "parent.yaml", "./parent.yaml"])
def test_extends_paths_relative_to_the_child(tmp_path, ref):
    write(tmp_path, PARENT, "parent.yaml")
    child = write(tmp_path, f"name: c\nextends: {ref}\n", "child.yaml")
    assert stack_mod.load(child).get("openmpi").enabled("slurm")


def test_extends_falls_back_to_the_stacks_dir(tmp_path, monkeypatch):
    shipped = tmp_path / "shipped"
    write(shipped, PARENT, "base/p.yaml")
    monkeypatch.setenv("IMAGEKIT_STACKS", str(shipped))
    child = write(tmp_path / "elsewhere", "name: c\nextends: base/p\n")
    assert stack_mod.load(child).has("openmpi")


def test_errors_in_an_inherited_part_name_the_parent_file(tmp_path):
    parent = write(tmp_path, PARENT.replace("slurm: true", "slurn: true"), "parent.yaml")
    child = write(tmp_path, "name: c\nextends: parent\n", "child.yaml")
    expect_error(lambda: stack_mod.load(child), parent, line_of(parent, "slurn"),
                 "components.openmpi.slurn", "did you mean 'slurm'?")


def test_errors_in_an_override_name_the_child_file(tmp_path):
    write(tmp_path, PARENT, "parent.yaml")
    child = write(tmp_path, "name: c\nextends: parent\ncomponents:\n  openmpi: {cuda: true}\n", "child.yaml")
    expect_error(lambda: stack_mod.load(child), child, 4, "components.openmpi.cuda", "not CUDA-aware")


def test_missing_parent_errors_at_the_extends_line(tmp_path):
    child = write(tmp_path, "name: c\n\nextends: base/nothere\n")
    expect_error(lambda: stack_mod.load(child), child, 3, "extends", "parent stack 'base/nothere' not found",
                 "relative to")


def test_extends_must_be_a_string(tmp_path):
    child = write(tmp_path, "name: c\nextends: [a]\n")
    expect_error(lambda: stack_mod.load(child), child, 2, "extends", "expected a path", fix=False)


def test_self_extends_is_a_cycle(tmp_path):
    path = write(tmp_path, "name: c\nextends: stack\n")
    expect_error(lambda: stack_mod.load(path), path, 2, "extends", "cycle", fix=False)


def test_longer_cycle(tmp_path):
    write(tmp_path, "extends: b\n", "a.yaml")
    b = write(tmp_path, "extends: c\n", "b.yaml")
    write(tmp_path, "name: x\nextends: a\n", "c.yaml")
    with pytest.raises(StackError) as info:
        stack_mod.load(tmp_path / "a.yaml")
    assert "`extends` cycle" in str(info.value)
    assert info.value.key == "extends" and info.value.line is not None
    assert info.value.file in {str(tmp_path / n) for n in ("a.yaml", "b.yaml", "c.yaml")}
    assert b.exists()


def test_diamond_is_not_a_cycle(tmp_path):
    # Two files may extend the same parent; only a path back to an ancestor is a cycle.
    write(tmp_path, PARENT, "root.yaml")
    write(tmp_path, "extends: root\n", "mid.yaml")
    leaf = write(tmp_path, "name: leaf\nextends: mid\n", "leaf.yaml")
    assert stack_mod.load(leaf).name == "leaf"


# -- matrix ---------------------------------------------------------------

MATRIX = CUDA + """\
components:
  cuda: {}
matrix:
  cuda:
    cu124: {}
    cu126:
      base:
        image: nvidia/cuda:12.6.3-devel-ubuntu22.04
        runtime: nvidia/cuda:12.6.3-runtime-ubuntu22.04
  arch:
    x86_64:
    sbsa:
      base: {arch: aarch64}
      tags: ["arm/{name}"]
tags: ["reg/{stack}:{cuda}-{arch}", "{name}"]
"""


def test_matrix_variant_names_follow_axis_order(tmp_path):
    stacks = stack_mod.load_all(write(tmp_path, MATRIX))
    assert [s.name for s in stacks] == ["g-cu124-x86_64", "g-cu124-sbsa", "g-cu126-x86_64", "g-cu126-sbsa"]
    assert [s.variant for s in stacks][3] == {"cuda": "cu126", "arch": "sbsa"}
    assert {s.stack_name for s in stacks} == {"g"}


def test_matrix_overlays_deep_merge(tmp_path):
    by_name = {s.name: s for s in stack_mod.load_all(write(tmp_path, MATRIX))}
    s = by_name["g-cu126-sbsa"]
    assert (s.base.image, s.base.runtime, s.base.distro, s.base.arch) == (
        "nvidia/cuda:12.6.3-devel-ubuntu22.04", "nvidia/cuda:12.6.3-runtime-ubuntu22.04", "ubuntu22", "aarch64")
    assert s.get("cuda").version == "12.6.3", "cuda reads the overlaid base image"
    assert by_name["g-cu124-x86_64"].get("cuda").version == "12.4.1"
    assert by_name["g-cu124-sbsa"].base.image.startswith("nvidia/cuda:12.4.1")


def test_matrix_tags_substitute(tmp_path):
    by_name = {s.name: s for s in stack_mod.load_all(write(tmp_path, MATRIX))}
    assert by_name["g-cu124-x86_64"].tags == ["reg/g:cu124-x86_64", "g-cu124-x86_64"]
    assert by_name["g-cu126-sbsa"].tags == ["arm/g-cu126-sbsa"], "an overlay's list replaces the list"


def test_matrix_values_need_not_be_strings(tmp_path):
    text = DEBIAN + "matrix:\n  py:\n    311: {}\n    true: {}\ntags: ['x:{py}']\n"
    stacks = stack_mod.load_all(write(tmp_path, text))
    assert [s.name for s in stacks] == ["t-311", "t-True"]
    assert stacks[0].tags == ["x:311"]


def test_bad_tag_placeholder_errors_at_the_tag_line(tmp_path):
    path = write(tmp_path, MATRIX.replace("{arch}\"", "{flavor}\""))
    expect_error(lambda: stack_mod.load_all(path), path, line_of(path, "{flavor}"), "tags",
                 "unknown placeholder {flavor}", "{cuda}", "{arch}")


@pytest.mark.parametrize("tag, fragment", [
    ("{name.upper}", "unknown placeholder {name.upper}"),
    ("{name[0]}", "unknown placeholder {name[0]}"),
    ("{0}", "unknown placeholder {0}"),
    ("{}", "unknown placeholder {}"),
    ("{name:>9}", "unknown placeholder {name:>9}"),
    ("{name", "expected '}'"),
])
def test_only_plain_placeholders(tmp_path, tag, fragment):
    path = write(tmp_path, DEBIAN + f"tags:\n  - ok\n  - '{tag}'\n")
    expect_error(lambda: stack_mod.load_all(path), path, 7, "tags", fragment)


def test_escaped_braces_stay_literal(tmp_path):
    s = stack_mod.load(write(tmp_path, DEBIAN + "tags: ['{{x}}-{name}']\n"))
    assert s.tags == ["{x}-t"]


@pytest.mark.parametrize("matrix, line, key, fragment", [
    ("matrix:\n  cuda: []\n", 6, "matrix.cuda", "a matrix axis maps value keys to overlays"),
    ("matrix:\n  cuda: {}\n", 6, "matrix.cuda", "a matrix axis maps value keys to overlays"),
    ("matrix:\n  cuda:\n    a: 3\n", 7, "matrix.cuda.a", "expected a mapping"),
    ("matrix:\n  cuda:\n    a: {name: x}\n", 7, "matrix.cuda.a.name", "unknown key"),
    ("matrix:\n  cuda:\n    a: {componets: {}}\n", 7, "matrix.cuda.a.componets", "did you mean 'components'?"),
    ("matrix:\n  cuda:\n    a: {base: {arch: arm}}\n", 7, "base.arch", "invalid value 'arm'"),
])
def test_bad_matrix(tmp_path, matrix, line, key, fragment):
    path = write(tmp_path, DEBIAN + matrix)
    expect_error(lambda: stack_mod.load_all(path), path, line, key, fragment,
                 fix="expected a mapping" not in fragment)


# -- lookup by name / variant ---------------------------------------------

@pytest.fixture
def shipped_dir(tmp_path, monkeypatch):
    d = tmp_path / "stacks"
    write(d, MATRIX, "gpu.yaml")
    write(d, MPI, "mpi.yaml")
    monkeypatch.setenv("IMAGEKIT_STACKS", str(d))
    return d


def test_shipped_lists_yaml_files_sorted(shipped_dir):
    assert [p.name for p in stack_mod.shipped()] == ["gpu.yaml", "mpi.yaml"]


def test_find_by_name_path_and_variant(shipped_dir):
    assert stack_mod.find("mpi") == (shipped_dir / "mpi.yaml", None)
    assert stack_mod.find(str(shipped_dir / "gpu.yaml")) == (shipped_dir / "gpu.yaml", None)
    assert stack_mod.find("g-cu126-sbsa") == (shipped_dir / "gpu.yaml", "g-cu126-sbsa")


def test_load_variant_by_full_name_or_value_keys(shipped_dir):
    assert stack_mod.load("gpu", "g-cu126-x86_64").name == "g-cu126-x86_64"
    assert stack_mod.load("gpu", "cu126-x86_64").name == "g-cu126-x86_64"
    assert stack_mod.load("g-cu124-sbsa").base.arch == "aarch64"


def test_matrix_stack_needs_a_variant(shipped_dir):
    with pytest.raises(StackError) as info:
        stack_mod.load("gpu")
    assert "4 matrix variants; choose one" in str(info.value)
    assert "g-cu124-x86_64, g-cu124-sbsa, g-cu126-x86_64, g-cu126-sbsa" in info.value.hint


def test_unknown_variant(shipped_dir):
    with pytest.raises(StackError, match="no variant 'cu999'") as info:
        stack_mod.load("gpu", "cu999")
    assert "g-cu124-x86_64" in info.value.hint


def test_unknown_stack_did_you_mean(shipped_dir):
    with pytest.raises(StackError, match="unknown stack 'mpu'") as info:
        stack_mod.load("mpu")
    assert "did you mean 'mpi'?" in info.value.hint


def test_missing_stack_file(shipped_dir, tmp_path):
    with pytest.raises(StackError, match="stack file not found") as info:
        stack_mod.load(str(tmp_path / "nope.yaml"))
    assert "gpu, mpi" in info.value.hint


# -- stack checks ---------------------------------------------------------

def test_stack_checks(tmp_path):
    s = stack_mod.load(write(tmp_path, DEBIAN + """\
        checks:
          - {name: ring, run: "mpirun -np 2 true", expect: ok}
          - {name: lib, library: libmpi.so.40, needs: fabric}
        """.replace("        ", "")))
    assert [(c.id, c.kind, c.expect, c.needs) for c in s.checks] == [
        ("stack.ring", "run", "ok", None), ("stack.lib", "library", None, "fabric")]
    assert s.checks[0].describe == "run: mpirun -np 2 true"


@pytest.mark.parametrize("item, fragment", [
    ("{name: x}", "exactly one of run, file, absent, library, python_import (got none)"),
    ("{name: x, run: a, file: b}", "(got run, file)"),
])
def test_bad_stack_checks(tmp_path, item, fragment):
    path = write(tmp_path, DEBIAN + f"checks:\n  - {{name: ok, file: /x}}\n  - {item}\n")
    expect_error(lambda: stack_mod.load(path), path, 7, "checks[2]", fragment, fix=False)


def test_check_needs_choice(tmp_path):
    path = write(tmp_path, DEBIAN + "checks:\n  - {name: x, file: /x, needs: gpus}\n")
    expect_error(lambda: stack_mod.load(path), path, 6, "checks[1].needs", "did you mean 'gpu'?")


def test_stack_checks_are_the_label_kinds():
    """A stack file's check is read by the same kinds as an image's label, so it round-trips."""
    s = stack_mod.load("debian-mpi")
    assert [type(c).__name__ for c in s.checks] == ["Run"]
    assert checks.from_dict(s.checks[0].as_dict()) == s.checks[0]


def test_expect_on_a_check_that_prints_nothing_is_refused_at_its_line(tmp_path):
    path = write(tmp_path, DEBIAN + "checks:\n  - name: x\n    file: /x\n    expect: ok\n")
    expect_error(lambda: stack_mod.load(path), path, 8, "checks[1].expect", "expect applies to run checks only, "
                 "not to file")


# -- shipped stacks -------------------------------------------------------

def test_shipped_stacks_all_load():
    names = {p.stem: [s.name for s in stack_mod.load_all(p)] for p in stack_mod.shipped()}
    assert names == {
        "debian-cuda": ["debian-cuda"],
        "debian-cuda12": ["debian-cuda12"],
        "debian-grace": ["debian-grace"],
        "debian-mpi": ["debian-mpi"],
        "debian-pytorch": ["debian-pytorch"],
        "grace-pytorch": ["grace-pytorch"],
        "nccl-tests": ["nccl-tests-cu129-x86_64", "nccl-tests-cu129-sbsa"],
        "nccl-tests-volta": ["nccl-tests-volta"],
        "pytorch": ["pytorch"],
    }


def test_shipped_debian_cuda_is_offline_and_pins_every_upstream_file():
    s = stack_mod.load("debian-cuda")
    assert s.base.image.startswith("imagekit/") and s.base.arch == "x86_64"
    assert (s.get("cuda").source, s.get("cuda").version, s.get("nccl").source) == ("pypi", "13.2.2", "pypi")
    artifacts = sources.artifacts(s)
    assert {a.component for a in artifacts} == {"gdrcopy", "ucx", "pmix", "openmpi", "nccl-tests"}
    assert all(a.sha256 and len(a.sha256) == 64 for a in artifacts)


def test_shipped_debian_cuda12_is_offline_cuda12_and_pins_every_upstream_file():
    s = stack_mod.load("debian-cuda12")
    assert s.base.image == "imagekit/debian:trixie" and (s.base.distro, s.base.arch) == ("debian13", "x86_64")
    cuda = s.get("cuda")
    assert (cuda.source, cuda.version, cuda.min_driver) == ("distro", "12.4.1", "525.60.13")
    assert (s.get("nccl").source, s.get("nccl").wheel) == ("pypi", "nvidia-nccl-cu12==2.32.3")
    assert (s.get("openmpi").version, s.get("pmix").version) == ("5.0.10", "5.0.10")
    assert s.get("nccl-tests").archs == ["80", "90"]
    artifacts = sources.artifacts(s)
    assert {a.component for a in artifacts} == {"gdrcopy", "ucx", "pmix", "openmpi", "nccl-tests"}
    assert all(a.sha256 and len(a.sha256) == 64 for a in artifacts)


@pytest.mark.parametrize("name", ["debian-cuda12", "debian-cuda"])
def test_a_shipped_cuda_stack_states_its_minimum_driver(name):
    s = stack_mod.load(name)
    assert f"R{s.get('cuda').min_driver.split('.')[0]}+" in s.description


def test_shipped_nccl_tests_have_hopper_and_blackwell_code():
    for s in stack_mod.load_all(stack_mod.find("nccl-tests")[0]):
        tests = s.get("nccl-tests")
        assert tests.version == "2.19.6" and {"90", "100"} <= set(tests.archs), s.name
        assert s.get("nccl").version >= "2.25.1" and s.base.runtime.endswith(("-base-ubuntu22.04")), s.name


def test_shipped_pytorch_has_one_nccl_and_no_horovod():
    # torch loads its own nvidia-nccl-cu13 wheel; Horovod 0.28.1 does not compile against PyTorch >= 2.1.
    s = stack_mod.load("pytorch")
    assert not s.has("horovod") and not s.has("nccl")
    assert s.get("pytorch").labels() == {"cuda": "cu132", "index": "pypi", "nccl": "2.30.7"}
    assert (s.get("pytorch").version, s.get("cuda").major_minor) == ("2.15.0", "13.2")
    assert (s.get("openmpi").version, s.get("pmix").version, s.get("ucx").version) == ("5.0.10", "5.0.10", "1.20.1")
    # torch's wheels bring CUDA's libraries: the runtime starts from the base image, not -runtime.
    assert s.base.runtime == "nvidia/cuda:13.2.1-base-ubuntu24.04"


def test_shipped_framework_stacks_track_the_same_torch_cuda_and_nccl():
    """The offline framework image CI builds (debian-pytorch) and the production pytorch stack carry
    the same torch, CUDA build and NCCL; debian-pytorch's NCCL is debian-cuda's, the one torch pins."""
    offline, production, cuda = stack_mod.load("debian-pytorch"), stack_mod.load("pytorch"), stack_mod.load("debian-cuda")
    assert offline.get("pytorch").labels() == production.get("pytorch").labels()
    assert offline.get("nccl").version == cuda.get("nccl").version == offline.get("pytorch").labels()["nccl"]
    assert offline.get("cuda").version == cuda.get("cuda").version == "13.2.2"
    # Every debian-cuda component comes first, unchanged: its layers are reused.
    assert list(offline.components)[:len(cuda.components)] == list(cuda.components)
    assert [c.opts for c in offline.components.values()][:len(cuda.components)] == \
        [c.opts for c in cuda.components.values()]


# -- site stack directories -----------------------------------------------

def test_site_directories_come_first_and_extends_resolves_across_them(tmp_path, monkeypatch):
    site_a, site_b = tmp_path / "a", tmp_path / "b"
    write(site_b, PARENT, "site-base.yaml")
    write(site_a, "name: site-child\nextends: site-base\n", "site-child.yaml")
    write(site_a, MPI, "debian-mpi.yaml")  # hides the shipped one
    monkeypatch.setenv(stack_mod.PATH_ENV, os.pathsep.join([str(site_a), str(site_b)]))
    found = {p.stem: d for p, d in stack_mod.available()}
    assert found["site-child"] == site_a and found["site-base"] == site_b
    assert found["debian-mpi"] == site_a and found["nccl-tests"] == stack_mod.SHIPPED_DIR
    assert stack_mod.load("site-child").get("openmpi").enabled("slurm")  # parent from the other directory
    assert stack_mod.find("debian-mpi")[0] == site_a / "debian-mpi.yaml"


def test_stacks_dir_flag_lists_where_each_stack_came_from(tmp_path):
    from click.testing import CliRunner

    from imagekit.cli import main

    site = tmp_path / "site"
    write(site, "name: site-mpi\nextends: debian-mpi\n", "site-mpi.yaml")
    result = CliRunner().invoke(main, ["--stacks-dir", str(site), "stacks", "--json"])
    rows = {r["stack"]: r["from"] for r in json.loads(result.stdout)}
    assert rows["site-mpi"] == str(site) and rows["debian-mpi"] == "shipped"


def test_a_stack_file_path_always_works(tmp_path, monkeypatch):
    monkeypatch.setenv(stack_mod.PATH_ENV, str(tmp_path / "nowhere"))
    path = write(tmp_path / "x", MPI, "anything.yaml")
    assert stack_mod.load(path).file == str(path)
