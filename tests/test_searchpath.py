"""Stacks and system models are found by one rule: NAME.yaml or NAME.yml, site directories first."""

from __future__ import annotations

import shutil

from imagekit import stack
from imagekit.util import searchpath
from imagekit.validate import system

SHIPPED_STACK = stack.SHIPPED_DIR / "debian-mpi.yaml"
SHIPPED_SYSTEM = system.SHIPPED_DIR / "dgx-a100.yaml"


def test_a_yml_file_is_found_and_a_yaml_of_the_same_name_hides_it(tmp_path):
    (tmp_path / "a.yml").write_text("x: 1\n")
    (tmp_path / "b.yml").write_text("x: 1\n")
    (tmp_path / "b.yaml").write_text("x: 1\n")
    found = searchpath.files([tmp_path])
    assert {n: p.name for n, (p, _d) in found.items()} == {"a": "a.yml", "b": "b.yaml"}


def test_stacks_take_yml_files_as_systems_do(tmp_path, monkeypatch):
    """Before, `*.yml` stacks on $IMAGEKIT_STACKS_PATH were not listed while `*.yml` systems were."""
    shutil.copy(SHIPPED_STACK, tmp_path / "site-mpi.yml")
    monkeypatch.setenv(stack.PATH_ENV, str(tmp_path))
    path, variant = stack.find("site-mpi")
    assert path == tmp_path / "site-mpi.yml" and variant is None
    assert any(p.name == "site-mpi.yml" and d == tmp_path for p, d in stack.available())


def test_systems_take_yml_files(tmp_path, monkeypatch):
    shutil.copy(SHIPPED_SYSTEM, tmp_path / "site-cluster.yml")
    monkeypatch.setenv(system.PATH_ENV, str(tmp_path))
    assert system.find("site-cluster") == tmp_path / "site-cluster.yml"


def test_an_earlier_directory_hides_a_shipped_name(tmp_path, monkeypatch):
    shutil.copy(SHIPPED_STACK, tmp_path / "debian-mpi.yml")
    monkeypatch.setenv(stack.PATH_ENV, str(tmp_path))
    assert stack.find("debian-mpi")[0] == tmp_path / "debian-mpi.yml"
