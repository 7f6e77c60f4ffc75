"""openmpi `pmi2: true`, for real: `srun --mpi=pmi2` wires the ranks of an image started by Pyxis.

Open MPI 4.1.4 is built from the site mirror against Debian's libpmi2 (Slurm's PMI-2 client), on
Debian 12 and on Debian 13 (gcc 14, and the library renamed libpmi2-0t64), exported to a ``.sqsh``
and started through Pyxis and Enroot on the session's Slurm (Debian 12's 22.05, whose ``mpi_pmi2``
plugin is the PMI-2 server; PMI-2's wire protocol lets Debian 13's 24.11 client talk to it). Red:
the same image without Open MPI's ``s2`` component, which the ``openmpi.pmi2`` check and the launch
both catch. Review cuda-recipes-2 finding 17 (a PMI-2 fallback for sites whose Slurm has no pmix
plugin).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.broken_images import committed_copy

from imagekit import build, stack
from imagekit.checks import runner
from imagekit.engines import docker as engine

# Open MPI 4.1 from source on Debian 12 and 13, cold: CI's heavy tier (tests/helpers/heavy_plugin.py).
pytestmark = [pytest.mark.engine, pytest.mark.slurm, pytest.mark.heavy]

STACK = """\
name: imagekit-test-pmi2-{distro}
description: Open MPI 4.1.4 against Slurm's libpmi2 (srun --mpi=pmi2)
base:
  image: imagekit/debian:{release}
  distro: {distro}
components:
  openmpi: {{version: "4.1.4", ucx: false, pmi2: true}}
"""
# distro: (Debian release, the fixture that makes its imagekit/debian base)
RELEASES = {"debian12": ("bookworm", "base_image"), "debian13": ("trixie", "trixie_base")}
S2 = "/usr/local/openmpi/lib/openmpi/mca_pmix_s2.so"
RING_PASSED = "2 ranks, ring of 1048576 bytes and allreduce passed"


@pytest.fixture(scope="module", params=sorted(RELEASES))
def pmi2_image(request, site_mirror, tmp_path_factory) -> str:
    distro = request.param
    release, base_fixture = RELEASES[distro]
    request.getfixturevalue(base_fixture)
    path = tmp_path_factory.mktemp("pmi2-stack") / f"imagekit-test-pmi2-{distro}.yaml"
    path.write_text(STACK.format(distro=distro, release=release))
    logs = os.environ.get("IMAGEKIT_TEST_LOGS", "build/logs")
    return build.build(stack.load(str(path), mirror=str(site_mirror)), build.BuildRequest(log_dir=logs)).tags[0]


@pytest.fixture(scope="module")
def broken_image(pmi2_image) -> str:
    """The image without Open MPI's PMI-2 component (what a build without --with-pmi has)."""
    broken = pmi2_image.replace("imagekit/", "imagekit-test/").replace(":latest", "-broken:latest")
    tag = committed_copy(pmi2_image, broken, f"rm -f {S2}")
    yield tag
    subprocess.run([engine.docker_cli(), "rmi", "-f", tag], capture_output=True)


def sqsh(image: str, directory) -> str:
    out = directory / (image.split("/")[-1].replace(":", "-") + ".sqsh")
    proc = subprocess.run([sys.executable, "-m", "imagekit", "export", image, "--to", "enroot", "-o", str(out),
                           "--no-store"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return str(out)


def srun_pmi2(cluster, image_file: str) -> subprocess.CompletedProcess:
    return subprocess.run(["srun", "--mpi=pmi2", "-n", "2", f"--container-image={image_file}", "imagekit-mpi-ring"],
                          env={**os.environ, "SLURM_CONF": str(cluster.conf)}, cwd="/tmp", capture_output=True,
                          text=True, timeout=300)


def test_srun_mpi_pmi2_wires_two_ranks(cluster, pmi2_image, tmp_path):
    report = runner.run(pmi2_image, runner.checks_from_image(pmi2_image))
    assert report.failed == [], [(o.id, o.detail) for o in report.failed]
    assert {o.id: o.status for o in report.outcomes}["openmpi.pmi2"] == "passed"
    proc = srun_pmi2(cluster, sqsh(pmi2_image, tmp_path))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "rank 0 of 2" in out and "rank 1 of 2" in out and RING_PASSED in out, out


def test_without_the_s2_component_the_check_and_the_launch_fail(cluster, broken_image, tmp_path):
    report = runner.run(broken_image, runner.checks_from_image(broken_image))
    assert "openmpi.pmi2" in {o.id for o in report.failed}
    proc = srun_pmi2(cluster, sqsh(broken_image, tmp_path))
    out = proc.stdout + proc.stderr
    assert RING_PASSED not in out and "rank 1 of 2" not in out, out
