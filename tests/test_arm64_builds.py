"""arm64 for real on this x86_64 machine: debian-mpi built for linux/arm64 under emulation
(qemu-user-static through binfmt_misc), its checks, and its MPI ring in arm64 containers.

All heavy: the arm64 base (~6 min cold) and debian-mpi's apt steps run through QEMU on 2 cores
(bench/arch.py measures the build against the native amd64 one). Warm, they are cached layers and
the tests take about a minute.

debian-grace (the CUDA/PyTorch Grace stack) is not built here: under emulation its aarch64 wheels
(torch 2.15.0, CUDA 13.2, NCCL) are unpacked by an emulated pip, over an hour on 2 cores, and its
install ran this machine's disk out (Errno 28 in the pip step, 2026-11-27). It is rendered and its
stack checked in the fast tier; it builds on a native arm64 runner (docs/multi-arch.md).
"""

from __future__ import annotations

import subprocess

import pytest

from imagekit import checks
from imagekit.checks import runner
from imagekit.engines import docker as engine
from imagekit import stack as stack_mod
from imagekit.launch import inside_out, plan, targets
from imagekit.launch.session import LaunchRequest

pytestmark = [pytest.mark.engine, pytest.mark.heavy]


def test_debian_mpi_for_arm64_is_an_arm64_image_beside_the_amd64_one(mpi_image_arm64, mpi_image):
    """Builds debian-mpi for linux/arm64 (emulated). Its tag carries the arch; the amd64 image
    that every other test uses keeps its own tag and architecture."""
    assert mpi_image_arm64 == "imagekit/debian-mpi:latest-arm64" and mpi_image == "imagekit/debian-mpi:latest"
    arm, amd = engine.inspect(mpi_image_arm64), engine.inspect(mpi_image)
    assert (arm.attrs["Architecture"], amd.attrs["Architecture"]) == ("arm64", "amd64")
    assert arm.labels["io.imagekit.arch"] == "aarch64"
    pinned = stack_mod.load("debian-mpi", platform="linux/arm64").get("nccl").version
    assert arm.labels["io.imagekit.component.nccl.version"] == pinned, "the stack's pin, as loaded for aarch64"
    # The runtime image has no file(1): mpirun's ELF header says its machine (183 is EM_AARCH64).
    out = subprocess.run([engine.docker_cli(), "run", "--rm", mpi_image_arm64, "sh", "-c",
                          "uname -m; python3 -c \"h = open('/usr/bin/mpirun', 'rb').read(20); "
                          "print('machine', int.from_bytes(h[18:20], 'little'))\"; "
                          "python3 -c 'import mpi4py; print(mpi4py.__version__)'"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["aarch64", "machine 183"], out.stdout


def test_its_checks_pass_in_an_arm64_container(mpi_image_arm64):
    """Every check of the stack (the mpi4py ring over Open MPI with 2 ranks among them) in a
    container of the arm64 image."""
    stack = stack_mod.load("debian-mpi", platform="linux/arm64")
    report = runner.run(mpi_image_arm64, checks.stack_checks(stack, "runtime"))
    assert report.ok, [(o.id, o.detail) for o in report.failed]
    ring = next(o for o in report.outcomes if o.id == "stack.mpi4py-ring")
    assert ring.status == "passed"


def test_the_mpi_ring_runs_across_arm64_containers(mpi_image_arm64, capfd):
    """imagekit launch inside-out with 2 arm64 worker containers (sshd, per-job keys, mpirun over
    the private network), each rank an emulated arm64 process."""
    job = plan.job(targets.of("inside-out"), LaunchRequest(
        mpi_image_arm64, ("sh", "-c", "uname -m; python3 -m mpi4py.bench ringtest"), preflight=False,
        options={"nodes": 2, "ready_timeout": 300}))
    assert inside_out.execute(job, log=lambda m: None) == 0
    out = capfd.readouterr().out
    assert out.count("aarch64") == 2 and "time for 1 loops" in out, out
