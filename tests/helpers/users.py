"""Other users, for the multi-user store and importer tests.

Users are numeric uids run with ``setpriv`` (no /etc/passwd entry: nothing on the machine
changes), plus the cluster's ``imagekit-user`` where a test needs a user the system knows
(group membership is looked up by name). The venv's interpreter lives under /root, which
other users cannot enter, so they run Debian's ``/usr/bin/python3`` in a venv with imagekit's
dependencies (``pip install`` of this checkout, as a site installs it; built once per machine
under /var/tmp, keyed by pyproject.toml) and this checkout's ``src/`` copied for the session, so
they run exactly the code under test. The session's copy is installed as a site installs it: a venv
of its own whose ``.pth`` names the copy and the shared venv's site-packages, with the console
scripts pip writes, so ``python -I`` (the importer's isolated form, security-4 H1) finds it with no
``PYTHONPATH``.

The fixtures ``other_python`` and ``shared_dir`` reach the export tests through conftest.py.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.needs import need

ROOT = Path(__file__).resolve().parents[2]


def _free_ids(count: int, start: int) -> list[int]:
    """``count`` ids from ``start`` up that neither the user nor the group database knows: a user of
    the tests runs with the same number as its group, and a site's first local accounts (often
    1000, 1001, 2001...) must not be mistaken for them (messages would name the account)."""
    found: list[int] = []
    candidate = start
    while len(found) < count:
        try:
            pwd.getpwuid(candidate)
        except KeyError:
            try:
                grp.getgrgid(candidate)
            except KeyError:
                found.append(candidate)
        candidate += 1
    return found


# Numeric users of the tests and a numeric group with no listed members, free on this machine.
ALICE, BOB, CAROL, TEAM = _free_ids(4, 2001)


@dataclass
class OtherPython:
    """An interpreter any user can run, importing this checkout's imagekit (``src``) with or without ``-I``."""

    python: Path
    src: Path

    def script(self, name: str) -> Path:
        """A console script of the session's install (``imagekit-pyxis-importer``, ...)."""
        return self.python.parent / name

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": f"{self.python.parent}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", **extra}

    def importer(self, directory: Path, settings: dict[str, str], log: Path | None = None,
                 module: str = "imagekit.export.pyxis_importer") -> Path:
        """A site's importer wrapper (README "The Pyxis importer"): exports ``settings``, runs the
        importer (``module``: pyxis_signed for a site with a signature policy); with ``log``, stderr
        also goes there (Pyxis shows it only on failure)."""
        lines = ["#!/bin/bash"]
        lines += [f"export {k}='{v}'" for k, v in settings.items()]
        if log is not None:
            lines.append(f'exec 2> >(tee -a {log} >&2)')
        lines.append(f'exec {self.python} -I -m {module} "$@"')     # isolated, as docs/security.md says
        path = directory / "imagekit-importer"
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o755)
        return path


def _venv_key() -> str:
    data = (ROOT / "pyproject.toml").read_bytes() + Path("/usr/bin/python3").resolve().name.encode()
    return hashlib.sha256(data).hexdigest()[:16]


def _venv() -> Path:
    """Debian's python3 in a venv with imagekit installed (its dependencies), once per machine."""
    need(None if Path("/usr/bin/python3").exists() else "no /usr/bin/python3 (apt-get install python3-venv)")
    final = Path(f"/var/tmp/imagekit-test-venv-{_venv_key()}")
    if (final / "bin" / "python").exists():
        return final
    build = Path(tempfile.mkdtemp(prefix="imagekit-test-venv-", dir="/var/tmp"))
    try:
        proc = subprocess.run(["/usr/bin/python3", "-m", "venv", str(build)], capture_output=True, text=True)
        need(None if proc.returncode == 0 else f"cannot make a venv with /usr/bin/python3: {proc.stderr[-300:]}")
        proc = subprocess.run([str(build / "bin" / "pip"), "install", "-q", str(ROOT)],
                              capture_output=True, text=True, timeout=600)
        need(None if proc.returncode == 0 else f"pip install of imagekit failed: {proc.stderr[-500:]}")
        os.chmod(build, 0o755)
        try:
            os.rename(build, final)      # another session may have won: theirs is as good
        except OSError:
            pass
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return final


# What pip writes for a console script (distlib's template), with the interpreter on its first line.
CONSOLE_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from {module} import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""
SCRIPTS = {"imagekit": "imagekit.cli", "imagekit-pyxis-importer": "imagekit.export.pyxis_importer",
           "imagekit-pyxis-importer-signed": "imagekit.export.pyxis_signed"}


def _install(shared: Path, src: Path) -> Path:
    """A venv in ``src`` (``.venv``, so no package name) whose imagekit is ``src``'s and whose other
    packages are the shared venv's: its python."""
    venv = src / ".venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    (site_packages,) = venv.glob("lib/python3*/site-packages")
    (shared_packages,) = shared.glob("lib/python3*/site-packages")
    # The copy first, then the shared packages as a site directory (their own .pth files run too).
    (site_packages / "imagekit-test-src.pth").write_text(f"{src}\nimport site; site.addsitedir({str(shared_packages)!r})\n")
    for name, module in SCRIPTS.items():
        script = venv / "bin" / name
        script.write_text(CONSOLE_SCRIPT.format(python=venv / "bin" / "python", module=module))
        script.chmod(0o755)
    return venv / "bin" / "python"


@pytest.fixture(scope="session")
def other_python() -> OtherPython:
    venv = _venv()
    src = Path(tempfile.mkdtemp(prefix="imagekit-test-src-", dir="/var/tmp"))
    os.chmod(src, 0o755)
    shutil.copytree(ROOT / "src" / "imagekit", src / "imagekit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    python = _install(venv, src)
    subprocess.run(["chmod", "-R", "a+rX", str(src)], check=True)
    yield OtherPython(python, src)
    shutil.rmtree(src, ignore_errors=True)


def setpriv(uid: int, argv: list[str], *, gid: int | None = None, groups: tuple[int, ...] = (),
            umask: int = 0o022) -> list[str]:
    """``argv`` as ``uid`` (group ``gid``, default the uid; supplementary ``groups``) under ``umask``,
    with no capabilities."""
    need(None if os.geteuid() == 0 else "running as other users needs root")
    group_args = [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    return ["setpriv", f"--reuid={uid}", f"--regid={gid if gid is not None else uid}", *group_args,
            "--inh-caps=-all", "--", "sh", "-c", f'umask {umask:03o}; exec "$@"', "sh", *argv]


def home_for(uid: int, base: Path) -> Path:
    """A home directory of ``uid``'s own under ``base``."""
    home = base / f"home-{uid}"
    home.mkdir(exist_ok=True)
    os.chown(home, uid, uid)
    os.chmod(home, 0o700)
    return home


@pytest.fixture
def shared_dir():
    """A directory every test user can reach (pytest's own tmp_path is root's, mode 700)."""
    path = Path(tempfile.mkdtemp(prefix="imagekit-test-", dir="/var/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
