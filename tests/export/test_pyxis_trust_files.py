"""Security-4 H14: the importer uses the site policy and its keys only when nobody but root (or the job's
user) can change them.

The red team's case: the policy and its key kept in a directory another user could write; that user
rewrote the policy to ``accept: unsigned`` and root's next job started an unsigned image. Here the
policy already says ``accept: unsigned`` (what the other user would have written); with the file, its
directory, the key or the key's directory open to others, the signed importer (run as Pyxis runs it,
on the engine's one-layer image) refuses with exit 12 and one line naming the file; with all of them
root's, the same policy serves the image.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers.arch_images import make
from helpers.pyxis_calls import EXE, job_env, pyxis_get
from helpers.users import BOB

from imagekit.attest import keys

pytestmark = pytest.mark.engine
SIGNED = EXE.parent / "imagekit-pyxis-importer-signed"
POLICY = """version: 1
keys:
  ci: {path: keys/ci.pub}
repositories:
  - match: "dockerd://*"
    accept: unsigned
"""


@pytest.fixture
def image(tmp_path):
    tag = f"imagekit-test/h14:{os.getpid()}"
    make(tag, "amd64", tmp_path, "h14")
    yield f"dockerd://{tag}"
    from imagekit.engines import docker as engine

    subprocess.run([engine.docker_cli(), "rmi", "-f", tag], capture_output=True)


@pytest.fixture
def policy(tmp_path):
    site = tmp_path / "etc-imagekit"
    (site / "keys").mkdir(parents=True)
    keys.write_pair(keys.generate(), site / "keys" / "ci")
    path = site / "policy.yaml"
    path.write_text(POLICY)
    for d in (site, site / "keys"):
        d.chmod(0o755)
    return path


OPENINGS = {
    "policy writable by everyone": lambda p: p.chmod(0o666),
    "its directory writable by everyone": lambda p: p.parent.chmod(0o777),
    "the key writable by its group": lambda p: (p.parent / "keys/ci.pub").chmod(0o664) or
    os.chown(p.parent / "keys/ci.pub", 0, BOB),
    "the key's directory another user's": lambda p: os.chown(p.parent / "keys", BOB, BOB),
}


@pytest.mark.parametrize("opening", OPENINGS)
def test_h14_a_policy_or_key_another_user_can_change_refuses_every_image(opening, image, policy, tmp_path):
    OPENINGS[opening](policy)
    call = pyxis_get(image, job_env(tmp_path / "store", tmp_path / "run", 0, IMAGEKIT_POLICY=str(policy)),
                     [str(SIGNED)])
    assert call.rc == 12 and call.path == "", call.log
    (line,) = [ln for ln in call.log.splitlines() if "error:" in ln]
    assert "refused by the signature policy" in line and "whoever can change it decides what imagekit trusts" in line
    assert str(policy if "key" not in opening else policy.parent / "keys" / "ci.pub") in line, line


def test_h14_the_same_policy_root_s_alone_serves_the_image(image, policy, tmp_path):
    call = pyxis_get(image, job_env(tmp_path / "store", tmp_path / "run", 0, IMAGEKIT_POLICY=str(policy)),
                     [str(SIGNED)])
    assert call.rc == 0 and Path(call.path).is_file(), call.log
    assert "may start unsigned" in call.log, call.log
