"""The unprivileged test user running rootless Podman and imagekit (tests/test_podman.py,
tests/test_base_image.py): its own HOME, runtime directory and Podman store (set up by
scripts/setup-podman.sh), imagekit run by Debian's python3 with this checkout's code."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers.users import OtherPython
from helpers.needs import need


class PodmanUser:
    """The test user, running commands with its own HOME, runtime directory and Podman store."""

    def __init__(self, name: str, work: Path, python: OtherPython) -> None:
        entry = pwd.getpwnam(name)
        self.name, self.uid, self.home, self.work = name, entry.pw_uid, entry.pw_dir, work
        # imagekit as the user runs it: Debian's python3 with this checkout's code copied where any
        # user can read it (users.py), wherever the checkout lies.
        self.imagekit_argv = [str(python.python), "-m", "imagekit"]
        self.env = {"HOME": self.home, "XDG_RUNTIME_DIR": f"/run/user/{self.uid}",
                    "IMAGEKIT_STORE": str(work / "store"), **python.env()}

    def run(self, argv: list[str], *, user: str | None = None, env: dict | None = None,
            **kw) -> subprocess.CompletedProcess:
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        extra = [f"{k}={v}" for k, v in {**self.env, **(env or {})}.items()]
        return subprocess.run(["runuser", "-u", user or self.name, "--", "env", "-i", *extra, *argv],
                              cwd=kw.pop("cwd", self.work), **kw)

    def podman(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return self.run(["podman", *args], **kw)

    def imagekit(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return self.run([*self.imagekit_argv, *args], **kw)

    def dir(self, name: str) -> Path:
        path = self.work / name
        path.mkdir(exist_ok=True)
        os.chown(path, self.uid, -1)
        return path


@pytest.fixture(scope="module")
def user(test_user, other_python) -> PodmanUser:
    need(None if shutil.which("podman") else "podman is not installed (bash scripts/setup-podman.sh)")
    # Not under pytest's own temporary directory: root's is closed to other users.
    work = Path(tempfile.mkdtemp(prefix="imagekit-podman-test-"))
    try:
        work.chmod(0o755)
        os.chown(work, pwd.getpwnam(test_user.name).pw_uid, -1)
        u = PodmanUser(test_user.name, work, other_python)
        info = u.podman("info", "--format", "{{.Store.GraphDriverName}}")
        need(None if info.returncode == 0 else f"rootless podman does not work for {u.name}: {info.stderr[-500:]}")
        yield u
    finally:
        shutil.rmtree(work, ignore_errors=True)
