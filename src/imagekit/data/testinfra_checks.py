"""pytest-testinfra module that ``imagekit check`` runs against a container.

It reads the checks (JSON) named by IMAGEKIT_CHECKS and the container from
IMAGEKIT_CONTAINER (a Docker container, or a Podman one when IMAGEKIT_BACKEND is
``podman``); each check becomes one test whose id is the check's id and
whose body is its kind's ``verify``. Checks that need hardware not offered
(IMAGEKIT_WITH) are skipped: reported as not run, never as passed.
"""

import json
import os

import pytest
import testinfra

from imagekit import checks

CHECKS = [checks.from_dict(spec) for spec in json.loads(open(os.environ["IMAGEKIT_CHECKS"]).read())]
WITH = set(filter(None, os.environ.get("IMAGEKIT_WITH", "").split(",")))


@pytest.fixture(scope="module")
def host():
    backend = os.environ.get("IMAGEKIT_BACKEND", "docker")
    assert backend in ("docker", "podman"), backend
    return testinfra.get_host(f"{backend}://" + os.environ["IMAGEKIT_CONTAINER"])


@pytest.mark.parametrize("check", CHECKS, ids=[c.id for c in CHECKS])
def test_check(host, check):
    if check.needs and check.needs not in WITH:
        pytest.skip(f"not run: needs {check.needs} (use --with {check.needs} where present)")
    check.verify(host)
