"""What the tests of the built CUDA images (debian-cuda, debian-cuda12, debian-pytorch) share: the
checks no image here can pass, running checks, and image sizes (broken copies: ``broken_images``)."""

from __future__ import annotations

import subprocess

from imagekit.checks import runner
from imagekit.engines import docker as engine

# Checks that need a GPU or an RDMA fabric: "not run" here, run where `--with gpu,fabric` is offered.
HARDWARE_CHECKS = {"cuda.driver", "ucx.cuda", "nccl-tests.all_reduce", "gdrcopy.device", "ofed.devices", "openmpi.cuda_ring",
                   "ucx.verbs"}


def check_outcomes(image: str, specs) -> dict:
    """Each check's outcome on ``image``, by id."""
    return {o.id: o for o in runner.run(image, specs).outcomes}


def green_but_hardware(image: str, more_hardware: frozenset[str] = frozenset()) -> dict:
    """Run the checks ``image`` carries: none fails, and exactly the hardware checks (and
    ``more_hardware``, those its own components add) are not run."""
    result = check_outcomes(image, runner.checks_from_image(image))
    bad = {i: o.detail for i, o in result.items() if o.status == "failed"}
    assert not bad, bad
    assert {i for i, o in result.items() if o.status == "not-run"} == HARDWARE_CHECKS | more_hardware
    return result


def image_sizes(*images: str) -> dict[str, int]:
    """Each image's size in bytes, as the engine reports it (what `docker images` shows)."""
    sizes = {}
    for image in images:
        out = subprocess.run([engine.docker_cli(), "image", "inspect", "-f", "{{.Size}}", image],
                             capture_output=True, text=True, check=True)
        sizes[image] = int(out.stdout)
    return sizes
