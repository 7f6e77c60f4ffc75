"""pytest-testinfra module that ``imagekit check`` runs against a container.

It reads the checks (JSON) named by IMAGEKIT_CHECKS and the container from
IMAGEKIT_CONTAINER; each check becomes one test whose id is the check's id.
Checks that need hardware not offered (IMAGEKIT_WITH) are skipped: reported as
not run, never as passed.
"""

import json
import os
import re

import pytest
import testinfra

CHECKS = json.loads(open(os.environ["IMAGEKIT_CHECKS"]).read())
WITH = set(filter(None, os.environ.get("IMAGEKIT_WITH", "").split(",")))


@pytest.fixture(scope="module")
def host():
    return testinfra.get_host("docker://" + os.environ["IMAGEKIT_CONTAINER"])


def _show(cmd):
    out = (cmd.stdout + cmd.stderr).strip().splitlines()
    return "\n".join(out[-25:]) or "(no output)"


@pytest.mark.parametrize("check", CHECKS, ids=[c["id"] for c in CHECKS])
def test_check(host, check):
    if check.get("needs") and check["needs"] not in WITH:
        pytest.skip(f"not run: needs {check['needs']} (use --with {check['needs']} where present)")
    kind, value = check["kind"], check[check["kind"]]
    if kind == "run":
        cmd = host.run(value)
        assert cmd.rc == 0, f"`{value}` exited {cmd.rc}:\n{_show(cmd)}"
        if check.get("expect"):
            assert re.search(check["expect"], cmd.stdout + cmd.stderr), \
                f"`{value}` output does not match /{check['expect']}/:\n{_show(cmd)}"
    elif kind == "file":
        assert host.file(value).exists, f"{value} does not exist"
    elif kind == "absent":
        cmd = host.run(f'for f in {value}; do [ -e "$f" ] || [ -L "$f" ] && echo "$f"; done; true')
        assert not cmd.stdout.strip(), f"found files that must not be in the image:\n{cmd.stdout.strip()}"
    elif kind == "library":
        cmd = host.run("ldconfig -p")
        hits = [l for l in cmd.stdout.splitlines() if l.strip().split(" ", 1)[0] == value]
        assert hits, f"{value} is not in the dynamic loader cache (ldconfig -p)"
        path = hits[0].rsplit("=> ", 1)[-1].strip()
        assert host.file(path).exists, f"{value} points to {path}, which does not exist"
    elif kind == "python_import":
        cmd = host.run("python3 -c %s", f"import {value}")  # testinfra quotes the argument
        assert cmd.rc == 0, f"python3 cannot import {value}:\n{_show(cmd)}"
    else:  # pragma: no cover - the loader validates kinds
        pytest.fail(f"unknown check kind {kind}")
