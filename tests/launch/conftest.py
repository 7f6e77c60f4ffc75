"""Fixtures for the launch tests: MPI images, a local Slurm, shellcheck.

``mpi_image`` (tests/conftest.py) is the offline stack's real image. Slurm tests start Debian's
Slurm on localhost; with ``CI`` set a missing Slurm or shellcheck is a failure,
never a skip.
"""

from __future__ import annotations

import os
import subprocess

import pytest

DOCKER = "/usr/bin/docker"


def _exists(tag: str) -> bool:
    return subprocess.run([DOCKER, "image", "inspect", tag], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def _build(tag: str, dockerfile: str) -> str:
    proc = subprocess.run([DOCKER, "build", "-q", "-t", tag, "-"], input=dockerfile, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env={**os.environ, "DOCKER_BUILDKIT": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:]
    return tag


@pytest.fixture(scope="session")
def no_sshd_image(base_image: str) -> str:
    """The minbase image re-tagged: no sshd (and no MPI)."""
    tag = "imagekit-test/no-sshd:latest"
    return tag if _exists(tag) else _build(tag, f"FROM {base_image}\nLABEL io.imagekit.test=no-sshd\n")


@pytest.fixture(scope="session")
def no_mpi_image(mpi_image: str) -> str:
    """sshd present, Open MPI's launchers removed: inside-out and preflight must refuse it."""
    tag = "imagekit-test/no-mpi-sshd:latest"
    if _exists(tag):
        return tag
    return _build(tag, f"FROM {mpi_image}\nRUN rm -f /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/orted "
                       "/usr/bin/orterun /usr/bin/mpirun.openmpi /usr/bin/mpiexec.openmpi\n")


@pytest.fixture(scope="session")
def local_slurm(cluster):
    """The session's real cluster (tests/conftest.py ``cluster``): Debian's Slurm with Pyxis."""
    return cluster


# Open MPI 5 from Debian 13's packages (openmpi 5.0.7, PMIx 5.0.7) with sshd: small, and its labels say
# Open MPI 5 as any imagekit image's do. The CUDA stacks ship Open MPI 5 too, but take far longer to build.
OMPI5_STACK = """\
name: launch-ompi5
description: Open MPI 5 (Debian 13's openmpi 5.0.7) with sshd, for the launch tests' distinct-host rings
base: {image: imagekit/debian:trixie, distro: debian13}
components:
  sshd:    {}
  ofed:    {flavor: inbox}
  ucx:     {source: distro}
  pmix:    {source: distro}
  openmpi: {source: distro, ucx: true, pmix: true}
"""


@pytest.fixture(scope="session")
def ompi5_image(trixie_base, tmp_path_factory) -> str:
    """imagekit/launch-ompi5:latest, built for real (cached layers make reruns fast)."""
    from imagekit import build, stack

    path = tmp_path_factory.mktemp("ompi5") / "launch-ompi5.yaml"
    path.write_text(OMPI5_STACK)
    logs = os.environ.get("IMAGEKIT_TEST_LOGS", "build/logs")
    return build.build(stack.load(str(path)), build.BuildRequest(log_dir=logs)).tags[0]
