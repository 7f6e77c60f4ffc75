"""Pyxis's own tests against imagekit's exports and importer, beside Pyxis's own import (issue 34).

Pyxis 0.24.0's bats tests (from the site mirror's tarball) run under the session's real cluster
(Slurm 22.05, Pyxis 0.24.0, Enroot 4.1.2) in three modes (tests/helpers/pyxis_suite.py): ``native``
(Pyxis's ``enroot import`` from a local registry), ``sqsh`` (imagekit's ``.sqsh`` files) and
``importer`` (imagekit's Pyxis importer on the plugstack line), as root and as the unprivileged
test user. Their images are offline stand-ins (tests/helpers/pyxis_standins.py). A test that passes
natively and fails in an imagekit mode fails this file; so does a native run that does not pass
the selected tests (the harness itself would be broken), and any of imagekit's own checks
(tests/export/imagekit_extra.bats) failing in an imagekit mode.

**Which tests.** A native start re-imports the image every time (14 s here against 5-6 s for the
imagekit modes, medians of bench/pyxis_modes.py at load 9), so the selection is the tests most tied
to what an export carries:
the image's ``PATH`` (``path``), ``WORKDIR`` (``workdir``), ``ENTRYPOINT`` (``entrypoint``), the
image's environment against the job's (``env``), and the file tree (``squashfs_image``'s
``os-release``), plus imagekit's three. Left out, and why:

- they need a writable root filesystem, which this cluster does not give
  (``ENROOT_ROOTFS_WRITABLE`` unset): ``writable``, ``exec``, ``mount_home``, the ``apt-get`` tests
  (``remap_root``'s, ``docker_image``'s tzdata), ``--container-save`` and ``manual execution of
  entrypoint``; they test Pyxis or Slurm rather than the image: ``invalid_args``, ``mounts``,
  ``unshare*``, ``name``, ``concurrency``, ``sbatch``; they need what this machine has not got:
  ``mpi*``, ``pytorch``, ``ssh`` (real frameworks, an sshd), ``centos:*``, GCR/GitLab images
  (no stand-in), the GPU tests;
- ``name``'s "cleanup after job cancellation" misreads its own output when the queue is busy;
- the rest of ``docker_image``, ``env_vars`` and ``squashfs_image`` repeat what the selection
  covers (one image name after another, or Pyxis's own options) at ~20 s a native start.
  The review pyxis-suite-3 ran 38 of them in every mode: none failed under imagekit where it
  passed natively.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers.enroot_conf import allows_http
from helpers.pyxis_standins import build_all, push_all
from helpers.pyxis_suite import MODES, PATH, Run, bats_argv, prepare, run_bats, unpack_tests

from imagekit.export import ExportRequest, export_image

pytestmark = [pytest.mark.engine, pytest.mark.slurm]

EXTRA_TESTS = ["imagekit: Debian /etc/profile and the image's ENV PATH",
               "imagekit: the image's profile.d script extends PATH",
               "imagekit: the image's PS4 runs nothing in root's traced login shell"]
ROOT_SELECTION = {
    "path.bats": ["rabbitmq PATH resolution"],
    "workdir.bats": ["container image workdir"],
    "entrypoint.bats": ["--container-entrypoint-log: nvidia/cuda"],
    "env.bats": ["--container-env forcing $LANG passthrough"],
    "squashfs_image.bats": ["Ubuntu 24.04 squashfs"],
    "imagekit_extra.bats": EXTRA_TESTS,
}
# As the user: bash takes PS4 from the environment for users (the G5 case is root's only).
USER_SELECTION = {
    "path.bats": ["rabbitmq PATH resolution"],
    "imagekit_extra.bats": EXTRA_TESTS[:2],
}
# The stand-ins the selections start.
USED = {"rabbitmq:3.8.3", "nvidia/pytorch:20.02-py3", "nvidia/cuda:12.5.1-runtime-ubuntu24.04", "ubuntu:22.04",
        "ubuntu:24.04", "imagekit-extra/debianpath:1", "imagekit-extra/profiled:1", "imagekit-extra/ps4:1"}
# Not started natively (a native start costs 3-4 imagekit ones): Enroot's own import keeps Debian's
# PATH reset (what imagekit's profile script is for), and a login shell with no imagekit script gives
# PS4 nothing back; tests/test_login_env.py shows both without the script, in Docker. The profile.d
# case is the one where imagekit must match Enroot's own import, so it runs in every mode.
NOT_NATIVE = {EXTRA_TESTS[0], EXTRA_TESTS[2]}
# squashfs_image imports with Enroot itself and starts the file by its path: the importer is not
# asked, so the importer mode would only repeat the native run.
NOT_IMPORTER = {"Ubuntu 24.04 squashfs"}
LEFT_OUT = {"native": NOT_NATIVE, "sqsh": set(), "importer": NOT_IMPORTER}


@dataclass
class Suite:
    dir: Path
    registry: str
    tests: Path
    sqsh: dict[str, Path]
    cluster: object
    wrapper: Path
    log: Path
    runs: dict[tuple[str, str], Run] = field(default_factory=dict)

    def run(self, mode: str, selection: dict[str, list[str]], user=None) -> Run:
        who = user.name if user else "root"
        tests = prepare(self.tests, self.dir / f"tests-{mode}", mode, self.registry, self.sqsh, set(self.sqsh))
        cwd = self.dir / f"cwd-{mode}-{who}"
        cache = self.dir / f"cache-{who}"
        for d in (cwd, cache):
            d.mkdir(mode=0o700, exist_ok=True)
            if user is not None:
                os.chown(d, user.uid, user.gid)
        env = {"PATH": PATH, "LANG": "C.UTF-8", "TERM": "dumb", "SLURM_CONF": str(self.cluster.conf),
               "XDG_CACHE_HOME": str(cache)}
        if user is None:
            env["HOME"] = "/root"
        argv = bats_argv(tests, selection)
        with allows_http():
            if mode == "importer":
                self.cluster.pyxis(importer=str(self.wrapper))
            try:
                result = run_bats(argv, cwd, env, user)
            finally:
                if mode == "importer":
                    self.cluster.pyxis()
        self.runs[(mode, who)] = result
        print(f"pyxis suite: {mode} as {who}: {len(result.results)} tests in {result.seconds:.0f} s", flush=True)
        return result


@pytest.fixture(scope="module")
def suite(cluster, registry, base_image, other_python, site_mirror, test_user):
    if shutil.which("bats") is None:
        pytest.fail("bats is not installed (bash scripts/setup-cluster.sh installs Debian's bats)")
    directory = Path(tempfile.mkdtemp(prefix="imagekit-pyxis-suite-", dir="/var/tmp"))
    os.chmod(directory, 0o755)
    try:
        started = time.monotonic()
        tags = {name: tag for name, tag in build_all(base_image).items() if name in USED}
        push_all(tags, registry)
        print(f"pyxis suite: stand-ins built and pushed in {time.monotonic() - started:.0f} s", flush=True)
        sqsh_dir = directory / "sqsh"
        sqsh_dir.mkdir(mode=0o755)
        sqsh = {}
        for name, tag in tags.items():
            out = sqsh_dir / (name.replace("/", "_").replace(":", "_") + ".sqsh")
            export_image(tag, ExportRequest("enroot"), out, store=False)
            out.chmod(0o644)
            sqsh[name] = out
        print(f"pyxis suite: set up in {time.monotonic() - started:.0f} s", flush=True)
        tests = unpack_tests(site_mirror / "pyxis-0.24.0.tar.gz", directory / "pyxis-tests")
        log = directory / "importer.log"
        log.touch()
        log.chmod(0o666)
        wrapper = other_python.importer(directory, {}, log)
        yield Suite(directory, registry, tests, sqsh, cluster, wrapper, log)
    finally:
        cluster.pyxis()
        shutil.rmtree(directory, ignore_errors=True)


def _check(suite: Suite, selection: dict[str, list[str]], user=None) -> dict[str, Run]:
    runs = {mode: suite.run(mode, {f: [n for n in names if n not in LEFT_OUT[mode]] for f, names in selection.items()},
                            user) for mode in MODES}
    pyxis = [n for f, names in selection.items() if f != "imagekit_extra.bats" for n in names]
    extra = selection.get("imagekit_extra.bats", [])
    native = runs["native"]
    problems = []
    broken = [n for n in pyxis + extra if n not in NOT_NATIVE and native.results.get(n) != "pass"]
    if broken:
        problems.append(f"the native run did not give the expected results for {broken}: the harness or the "
                        f"cluster is broken\n{native.tap}")
    for mode in ("sqsh", "importer"):
        asked = [n for n in pyxis if n not in LEFT_OUT[mode]]
        diverged = [n for n in asked if native.results.get(n) == "pass" and runs[mode].results.get(n) != "pass"]
        ours = runs[mode].failed(extra)
        if diverged or ours:
            problems.append(f"{mode}: fails where Pyxis's own import passes: {diverged}; imagekit's checks "
                            f"failing: {ours}\n{runs[mode].tap}\nimporter log:\n{suite.log.read_text()[-3000:]}")
    assert not problems, "\n\n".join(problems)
    return runs


def test_pyxis_own_tests_pass_under_imagekit_wherever_they_pass_natively_as_root(suite):
    runs = _check(suite, ROOT_SELECTION)
    counts = {m: sum(v == "pass" for v in r.results.values()) for m, r in runs.items()}
    assert counts == {"native": 6, "sqsh": 8, "importer": 7}, counts


def test_pyxis_own_tests_pass_under_imagekit_wherever_they_pass_natively_as_a_user(suite, test_user):
    runs = _check(suite, USER_SELECTION, test_user)
    counts = {m: sum(v == "pass" for v in r.results.values()) for m, r in runs.items()}
    assert counts == {"native": 2, "sqsh": 3, "importer": 3}, counts
