"""Rootless Podman (``--engine podman``), for real, as the unprivileged test user.

What a user does: ``imagekit build --engine podman debian-mpi --export enroot`` run as
``imagekit-user`` (scripts/setup-podman.sh: Podman 4.3, subordinate ids, its storage.conf),
with the Docker engine's base image copied into the user's store (``docker save | podman
load``). The same labels, checks and exports as the Docker path; the checks catch a broken
Podman image; the CA bundle (a build secret) is in no layer, and the search that says so
finds it where a build does copy it; a user without subordinate ids gets one error naming
the fix before anything is built.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from imagekit import render
from imagekit.export.image_source import open_source
from helpers.users import other_python  # noqa: F401 - the fixture
from helpers.podman_user import user  # noqa: F401 - the fixture
from helpers.stack_helpers import assert_built_labels

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def podman_base(user, base_image) -> str:
    """The Docker engine's base image, copied into the user's store (the same image ID)."""
    from imagekit.engines import docker as engine

    want = engine.inspect(base_image).id
    have = user.podman("image", "inspect", "--format", "{{.Id}}", base_image)
    if have.returncode != 0 or f"sha256:{have.stdout.strip()}" != want:
        save = subprocess.Popen([engine.docker_cli(), "save", base_image], stdout=subprocess.PIPE)
        loaded = user.podman("load", "-q", stdin=save.stdout)
        save.wait()
        assert loaded.returncode == 0, loaded.stderr
    return base_image


@pytest.fixture(scope="module")
def built(user, podman_base) -> dict:
    """``imagekit build --engine podman debian-mpi --export enroot`` as the user: build, check, export."""
    out, logs = user.dir("out"), user.dir("logs")
    proc = user.imagekit("build", "--engine", "podman", "debian-mpi", "--export", "enroot", "-o", str(out),
                         "--log-dir", str(logs), "--json")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)[0]


def _labels(user: PodmanUser, ref: str) -> dict[str, str]:
    proc = user.podman("image", "inspect", "--format", "{{json .Config.Labels}}", ref)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_rootless_build_has_the_labels_checks_and_export_of_the_docker_path(user, built):
    labels = _labels(user, "imagekit/debian-mpi:latest")
    assert_built_labels(labels, "debian-mpi")
    assert built["build"]["engine"] == "podman"
    # The checks ran in a Podman container (the build's --export implies them) and all passed.
    check = built["check"]
    assert check["ok"] and check["counts"]["failed"] == 0, check
    statuses = {c["id"]: c["status"] for c in check["checks"]}
    assert statuses["stack.mpi4py-ring"] == "passed" and statuses["openmpi.pml_ucx"] == "passed"
    assert statuses["image.no_build_secrets"] == "passed"
    assert statuses["ofed.devices"] == "not-run"
    # The export: an Enroot squashfs whose labels are the image's.
    from imagekit.image_facts import reader

    (export,) = built["exports"]
    facts = reader.read(export["path"])
    assert facts.stack == "debian-mpi" and facts.labels["io.imagekit.recipe.sha256"] == labels[
        "io.imagekit.recipe.sha256"]


def test_export_store_key_is_the_podman_image_id(user, built):
    """The store is keyed by the config digest: podman's image ID is the OCI archive's config
    digest, so a second export of the unchanged image is a store hit without saving it again."""
    image_id = "sha256:" + user.podman("image", "inspect", "--format", "{{.Id}}",
                                       "imagekit/debian-mpi:latest").stdout.strip()
    archive = user.dir("save") / "mpi.tar"
    saved = user.podman("save", "--format", "oci-archive", "-o", str(archive), "imagekit/debian-mpi:latest")
    assert saved.returncode == 0, saved.stderr
    assert open_source(f"oci-archive:{archive}").image_id() == image_id
    again = user.imagekit("export", "containers-storage:imagekit/debian-mpi:latest", "--to", "enroot",
                          "-o", str(user.dir("out2") / "mpi.sqsh"), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["store_hit"] is True


RUN_ONCE = """\
import json, sys
from imagekit import engines, package_check
tag = sys.argv[1]
archives, why = package_check.archives_of(tag, "podman")    # no base labels: read through run_once
ran = engines.of("podman").run_once(tag, ["/bin/cat", "/etc/debian_version"], timeout=120)
print(json.dumps({"archives": [a.mirror for a in archives], "why": why, "rc": ran.returncode, "out": ran.stdout}))
"""


def test_run_once_reads_an_image_of_the_users_store_and_leaves_no_container(user, podman_base):
    """The protocol's run_once (Podman's throwaway, created and started once): the package check
    reads the apt sources of a Podman image that carries no io.imagekit.base labels, as it does
    Docker's, and every container it made is gone."""
    from imagekit import image_facts

    tag, container = "imagekit-test/unlabelled:run-once", "imagekit-test-unlabelled"
    user.podman("rm", "-f", container)
    made = user.podman("create", "--name", container, podman_base, "/bin/true")
    assert made.returncode == 0, made.stderr
    try:
        committed = user.podman("commit", "-q", "--change", f"LABEL {image_facts.BASE}=", container, tag)
        assert committed.returncode == 0, committed.stderr
        proc = user.run([user.imagekit_argv[0], "-c", RUN_ONCE, tag])
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads(proc.stdout)
        assert got["archives"] and got["why"] == "", got
        assert got["rc"] == 0 and got["out"].strip()[:2].isdigit(), got      # "12.x"
        left = user.podman("ps", "-a", "--format", "{{.Names}}").stdout.split()
        assert not [n for n in left if n.startswith("imagekit-run-")], left
    finally:
        user.podman("rm", "-f", container)
        user.podman("rmi", "-f", tag)


