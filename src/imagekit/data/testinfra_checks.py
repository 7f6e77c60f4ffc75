"""pytest-testinfra module that ``imagekit check`` runs against a container.

It reads the checks (JSON) named by IMAGEKIT_CHECKS and the container from
IMAGEKIT_CONTAINER (a Docker container, or a Podman one when IMAGEKIT_BACKEND is
``podman``), or, with IMAGEKIT_BACKEND ``exec``, the command prefix (JSON, IMAGEKIT_EXEC)
that runs a command in an Enroot or Apptainer container (imagekit.checks.runtimes); each
check becomes one test whose id is the check's id and whose body is its kind's ``verify``.
Checks that need hardware not offered (IMAGEKIT_WITH) are skipped: reported as not run,
never as passed.
"""

import json
import os

import pytest
import testinfra
import testinfra.host
from testinfra.backend import base

from imagekit import checks

CHECKS = [checks.from_dict(spec) for spec in json.loads(open(os.environ["IMAGEKIT_CHECKS"]).read())]
WITH = set(filter(None, os.environ.get("IMAGEKIT_WITH", "").split(",")))
BACKEND = os.environ.get("IMAGEKIT_BACKEND", "docker")
# What only an engine's container shows: the login-environment check reads the declared
# environment from the container's pid 1, which Enroot and Apptainer containers do not have (their
# commands already run in the image's environment through the runtime itself).
ENGINE_ONLY = {"login_env"}


class ExecBackend(base.BaseBackend):
    """Runs each command as PREFIX /bin/sh -c COMMAND (enroot exec PID, apptainer exec FILE)."""

    NAME = "imagekit-exec"

    def __init__(self, prefix, *args, **kwargs):
        self.prefix = list(prefix)
        super().__init__("imagekit-exec", *args, **kwargs)

    def run(self, command, *args, **kwargs):
        cmd = self.get_command(command, *args)
        out = self.run_local(" ".join(["%s"] * len(self.prefix)) + " /bin/sh -c %s", *self.prefix, cmd)
        out.command = self.encode(cmd)
        return out


@pytest.fixture(scope="module")
def host():
    assert BACKEND in ("docker", "podman", "exec"), BACKEND
    if BACKEND == "exec":
        backend = ExecBackend(json.loads(os.environ["IMAGEKIT_EXEC"]))
        found = testinfra.host.Host(backend)
        backend.set_host(found)
        return found
    return testinfra.get_host(f"{BACKEND}://" + os.environ["IMAGEKIT_CONTAINER"])


@pytest.mark.parametrize("check", CHECKS, ids=[c.id for c in CHECKS])
def test_check(host, check):
    if check.needs and check.needs not in WITH:
        pytest.skip(f"not run: needs {check.needs} (use --with {check.needs} where present)")
    if BACKEND == "exec" and check.kind in ENGINE_ONLY:
        pytest.skip("not run: an engine-only check (Enroot and Apptainer already ran every check in the "
                    "image's own environment)")
    check.verify(host)
