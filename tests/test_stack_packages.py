"""The stack's own distro packages (``packages:``): per stage, per distro, located errors, recipe and labels."""

from __future__ import annotations

import textwrap

import pytest

from imagekit import image_facts, render
from imagekit import stack as stack_mod
from imagekit.image_facts import writer
from helpers.stack_helpers import DEBIAN, expect_error, line_of, write

PACKAGES = textwrap.dedent("""\
    packages:
      runtime:
        - htop
        - {debian12: libhdf5-103-1, debian13: libhdf5-310, ubuntu24: null}
      devel: [libhdf5-dev]
    components:
      python: {packages: [mpi4py]}
    """)


def test_names_resolve_per_distro_and_stage(tmp_path):
    s = stack_mod.load(write(tmp_path, DEBIAN + PACKAGES))
    assert s.package_names("runtime") == ["htop", "libhdf5-103-1"]
    assert s.package_names("devel") == ["htop", "libhdf5-103-1", "libhdf5-dev"], "devel builds against runtime's"
    s13 = stack_mod.load(write(tmp_path, DEBIAN.replace("debian12", "debian13") + PACKAGES))
    assert s13.package_names("runtime") == ["htop", "libhdf5-310"]
    s24 = stack_mod.load(write(tmp_path, DEBIAN.replace("debian12", "ubuntu24") + PACKAGES))
    assert s24.package_names("runtime") == ["htop"], "null: none on that distro"
    assert s.describe()["packages"] == {"runtime": ["htop", "libhdf5-103-1"],
                                        "devel": ["htop", "libhdf5-103-1", "libhdf5-dev"]}


def test_the_recipe_installs_them_after_the_built_layers_and_before_python_in_each_stage(tmp_path):
    """A site's package must not rebuild what the stack builds from source (Open MPI here): its layer
    comes after those, and before the Python environment, whose pip packages may build against it."""
    s = stack_mod.load(write(tmp_path, DEBIAN + PACKAGES + "  openmpi: {source: distro, ucx: false}\n"))
    text = render.render(s)
    devel, runtime = text.split("AS runtime")
    assert "--no-install-recommends htop libhdf5-103-1 libhdf5-dev" in devel
    assert "--no-install-recommends htop libhdf5-103-1\n" in runtime
    for stage in (devel, runtime):
        assert stage.index("openmpi-bin") < stage.index("distro packages (packages:)") < stage.index("python3-mpi4py")
    without = render.render(stack_mod.load(write(tmp_path, DEBIAN + "components:\n  openmpi: {source: distro, ucx: false}\n"
                                                               "  python: {packages: [mpi4py]}\n")))
    # Everything up to the packages' layer is the stack's recipe without them: the cache holds it.
    assert text[:text.index("# the stack's own")] == without[:text.index("# the stack's own")]


def test_labels_record_them_per_stage(tmp_path):
    s = stack_mod.load(write(tmp_path, DEBIAN + PACKAGES))
    labels = writer.recipe_labels(s)
    assert labels["io.imagekit.packages.runtime"] == "htop,libhdf5-103-1"
    assert labels["io.imagekit.packages.devel"] == "libhdf5-dev"
    facts = image_facts.from_labels(labels)
    assert facts.packages == {"runtime": ["htop", "libhdf5-103-1"], "devel": ["libhdf5-dev"]}
    plain = writer.recipe_labels(stack_mod.load(write(tmp_path, DEBIAN)))
    assert not any(k.startswith("io.imagekit.packages") for k in plain)


def test_a_stack_without_packages_renders_as_before(tmp_path):
    """No packages: key, no new step (the shipped stacks' recipes are unchanged: tests/golden)."""
    assert "packages:)" not in render.render(stack_mod.load(write(tmp_path, DEBIAN)))


@pytest.mark.parametrize("text, needle, key, fragments", [
    ("packages:\n  runtime: [Bad_Name]\n", "Bad_Name", "packages.runtime[1]", ["invalid package name", "lowercase"]),
    ("packages:\n  runtime: ['htop; rm -rf /']\n", "htop;", "packages.runtime[1]", ["invalid package name"]),
    ("packages:\n  runtime:\n    - {debian13: libfoo}\n", "debian13", "packages.runtime[1]",
     ["names no package for debian12", "debian12: NAME"]),
    ("packages:\n  runtime:\n    - {debain12: libfoo}\n", "debain12", "packages.runtime[1].debain12",
     ["unknown key", "did you mean 'debian12'"]),
    ("packages:\n  runtme: [htop]\n", "runtme", "packages.runtme", ["did you mean 'runtime'"]),
    ("packages:\n  runtime: htop\n", "runtime", "packages.runtime", ["expected a list"]),
    ("packages:\n  runtime: [[htop]]\n", "[[htop]]", "packages.runtime[1]", ["expected a package name"]),
])
def test_bad_packages_are_located(tmp_path, text, needle, key, fragments):
    path = write(tmp_path, DEBIAN + text)
    expect_error(lambda: stack_mod.load(path), path, line_of(path, needle), key, *fragments)


def test_an_rpm_base_is_refused(tmp_path):
    path = write(tmp_path, DEBIAN.replace("debian12", "rockylinux9") + "packages: {runtime: [htop]}\n")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "packages"), "packages",
                 "not a Debian-family distro")
