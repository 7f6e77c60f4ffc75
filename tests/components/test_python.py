"""python: distro modules as python3-<name>, a venv at /opt/venv when pip packages are wanted."""

from __future__ import annotations

from helpers.stack_helpers import CUDA, DEBIAN, load_text, render_text, stage


def test_distro_modules_without_a_venv(tmp_path):
    text = render_text(tmp_path, DEBIAN + "components:\n  python: {packages: [mpi4py, numpy]}\n")
    devel, runtime = stage(text, "devel"), stage(text, "runtime")
    assert "python3 python3-dev python3-mpi4py python3-numpy python3-pip" in devel
    assert "python3 python3-mpi4py python3-numpy" in runtime and "python3-dev" not in runtime
    assert "/opt/venv" not in text and "python3-venv" not in text


def test_pip_packages_make_a_venv_copied_to_the_runtime(tmp_path):
    text = render_text(tmp_path, DEBIAN + "components:\n  python: {pip: ['numpy==2.1.3', 'x[y] >= 1']}\n")
    devel, runtime = stage(text, "devel"), stage(text, "runtime")
    assert "python3 -m venv --system-site-packages /opt/venv" in devel
    assert "/opt/venv/bin/python -m pip install numpy==2.1.3 'x[y] >= 1'" in devel, "requirements are shell-quoted"
    assert "COPY --from=devel /opt/venv /opt/venv" in runtime
    assert "ENV PATH=/opt/venv/bin:$PATH" in devel and "ENV PATH=/opt/venv/bin:$PATH" in runtime
    assert "python3-venv" in runtime


def test_a_framework_component_implies_the_venv(tmp_path):
    s = load_text(tmp_path, CUDA + "components:\n  cuda: {}\n  python: {}\n  pytorch: {version: '2.5.1'}\n")
    assert s.get("python").venv


def test_labels_and_checks(tmp_path):
    py = load_text(tmp_path, DEBIAN + "components:\n  python: {packages: [mpi4py]}\n").get("python")
    assert py.version == "3.11"
    assert py.labels() == {"packages": "mpi4py", "pip": ""}
    assert {c.id for c in py.checks()} == {"python.version", "python.mpi4py"}
