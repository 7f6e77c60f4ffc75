"""Only signed images start: the importer under a site policy, run by the real Pyxis 0.24.0 (importer=
in plugstack.conf) of the session's Slurm cluster, as root and as the unprivileged test user.

debian-mpi is built (the ``mpi_image`` fixture), signed and pushed with its .sqsh and SIF (``imagekit push
--with enroot,sif --sign``); its SIF passes the real ``apptainer verify --key``; ``srun
--container-image`` starts it for both users; an unsigned image is refused, its one ``error:`` line in
the job's output. And what the importer cannot stop, as it is on this machine: a local ``.sqsh`` path
never reaches the importer (Pyxis starts it itself), and a user calls Enroot directly while unprivileged
user namespaces are open (docs/signing.md, "What the policy cannot stop").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.users import TEAM

from imagekit.attest import keys
from imagekit.cli import main
from imagekit.export.push import push_image

pytestmark = [pytest.mark.engine, pytest.mark.slurm]


@pytest.fixture
def signed_site(cluster, other_python, registry, test_user):
    """A shared store, the site key (ci), a policy every job reads, and Pyxis's importer= line set."""
    directory = Path(tempfile.mkdtemp(prefix="imagekit-signed-", dir="/var/tmp"))
    os.chmod(directory, 0o755)
    shared = directory / "shared"
    res = CliRunner().invoke(main, ["store", "--store", str(shared), "init", "--shared", "--group", str(TEAM)])
    assert res.exit_code == 0, res.output
    keys.write_pair(keys.generate(), directory / "ci")
    policy = directory / "policy.yaml"
    policy.write_text(textwrap.dedent(f"""\
        version: 1
        keys:
          ci: {{path: {directory}/ci.pub}}
        repositories:
          - match: "{registry}/ik-signed/*"
            signers: [ci]
        """))
    log = directory / "importer.log"
    log.touch()
    log.chmod(0o666)
    for name in ("cache-root", "cache-user"):
        (directory / name).mkdir(mode=0o700)
    os.chown(directory / "cache-user", test_user.uid, test_user.gid)
    wrapper = other_python.importer(directory, {"IMAGEKIT_SHARED_STORE": str(shared),
                                                "IMAGEKIT_POLICY": str(policy)}, log,
                                    module="imagekit.export.pyxis_signed")
    cluster.pyxis(importer=str(wrapper))
    try:
        yield directory
    finally:
        cluster.pyxis()
        shutil.rmtree(directory, ignore_errors=True)


def srun(cluster, site: Path, user, image: str, command: list[str]) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "SLURM_CONF": str(cluster.conf),
           "HOME": user.home if user else "/root",
           "XDG_CACHE_HOME": str(site / ("cache-user" if user else "cache-root"))}
    argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), "srun", f"--container-image={image}", *command]
    if user is None:
        return subprocess.run(argv, cwd="/tmp", capture_output=True, text=True, timeout=900)
    return user.run(argv, timeout=900, stderr=subprocess.PIPE)


def said(site: Path) -> str:
    return (site / "importer.log").read_text()


def test_signed_debian_mpi_starts_for_root_and_a_user_and_an_unsigned_image_is_refused(
        cluster, signed_site, mpi_image, base_image, registry, test_user, tmp_path):
    res = CliRunner().invoke(main, ["push", mpi_image, "--to", f"{registry}/ik-signed/mpi:1", "--with", "enroot,sif",
                                    "--sign", str(signed_site / "ci.key"), "-q"])
    assert res.exit_code == 0, res.output

    # The SIF pushed beside it carries its SBOM and a signature the real Apptainer accepts.
    sif = tmp_path / "mpi.sif"
    res = CliRunner().invoke(main, ["pull", f"docker://{registry}/ik-signed/mpi:1", "--to", "sif", "-o", str(sif)])
    assert res.exit_code == 0, res.output
    ok = subprocess.run(["apptainer", "verify", "--key", str(signed_site / "ci.pub"), str(sif)],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and "SBOM" in ok.stdout, ok.stdout + ok.stderr

    image = f"{registry}#ik-signed/mpi:1"
    for user in (None, test_user):
        proc = srun(cluster, signed_site, user, image, ["cat", "/etc/debian_version"])
        assert proc.returncode == 0 and proc.stdout.strip().startswith("12"), proc.stdout + proc.stderr + said(signed_site)
    assert said(signed_site).count("policy: ") >= 2 and "signed by ci" in said(signed_site)

    pushed = push_image(base_image, f"{registry}/ik-signed/plain:1")
    before = len(said(signed_site))
    proc = srun(cluster, signed_site, test_user, f"{registry}#ik-signed/plain:1", ["true"])
    assert proc.returncode != 0
    errors = [line for line in said(signed_site)[before:].splitlines() if ": error: " in line]
    assert len(errors) == 1, said(signed_site)[before:]
    assert pushed.digest in errors[0] and "unsigned" in errors[0] and "accepted signers: ci (" in errors[0]
    assert pushed.digest in proc.stdout + proc.stderr     # Pyxis shows the importer's line to the user


def test_what_the_policy_cannot_stop_local_paths_and_direct_enroot(cluster, signed_site, base_image, test_user,
                                                                   user_dir):
    """A local .sqsh path never reaches the importer (Pyxis 0.24: an image starting with '/' or '.' is a
    squashfs path it starts itself), and with unprivileged user namespaces open a user runs Enroot
    directly: neither is signed, both start. Documented in docs/signing.md."""
    sqsh = user_dir / "unsigned.sqsh"
    res = CliRunner().invoke(main, ["export", base_image, "--to", "enroot", "-o", str(sqsh), "--no-store", "-q"])
    assert res.exit_code == 0, res.output
    os.chmod(sqsh, 0o644)
    before = len(said(signed_site))
    proc = srun(cluster, signed_site, test_user, str(sqsh), ["cat", "/etc/debian_version"])
    assert proc.returncode == 0 and proc.stdout.strip().startswith("12"), proc.stdout + proc.stderr
    assert said(signed_site)[before:] == "", "Pyxis called the importer for a local path"

    userns = int(Path("/proc/sys/user/max_user_namespaces").read_text()) > 0
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "ENROOT_RUNTIME_PATH": str(user_dir / "run"),
           "ENROOT_CACHE_PATH": str(user_dir / "cache"), "ENROOT_DATA_PATH": str(user_dir / "data")}
    create = test_user.run(["enroot", "create", "--name", "ik-sign-direct", str(sqsh)], env=env)
    start = test_user.run(["enroot", "start", "ik-sign-direct", "cat", "/etc/debian_version"], env=env)
    assert (create.returncode == 0 and start.returncode == 0 and start.stdout.strip().startswith("12")) == userns, \
        create.stdout + start.stdout
