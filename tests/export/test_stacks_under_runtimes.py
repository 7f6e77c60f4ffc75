"""Every shipped stack's exports, started the way a cluster starts them.

The runtimes are the real ones, built from their sources by ``scripts/setup-cluster.sh``:
Enroot 4.1.2, Pyxis 0.24.0 in Debian's Slurm 22.05 (the session's single-node cluster,
``tests/conftest.py: cluster``) and Apptainer 1.4.0. For each shipped stack that builds here
(``debian-mpi``, ``debian-cuda``, ``debian-cuda12``), the ``.sqsh`` of ``imagekit export`` (default preset and
``--preset enroot``) starts under ``srun --container-image`` as root and as an unprivileged user,
under ``enroot create`` + ``enroot start``, and with Pyxis ``use_squashfuse=1``; the ``.sif`` under
``apptainer exec``/``run``/``inspect``/``sign``/``verify``. Inside each, every tool the stack puts on
PATH resolves where Docker finds it, and the image's declared environment is what it declares,
through Enroot's login shell too: the same under every runtime.

This machine has no GPU: the CUDA images, which ask for GPUs (``NVIDIA_VISIBLE_DEVICES=all``), start
with ``NVIDIA_VISIBLE_DEVICES=void`` as on a GPU-less node. ``/dev/fuse`` here is root's only, so
squashfuse (Pyxis ``use_squashfuse``) runs as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from helpers.runtimes import Declared, differences, parse, probe_script

from imagekit.components.openmpi import NO_FABRIC_ENV

pytestmark = [pytest.mark.engine, pytest.mark.slurm]

STACKS = ("debian-mpi", "debian-cuda", "debian-cuda12")
# The session fixture that builds each shipped stack's images; the CUDA ones give (runtime, devel).
BUILT_BY = {"debian-mpi": "mpi_image", "debian-cuda": "cuda_images", "debian-cuda12": "cuda12_images"}
PRESETS = ("fast", "enroot")          # imagekit's default, and Enroot's own squash options
VOID = {"NVIDIA_VISIBLE_DEVICES": "void"}
# No fabric here: UCX (the CUDA image asks for pml ucx) may use shared memory and TCP.
NO_FABRIC = dict(kv.split("=", 1) for kv in NO_FABRIC_ENV.split())


class Exports:
    """One shipped stack's runtime image, what it declares, and its exports (readable by every user)."""

    def __init__(self, name: str, image: str, directory: Path) -> None:
        self.name, self.image = name, image
        self.declared = Declared.read(image)
        self.gpus = self.declared.env.get("NVIDIA_VISIBLE_DEVICES") not in (None, "", "void")
        self.overrides = VOID if self.gpus else {}
        self.sqsh = {p: self._export(directory, "enroot", p) for p in PRESETS}
        self.sif = self._export(directory, "sif", None)

    def _export(self, directory: Path, fmt: str, preset: str | None) -> Path:
        out = directory / f"{self.name}{'-' + preset if preset else ''}.{'sqsh' if fmt == 'enroot' else 'sif'}"
        argv = [sys.executable, "-m", "imagekit", "export", self.image, "--to", fmt, "-o", str(out), "--no-store"]
        proc = subprocess.run(argv + (["--preset", preset] if preset else []), capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        os.chmod(out, 0o644)
        return out

    def expected(self, **extra: str) -> dict[str, str]:
        return self.declared.expected_env({**self.overrides, **extra})

    @property
    def tools(self) -> list[str]:
        return sorted(self.declared.tools)


@pytest.fixture(scope="session")
def export_dir():
    path = Path(tempfile.mkdtemp(prefix="imagekit-runtimes-", dir="/var/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# The CUDA stacks' cold builds are CI's heavy tier (tests/helpers/heavy_plugin.py).
@pytest.fixture(scope="session", params=[s if s == "debian-mpi" else pytest.param(s, marks=pytest.mark.heavy)
                                         for s in STACKS])
def shipped(request, export_dir) -> Exports:
    built = request.getfixturevalue(BUILT_BY[request.param])
    image = built if isinstance(built, str) else built[0]
    return Exports(request.param, image, export_dir)


def srun(cluster, user, argv: list[str], env: dict[str, str] | None = None, timeout: int = 300):
    """``srun`` on the session's cluster, as root (``user`` None) or as the test user."""
    values = {"SLURM_CONF": str(cluster.conf), **(env or {})}
    if user is None:
        return subprocess.run(["srun", *argv], env={**os.environ, **values}, cwd="/tmp", capture_output=True,
                              text=True, timeout=timeout)
    return user.run(["srun", *argv], env=values, timeout=timeout, stderr=subprocess.PIPE)


def pyxis_argv(exports: Exports, sqsh: Path, command: list[str], extra: list[str] = ()) -> list[str]:
    # Pyxis passes a job variable into the container only when --container-env names it.
    env = ["--container-env=" + ",".join(exports.overrides)] if exports.overrides else []
    return [f"--container-image={sqsh}", *env, *extra, *command]


def check_seen(exports: Exports, output: str, where: str, **extra: str) -> None:
    seen = parse(output)
    assert seen.env, f"{where}: the probe printed no environment:\n{output[-2000:]}"
    wrong = differences(exports.expected(**extra), seen, exports.declared)
    assert not wrong, f"{exports.name} under {where}:\n  " + "\n  ".join(wrong)


# ---------------------------------------------------------------- Pyxis (srun --container-image)


@pytest.mark.parametrize("as_user", [False, True], ids=["root", "user"])
@pytest.mark.parametrize("preset", PRESETS)
def test_pyxis_gives_the_declared_environment_and_tools(cluster, test_user, shipped, preset, as_user):
    """srun --container-image=X.sqsh: Enroot's login shell runs Debian's /etc/profile, which resets PATH;
    the image keeps its PATH and every declared variable, for root and for a user."""
    user = test_user if as_user else None
    proc = srun(cluster, user, pyxis_argv(shipped, shipped.sqsh[preset], ["sh", "-c", probe_script(shipped.tools)]),
                env=shipped.overrides)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_seen(shipped, proc.stdout, f"Pyxis ({preset} preset, {'user' if as_user else 'root'})")


@pytest.mark.parametrize("as_user", [False, True], ids=["root", "user"])
def test_srun_mpi_pmix_wires_two_ranks(cluster, test_user, shipped, as_user):
    """srun --mpi=pmix -n 2: both ranks get their rank from Slurm's PMIx server through Enroot's PMI hook,
    pass 1 MiB round a ring and allreduce (imagekit-mpi-ring needs no GPU)."""
    user = test_user if as_user else None
    proc = srun(cluster, user, ["--mpi=pmix", "-n", "2", *pyxis_argv(shipped, shipped.sqsh["fast"],
                                                                      ["imagekit-mpi-ring"])],
                env={**shipped.overrides, **NO_FABRIC})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "rank 0 of 2" in out and "rank 1 of 2" in out, out
    assert "2 ranks, ring of 1048576 bytes and allreduce passed" in out, out


def test_pyxis_squashfuse_starts_straight_from_the_file(cluster, shipped):
    """use_squashfuse=1: no unpacked copy; Enroot's 4.x permissions (fixperms) show here."""
    cluster.pyxis(squashfuse=True)
    try:
        proc = srun(cluster, None, pyxis_argv(shipped, shipped.sqsh["fast"],
                                              ["sh", "-c", "grep -q ' / overlay ' /proc/mounts && echo OVERLAY; "
                                               + probe_script(shipped.tools)]), env=shipped.overrides)
    finally:
        cluster.pyxis()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OVERLAY" in proc.stdout  # squashfuse below an overlay, not an unpacked root
    check_seen(shipped, proc.stdout, "Pyxis use_squashfuse=1")


def test_pyxis_lets_the_image_win_unless_container_env_names_it(cluster, shipped):
    """A job variable the image also declares: the image's value, unless --container-env=NAME; and the
    user's value survives the login shell (the profile script restores what the runtime gave)."""
    # Not a PMIX_* variable: any of those in a job without --mpi=pmix makes Enroot's Slurm hook bind
    # PMIx directories that do not exist, and the container does not start.
    job_env = {**shipped.overrides, "LANG": "C", "PATH": "/job/bin:" + os.environ["PATH"]}
    probe = ["sh", "-c", probe_script([])]
    plain = srun(cluster, None, pyxis_argv(shipped, shipped.sqsh["fast"], probe), env=job_env)
    assert plain.returncode == 0, plain.stderr
    seen = parse(plain.stdout).env
    assert seen["LANG"] == shipped.declared.env["LANG"] and seen["PATH"] == shipped.declared.env["PATH"]
    named = srun(cluster, None, pyxis_argv(shipped, shipped.sqsh["fast"], probe,
                                           ["--container-env=LANG,PATH"]), env=job_env)
    assert named.returncode == 0, named.stderr
    seen = parse(named.stdout).env
    assert seen["LANG"] == "C" and seen["PATH"].startswith("/job/bin:")


# ---------------------------------------------------------------- Enroot (create + start)


def enroot(user, argv: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    if user is None:
        return subprocess.run(["enroot", *argv], capture_output=True, text=True, cwd="/tmp", timeout=timeout)
    return user.run(["enroot", *argv], timeout=timeout, stderr=subprocess.PIPE)


@pytest.mark.parametrize("as_user", [False, True], ids=["root", "user"])
def test_enroot_create_and_start(test_user, shipped, as_user):
    user = test_user if as_user else None
    name = f"imagekit-test-{uuid.uuid4().hex[:8]}"
    made = enroot(user, ["create", "--name", name, str(shipped.sqsh["enroot"])])
    assert made.returncode == 0, made.stdout + made.stderr
    try:
        env = [a for k, v in shipped.overrides.items() for a in ("--env", f"{k}={v}")]
        proc = enroot(user, ["start", *env, name, "sh", "-c", probe_script(shipped.tools)])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        check_seen(shipped, proc.stdout, f"enroot start ({'user' if as_user else 'root'})")
        # --env NAME=VALUE wins over the image's value, through the login shell too.
        over = enroot(user, ["start", *env, "--env", "PMIX_MCA_gds=from-the-user", name, "sh", "-c",
                             probe_script([])])
        assert parse(over.stdout).env.get("PMIX_MCA_gds") == "from-the-user", over.stdout + over.stderr
    finally:
        enroot(user, ["remove", "--force", name])


def test_without_the_profile_script_a_debian_image_loses_its_path(test_user, shipped):
    """The defect the profile script fixes, shown on the same image with the script removed: Debian's
    /etc/profile resets PATH in Enroot's login shell (a user's PATH even loses /usr/sbin)."""
    name = f"imagekit-test-{uuid.uuid4().hex[:8]}"
    made = enroot(test_user, ["create", "--name", name, str(shipped.sqsh["fast"])])
    assert made.returncode == 0, made.stderr
    try:
        env = [a for k, v in shipped.overrides.items() for a in ("--env", f"{k}={v}")]
        broken = enroot(test_user, ["start", "--rw", *env, name, "sh", "-c",
                                    "rm /etc/profile.d/00-imagekit-environment.sh && exec sh -l -c 'echo $PATH'"])
        assert broken.returncode == 0, broken.stderr
        assert broken.stdout.strip() != shipped.declared.env["PATH"]
        assert broken.stdout.strip().startswith("/usr/local/bin:/usr/bin:/bin")
    finally:
        enroot(test_user, ["remove", "--force", name])


# ---------------------------------------------------------------- Apptainer


def apptainer(argv: list[str], home: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"HOME": str(home)} if home else {})}
    return subprocess.run(["apptainer", "-s", *argv], capture_output=True, text=True, cwd="/tmp", env=env,
                          timeout=timeout)


def test_apptainer_exec_gives_the_declared_environment_and_tools(shipped):
    proc = apptainer(["exec", shipped.sif, "sh", "-c", probe_script(shipped.tools)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Apptainer starts no login shell and honours no NVIDIA_VISIBLE_DEVICES (only --nv brings GPUs):
    # the image's own value stays.
    seen = parse(proc.stdout)
    wrong = differences(shipped.declared.expected_env(), seen, shipped.declared)
    assert not wrong, "\n".join(wrong)


def test_apptainer_run_passes_arguments_and_inspect_shows_the_labels(shipped):
    # Arguments replace the image's CMD (Docker's rule). Apptainer's runscripts re-read them as shell
    # words in double quotes (its own SIFs do the same), so plain words with spaces pass whole.
    run = apptainer(["run", shipped.sif, "printf", "[%s]", "a", "b c"])
    assert run.returncode == 0 and run.stdout == "[a][b c]", run.stdout + run.stderr
    inspect = apptainer(["inspect", "--json", shipped.sif])
    assert inspect.returncode == 0, inspect.stderr
    import json

    labels = json.loads(inspect.stdout)["data"]["attributes"]["labels"]
    assert labels["io.imagekit.stack"] == shipped.name and labels["io.imagekit.target"] == "runtime"


def test_apptainer_sign_and_verify_with_a_test_key(shipped, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    key = apptainer(["key", "newpair", "--name", "imagekit test", "--email", "test@example.invalid",
                     "--comment", "test key", "--password", "", "--push=false"], home)
    assert key.returncode == 0, key.stdout + key.stderr
    signed = tmp_path / "signed.sif"
    shutil.copyfile(shipped.sif, signed)
    assert apptainer(["sign", str(signed)], home).returncode == 0
    verified = apptainer(["verify", str(signed)], home)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # One byte of the root filesystem changed: verify refuses the file.
    with open(signed, "r+b") as fh:
        fh.seek(os.path.getsize(signed) // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    assert apptainer(["verify", str(signed)], home).returncode != 0


# ---------------------------------------------------------------- Docker, for the record


def test_docker_gives_the_declared_environment(shipped):
    proc = subprocess.run(["/usr/bin/docker", "run", "--rm", shipped.image, "sh", "-c", probe_script(shipped.tools)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    wrong = differences(shipped.declared.expected_env(), parse(proc.stdout), shipped.declared)
    assert not wrong, "\n".join(wrong)