def test_no_change_rebuild_is_fully_cached(user, built):
    proc = user.imagekit("build", "--engine", "podman", "debian-mpi", "--log-dir", str(user.dir("logs")), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads(proc.stdout)[0]["build"]
    assert again["steps"] > 10 and again["cached_steps"] == again["steps"], again
    assert again["image_id"] == built["build"]["image_id"]


BREAKAGES = {
    "no-mpirun": ("rm -f /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/orterun /usr/bin/mpirun.openmpi",
                  {"openmpi.version", "openmpi.runs", "stack.mpi4py-ring"}),
    "secret-left": ("mkdir -p /run/secrets && echo x > /run/secrets/ca-bundle", {"image.no_build_secrets"}),
}


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_podman_check_catches_a_broken_image(user, built, name):
    script, expected = BREAKAGES[name]
    tag = f"imagekit-test/broken:{name}"
    container = f"imagekit-test-break-{name}"
    user.podman("rm", "-f", container)
    made = user.podman("run", "--name", container, "--network", "none", "--entrypoint", "/bin/sh",
                       "imagekit/debian-mpi:latest", "-c", script)
    assert made.returncode == 0, made.stderr
    try:
        committed = user.podman("commit", "-q", container, tag)
        assert committed.returncode == 0, committed.stderr
        proc = user.imagekit("check", tag, "--engine", "podman", "--json")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        report = json.loads(proc.stdout)
        failed = {c["id"] for c in report["checks"] if c["status"] == "failed"}
        assert expected <= failed, f"expected {expected} to fail, failed: {failed}"
    finally:
        user.podman("rm", "-f", container)
        user.podman("rmi", "-f", tag)


def _blobs_with(archive: Path, marker: bytes) -> list[str]:
    """The members of an OCI archive (layers decompressed) whose bytes hold ``marker``."""
    found = []
    with tarfile.open(archive) as outer:
        for member in outer.getmembers():
            if not member.isfile():
                continue
            data = outer.extractfile(member).read()
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            if marker in data:
                found.append(member.name)
    return found


SECRET_STACK = """\
name: podman-secret-probe
base: {image: imagekit/debian:bookworm, distro: debian12}
components:
  python: {pip: ["six==1.16.0"]}
checks:
  - {name: six, run: "python3 -c 'import six; print(six.__version__)'", expect: "1.16.0"}
"""
# What a leak looks like: a step that copies the secret into the image.
LEAKING = """\
FROM imagekit/debian:bookworm
RUN --mount=type=secret,id=ca-bundle grep -q MARKER /run/secrets/ca-bundle && cp /run/secrets/ca-bundle /leaked.pem
"""


def test_ca_bundle_reaches_pip_as_a_secret_and_never_a_podman_layer(user, podman_base):
    marker = f"imagekit-podman-marker-{os.getpid()}-{time.time_ns()}"
    work = user.dir("secret")
    bundle = work / "bundle.pem"
    bundle.write_text(Path("/etc/ssl/certs/ca-certificates.crt").read_text() + f"\n# {marker}\n")
    bundle.chmod(0o644)
    (work / "stack.yaml").write_text(SECRET_STACK)
    proc = user.imagekit("build", "--engine", "podman", str(work / "stack.yaml"), "--ca-bundle", str(bundle),
                         "--no-cache", "--check", "--log-dir", str(work), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)[0]
    assert result["check"]["ok"], result["check"]          # pip installed six through the bundle
    archive = work / "image.tar"
    saved = user.podman("save", "--format", "oci-archive", "-o", str(archive), result["build"]["image_id"])
    assert saved.returncode == 0, saved.stderr
    assert _blobs_with(archive, marker.encode()) == [], "the CA bundle leaked into the Podman image"
    config = json.loads(user.podman("image", "inspect", "--format", "{{json .Config.Env}}",
                                    result["build"]["image_id"]).stdout)
    assert not any("PIP_CERT" in e for e in config or [])

    # The same search finds the bundle in an image whose build copies the secret into a layer.
    (work / "Dockerfile").write_text(LEAKING.replace("MARKER", marker))
    leak = user.podman("build", "--pull=never", "--network=host", "--no-cache", "-q", "--secret",
                       f"id={render.CA_SECRET_ID},src={bundle}", "-t", "imagekit-test/leak", str(work))
    assert leak.returncode == 0, leak.stderr
    try:
        leaked = work / "leak.tar"
        assert user.podman("save", "--format", "oci-archive", "-o", str(leaked), "imagekit-test/leak").returncode == 0
        assert _blobs_with(leaked, marker.encode()), "the search missed a bundle copied into a layer"
    finally:
        user.podman("rmi", "-f", "imagekit-test/leak", "imagekit/podman-secret-probe:latest")


def test_a_failing_podman_step_names_its_command_and_last_lines(user, podman_base):
    work = user.dir("broken")
    (work / "stack.yaml").write_text("name: podman-broken\nbase: {image: imagekit/debian:bookworm, distro: debian12}\n"
                                     "components:\n  python: {packages: [doesnotexist]}\n")
    # Past the package look-up (which refuses the name before any step): the failing step itself.
    proc = user.imagekit("build", "--engine", "podman", str(work / "stack.yaml"), "--log-dir", str(work),
                         "--no-package-check")
    assert proc.returncode == 1
    assert "step: [" in proc.stderr and "python3-doesnotexist" in proc.stderr and "apt-get" in proc.stderr
    assert "Unable to locate package python3-doesnotexist" in proc.stderr
    assert "full log:" in proc.stderr and (work / "podman-broken-runtime.log").is_file()
    assert user.podman("image", "exists", "imagekit/podman-broken:latest").returncode == 1


def test_no_subordinate_ids_is_one_error_naming_the_fix_before_any_build(user):
    """``nobody`` has no /etc/subuid or /etc/subgid range: the build stops before it starts."""
    work = user.dir("nosubids")
    work.chmod(0o777)
    proc = user.run([*user.imagekit_argv, "build", "--engine", "podman", "debian-mpi"],
                    user="nobody", env={"HOME": str(work), "XDG_RUNTIME_DIR": str(work)}, cwd=work)
    assert proc.returncode == 3, proc.stderr
    assert "subordinate" in proc.stderr and "nobody" in proc.stderr
    assert "usermod --add-subuids" in proc.stderr and "--add-subgids" in proc.stderr
    assert "Traceback" not in proc.stderr and "building" not in proc.stderr
    assert len([l for l in proc.stderr.splitlines() if l.strip()]) <= 2, proc.stderr
    assert not (work / "build").exists(), "nothing is written before the check"
