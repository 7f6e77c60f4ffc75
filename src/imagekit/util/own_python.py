"""Python children that run only imagekit's own code and its installed dependencies.

``python -m MODULE`` puts the working directory first on ``sys.path``, and an interpreter reads
``PYTHONPATH``, ``PYTHONHOME``, ``PYTHONPYCACHEPREFIX``, ``PYTHONUSERBASE``, ``PYTHONINSPECT`` and the
rest from its environment. The Pyxis importer runs in the job's working directory (``/tmp`` when that
is missing on the node) with the job's environment, as the job's user, root included; a child started
the plain way imports whatever another user planted there (security-4 H1). So every Python child
imagekit starts is made here:

- ``-I`` (isolated): no working or script directory on ``sys.path``, no ``PYTHON*`` variable read, no
  user site-packages (Python >= 3.4: ``-c`` and ``-m`` then add nothing to the path);
- the ``PYTHON*`` variables are also left out of its environment, so its own children are clean too;
- the directory this imagekit was imported from goes first on its path when ``-I`` would lose it
  (a source tree on ``PYTHONPATH`` in development), so the child runs the same imagekit as its
  parent; a venv, an editable install (its ``.pth``) or a system install already has it.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, NoReturn

import imagekit

# The child's first code, given as -c (never a file it would look up). argv: ROOT MODULE ARGS...;
# runpy then does what -m does (sys.argv[0] becomes the module's file, __name__ "__main__").
BOOT = ("import sys, runpy\n"
        "root = sys.argv.pop(1)\n"
        "if root not in sys.path:\n"
        "    sys.path.insert(0, root)\n"
        "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n")


def interpreter() -> str:
    """The interpreter this imagekit runs on: the one its children run on too."""
    return sys.executable


def import_root() -> str:
    """The directory holding the ``imagekit`` package this process runs (already trusted: its code runs)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(imagekit.__file__)))


def argv(module: str, *args: str) -> list[str]:
    """``python -m MODULE ARGS`` with this interpreter, isolated from the working directory and the
    environment (the module docstring)."""
    return [interpreter(), "-I", "-c", BOOT, import_root(), module, *args]


def environ(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default this process's) without its ``PYTHON*`` variables."""
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if not k.startswith("PYTHON")}


def become(module: str, args: list[str]) -> NoReturn:
    """This process becomes ``python -m MODULE ARGS``, isolated (exec: same pid, stdin, stdout, stderr
    and exit status for whoever waits on it, e.g. Pyxis)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv(module, *args), environ())
