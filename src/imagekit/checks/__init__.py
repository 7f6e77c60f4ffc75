"""Checks: what must hold in an image, and running them against one.

- :mod:`.kinds`: a check as data, one class per kind, each owning its validation, its sentence and
  how it verifies an image; the factories components call (``checks.run``, ``checks.file``, ...).
- :mod:`.dlopen`: the dlopen closure: the names plugins and providers open at run time, which
  components declare (:class:`~.dlopen.Opens`), resolved by the image's loader.
- :mod:`.catalogue`: which checks an image gets (its components', its stack file's, and the
  no-secrets and login-environment checks every image gets).
- :mod:`.runner`: ``imagekit check``: the checks run with pytest-testinfra in a container of an
  engine image, or of an image file under Enroot or Apptainer (:mod:`.runtimes`).

This module is the authoring API (what a component or a site component writes: ``from imagekit
import checks``), drawn from the model modules only: it sits on the model's floor, so importing it
loads no engine. The runner is imported by name (``from imagekit.checks import runner``).
"""

from __future__ import annotations

from imagekit.checks.catalogue import LOGIN_ENV, NO_SECRETS, elf_prefixes, stack_checks
from imagekit.checks.dlopen import Opens, closure_check
from imagekit.checks.kinds import (DRIVER_LIBS, KINDS, NEEDS, Absent, Check, File, InvalidCheck, LddClosure,
                                   Library, LoginEnv, PythonImport, Run, absent, file, from_dict, ldd_closure,
                                   library, login_env, python_import, run)

__all__ = ["DRIVER_LIBS", "KINDS", "LOGIN_ENV", "NEEDS", "NO_SECRETS", "Absent", "Check", "File", "InvalidCheck",
           "LddClosure", "Library", "LoginEnv", "Opens", "PythonImport", "Run", "absent", "closure_check",
           "elf_prefixes", "file", "from_dict", "ldd_closure", "library", "login_env", "python_import", "run",
           "stack_checks"]
