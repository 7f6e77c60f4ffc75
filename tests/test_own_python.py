"""imagekit.util.own_python: every Python child imagekit starts is isolated (security-4 H1), and finds
the same imagekit as its parent.

The scan reads the source (``ast``; nothing is imported), so a new ``python -m`` child cannot creep in
beside the helper; the other tests start real interpreters.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from imagekit.util import own_python

SRC = Path(__file__).resolve().parents[1] / "src" / "imagekit"
HELPER = SRC / "util" / "own_python.py"
SUBPROCESS = {"run", "Popen", "call", "check_call", "check_output"}


def _python_children(path: Path) -> list[str]:
    """``file:line what`` for each Python child ``path`` starts without the helper."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and node.attr == "executable" and \
                isinstance(node.value, ast.Name) and node.value.id == "sys":
            found.append(f"{where} uses sys.executable")
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
        if owner == "os" and node.func.attr.startswith(("exec", "spawn", "posix_spawn")):
            found.append(f"{where} calls os.{node.func.attr}")
        if owner == "subprocess" and node.func.attr in SUBPROCESS and node.args and \
                isinstance(node.args[0], (ast.List, ast.Tuple)) and node.args[0].elts:
            first = node.args[0].elts[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and \
                    os.path.basename(first.value).startswith("python"):
                found.append(f"{where} starts {first.value}")
    return found


def test_h1_no_python_child_is_started_outside_the_isolating_helper():
    """``sys.executable``, ``os.exec*`` and a ``python…`` argv appear only in imagekit.util.own_python."""
    found = [hit for path in sorted(SRC.rglob("*.py")) if path != HELPER for hit in _python_children(path)]
    assert found == [], "start Python children with imagekit.util.own_python (isolated, security-4 H1):\n" + \
        "\n".join(found)


def test_the_scan_sees_each_way_of_starting_python(tmp_path):
    """The scan itself: each form it must catch, in a file of its own."""
    forms = ['import sys, subprocess\nsubprocess.run([sys.executable, "-m", "pip"])\n',
             'import os\nos.execv("/usr/bin/python3", ["python3", "-m", "x"])\n',
             'import subprocess\nsubprocess.Popen(["python3", "-m", "x"])\n']
    for i, text in enumerate(forms):
        path = tmp_path / f"probe{i}.py"
        path.write_text(text)
        assert _python_children(path), text


def test_a_child_runs_the_parents_imagekit_even_when_that_came_from_pythonpath(tmp_path):
    """A source tree on PYTHONPATH (development): ``-I`` drops the variable, the helper puts the
    directory back, so the child runs the same imagekit as its parent, never another install's."""
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy / "imagekit", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "imagekit" / "_probe.py").write_text("import imagekit, sys\nprint(imagekit.__file__, sys.flags.isolated)\n")
    parent = ("import subprocess, sys\nfrom imagekit.util import own_python\n"
              "out = subprocess.run(own_python.argv('imagekit._probe'), env=own_python.environ(), "
              "capture_output=True, text=True)\nprint(out.stdout + out.stderr, end='')\n")
    proc = subprocess.run([sys.executable, "-c", parent], env={**os.environ, "PYTHONPATH": str(copy)},
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.stdout.split() == [str(copy / "imagekit" / "__init__.py"), "1"], proc.stdout + proc.stderr


def test_the_childs_environment_keeps_everything_but_python_variables():
    env = own_python.environ({"PYTHONPATH": "/x", "PYTHONHOME": "/y", "PATH": "/bin", "SLURM_JOB_ID": "1",
                              "IMAGEKIT_STORE": "/s", "MYPYTHONTHING": "kept"})
    assert env == {"PATH": "/bin", "SLURM_JOB_ID": "1", "IMAGEKIT_STORE": "/s", "MYPYTHONTHING": "kept"}
