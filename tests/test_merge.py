"""``extends:`` and matrix overlays: which lists append, and how a child replaces or removes an item."""

from __future__ import annotations

import textwrap

import pytest

from imagekit import merge
from imagekit import stack as stack_mod
from helpers.stack_helpers import DEBIAN, expect_error, line_of, write

SITE = """\
name: site-mpi
extends: debian-mpi
components:
  python: {packages: [numpy], pip: ["requests==2.31.0"]}
checks:
  - name: hostname
    run: hostname
"""


def _ids(stack) -> list[str]:
    return [c.id for c in stack.checks]


def test_a_child_keeps_the_parents_checks_and_packages(tmp_path):
    """The trial's case: a site stack extending debian-mpi with one check and one package kept
    debian-mpi's mpi4py ring check and its mpi4py (and so the image's benchmark)."""
    s = stack_mod.load(write(tmp_path, SITE))
    assert _ids(s) == ["stack.mpi4py-ring", "stack.hostname"]
    assert s.get("python").opts["packages"] == ["mpi4py", "numpy"]
    assert s.get("python").benchmark() is not None
    assert s.get("python").opts["pip"] == ["requests==2.31.0"]


def test_same_name_replaces_in_place_and_remove_drops(tmp_path):
    path = write(tmp_path, """\
        name: site-mpi
        extends: debian-mpi
        components:
          python: {packages: [{remove: mpi4py}, scipy]}
        checks:
          - name: first
            file: /etc/os-release
          - name: mpi4py-ring
            run: mpirun --version
        """)
    s = stack_mod.load(path)
    assert _ids(s) == ["stack.mpi4py-ring", "stack.first"]
    assert s.checks[0].command == "mpirun --version", "the child's check of the same name replaces the parent's"
    assert s.get("python").opts["packages"] == ["scipy"]


def test_remove_star_replaces_the_whole_list(tmp_path):
    path = write(tmp_path, """\
        name: site-mpi
        extends: debian-mpi
        checks:
          - remove: "*"
          - name: only
            file: /etc/os-release
        """)
    assert _ids(stack_mod.load(path)) == ["stack.only"]


def test_pip_requirements_match_by_project_name(tmp_path):
    write(tmp_path, DEBIAN + 'components:\n  python: {pip: ["NumPy==1.26.4", "scipy"]}\n', "p.yaml")
    path = write(tmp_path, 'name: c\nextends: p\ncomponents:\n  python: {pip: ["numpy==2.1.3"]}\n', "c.yaml")
    assert stack_mod.load(path).get("python").opts["pip"] == ["numpy==2.1.3", "scipy"]


def test_a_remove_that_matches_nothing_is_located(tmp_path):
    path = write(tmp_path, """\
        name: site-mpi
        extends: debian-mpi
        checks:
          - remove: mpi4py-rnig
        """)
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "mpi4py-rnig"), "checks[1]",
                 "removes 'mpi4py-rnig', which the parent", "inherited: mpi4py-ring")


def test_a_remove_in_a_stack_that_extends_nothing(tmp_path):
    path = write(tmp_path, DEBIAN + "components:\n  python: {packages: [{remove: mpi4py}]}\n")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "remove"), "components.python.packages[1]",
                 "which nothing this stack extends does not have")


def test_a_malformed_remove_item(tmp_path):
    path = write(tmp_path, "name: c\nextends: debian-mpi\nchecks:\n  - {remove: x, name: y}\n")
    expect_error(lambda: stack_mod.load(path), path, 4, "checks[1]", "`{remove: NAME}` alone")


def test_inherited_items_keep_their_own_file_in_errors(tmp_path):
    """A bad item the parent wrote is reported at the parent's line, not the child's."""
    parent = write(tmp_path, DEBIAN + "components:\n  python: {packages: [mpi4py, Bad_Name]}\n", "p.yaml")
    child = write(tmp_path, "name: c\nextends: p\ncomponents:\n  python: {packages: [numpy]}\n", "c.yaml")
    expect_error(lambda: stack_mod.load(child), parent, line_of(parent, "Bad_Name"),
                 "components.python.packages[2]", "invalid value")


def test_other_lists_are_replaced(tmp_path):
    write(tmp_path, DEBIAN + 'tags: ["a", "b"]\n', "p.yaml")
    path = write(tmp_path, 'name: c\nextends: p\ntags: ["c"]\n', "c.yaml")
    assert stack_mod.load(path).tags == ["c"]


def test_matrix_overlays_append_checks_too(tmp_path):
    path = write(tmp_path, DEBIAN + textwrap.dedent("""\
        checks:
          - {name: common, file: /etc/os-release}
        matrix:
          flavour:
            a: {checks: [{name: only-a, file: /bin/sh}]}
            b: {}
        """))
    variants = {s.name: _ids(s) for s in stack_mod.load_all(path)}
    assert variants == {"t-a": ["stack.common", "stack.only-a"], "t-b": ["stack.common"]}


@pytest.mark.parametrize("path, expected", [
    (("checks",), True), (("packages", "runtime"), True), (("components", "python", "pip"), True),
    (("components", "openmpi", "accept"), False), (("tags",), False), (("packages",), False),
])
def test_which_lists_append(path, expected):
    assert merge.appended(path) is expected
