"""Every check of every shipped stack catches a broken image, including the checks that need CUDA, a GPU or a fabric.

These run against STUBS. The real components of the CUDA stacks (CUDA, gdrcopy,
NVIDIA's NCCL, upstream UCX/PMIx/OpenMPI builds, nccl-tests, PyTorch,
DOCA OFED) and a GPU or RDMA fabric cannot exist on this machine (no GPU, no
NVIDIA registry or GitHub). So the real offline image gets stand-ins that print
the output formats documented by the real tools (see stub_image.py: each format
and its source), plus real ELF libraries with the vendors' SONAMEs; the real
Debian OpenMPI still starts the ranks. Every collected check must pass on the
good stub image and fail on the broken one (wrong versions, a CPU-only torch,
missing libraries and binaries, baked-in keys). What stubs
cannot show is that a given real system prints these formats: that is what
``imagekit check IMAGE --with gpu,fabric`` on a real node is for.

Checks run with ``assume=("gpu", "fabric")``: the hardware checks run without
device flags, so that they are reported as passed or failed, never as not run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest

from helpers import stub_image
from imagekit import checks, stack
from imagekit.checks import runner

pytestmark = pytest.mark.engine

# Stacks built and checked for real (green and red): debian-mpi in tests/checks/test_runner.py,
# debian-cuda in tests/components/test_cuda_image.py, debian-cuda12 in
# tests/components/test_cuda12_image.py, debian-pytorch in tests/components/test_pytorch_image.py. Checks only they bring run there, except the hardware
# checks (a GPU, a fabric), which no image here can pass: those run on the stubs.
REAL_STACKS = {"debian-mpi", "debian-cuda", "debian-cuda12", "debian-pytorch"}
# Registry-based stacks with the same components and versions as a real one, on NVIDIA's base:
# their checks are that real image's (the production pytorch stack tracks debian-pytorch: torch,
# CUDA 13.2, NCCL 2.30.7, Open MPI 5 and PMIx 5, UCX). The stubs play the nccl-tests stacks' MPI.
PLAYED_BY_REAL = {"pytorch": "debian-pytorch"}
OFFLINE_STACK = "debian-mpi"
# The stubs are x86_64 programs on the x86_64 offline image, so they play x86_64 variants. The arm64
# ones (debian-grace, the arm64 variants of the Debian stacks) are built and checked for real under
# emulation in tests/test_arm64_builds.py.
STUB_ARCH = "x86_64"

# Checks no container image can exercise, and why.
EXCLUDED = {
    "gdrcopy.device": "tests the host's character device /dev/gdrdrv (gdrdrv kernel module); a container's /dev "
                      "is a fresh tmpfs at run time, so no image can carry it",
    "image.ldd_closure": "a library closure needs the real binaries: checked green and red on the real "
                         "debian-mpi and debian-cuda images (test_runner.py, test_cuda_image.py)",
    "nccl-tests.loads_nccl": "which NCCL real nccl-tests binaries load: checked green and red on the real "
                             "debian-cuda image (test_cuda_image.py)",
}


@dataclass
class Entry:
    spec: dict
    stacks: set[str] = field(default_factory=set)   # stack files whose variants bring this check
    run_id: str = ""

    @property
    def id(self) -> str:
        return self.spec["id"]

    def run_spec(self) -> dict:
        return {**self.spec, "id": self.run_id}


def collect() -> tuple[list[Entry], list[Entry]]:
    """All checks of all shipped stack variants, and those only the real offline image can pass.

    De-duplicated by id + kind + value + expectation: the same command is expected to print a
    different version in different stacks (``ucx_info -v``: Debian's 1.13.1 offline, 1.20.1 in the
    CUDA stacks), and each expectation is a check of its own.
    """
    groups: dict[tuple, dict[str, Entry]] = {}
    for path in stack.shipped():
        for variant in stack.load_all(path):
            if variant.base.arch != STUB_ARCH:
                continue
            for c in checks.stack_checks(variant):
                spec = c.as_dict()
                key = (spec["id"], spec["kind"], spec[spec["kind"]])
                entry = groups.setdefault(key, {}).setdefault(json.dumps(spec, sort_keys=True), Entry(spec))
                entry.stacks.add(path.stem)
    entries = [e for group in groups.values() for e in group.values()]
    per_id: dict[str, int] = {}
    for e in entries:
        per_id[e.id] = per_id.get(e.id, 0) + 1
    for e in entries:
        e.run_id = e.id if per_id[e.id] == 1 else f"{e.id}@{min(e.stacks)}"
    # Where stacks disagree on what one command must print, the stub image plays the CUDA stacks;
    # the offline stack's expectation is the real image's (tests/checks/test_runner.py).
    real = REAL_STACKS | set(PLAYED_BY_REAL)
    offline_only = [e for group in groups.values() for e in group.values()
                    if e.stacks <= real and not e.spec.get("needs")]
    return entries, offline_only


ENTRIES, OFFLINE_ONLY = collect()


@pytest.fixture(scope="module")
def stub_images(mpi_image, tmp_path_factory):
    """(good, broken): the offline image + stubs of GOOD facts; the good one + BROKEN facts and removals."""
    work = tmp_path_factory.mktemp("stub-images")
    (work / "libs").mkdir()
    libs = stub_image.compile_libraries(work / "libs", stub_image.GOOD.nccl_code)
    good, broken = "imagekit-test/stub-checks:good", "imagekit-test/stub-checks:broken"
    try:
        (work / "good").mkdir()
        stub_image.build(mpi_image, good, stub_image.GOOD, stub_image.SETUP_SCRIPT, work / "good", libs,
                         env={"PATH": "/usr/local/nccl-tests/bin:/usr/local/nvbandwidth/bin:$PATH"})
        (work / "broken").mkdir()
        stub_image.build(good, broken, stub_image.BROKEN, stub_image.BREAK_SCRIPT, work / "broken")
        yield good, broken
    finally:
        stub_image.remove(broken, good)


def test_collection_covers_the_components_that_cannot_be_built_here():
    ids = {e.id for e in ENTRIES}
    components = {i.split(".")[0] for i in ids}
    assert {"cuda", "gdrcopy", "ucx", "pmix", "openmpi", "nccl", "nccl-tests", "pytorch", "ofed"} <= components
    assert {"cuda.driver", "ucx.cuda", "ucx.verbs", "ofed.devices", "pytorch.cuda", "pytorch.nccl_version",
            "nccl-tests.all_reduce", "openmpi.cuda", "ucx.mt", "ucx.cuda_build"} <= ids
    assert len({e.run_id for e in ENTRIES}) == len(ENTRIES)


def test_excluded_names_only_checks_that_exist():
    ids = {e.id for e in ENTRIES}
    assert set(EXCLUDED) <= ids, f"EXCLUDED names checks no shipped stack has: {set(EXCLUDED) - ids}"
    assert all(reason.strip() for reason in EXCLUDED.values())


def test_checks_left_to_the_real_offline_image_are_in_it(mpi_image):
    """The offline stack's own expectations (e.g. UCX 1.13.1) are checked on the real image (checks/test_runner.py)."""
    assert OFFLINE_ONLY, "expected the offline and CUDA stacks to disagree on some versions"
    real = {json.dumps(s, sort_keys=True) for s in runner.checks_from_image(mpi_image)}
    missing = [e.run_id for e in OFFLINE_ONLY if OFFLINE_STACK in e.stacks
               and json.dumps(e.spec, sort_keys=True) not in real]
    assert not missing, f"not carried by the offline image, so checked nowhere: {missing}"


def test_every_check_passes_on_the_good_stub_image(stub_images):
    good, _ = stub_images
    entries = [e for e in ENTRIES if e.id not in EXCLUDED and e not in OFFLINE_ONLY]
    report = runner.run(good, [e.run_spec() for e in entries], assume=("gpu", "fabric"))
    outcomes = {o.id: o for o in report.outcomes}
    assert set(outcomes) == {e.run_id for e in entries}
    wrong = {i: (o.status, o.detail) for i, o in outcomes.items() if o.status != "passed"}
    assert not wrong, f"the stubs do not satisfy these checks: {wrong}"


def test_every_check_fails_on_the_broken_stub_image(stub_images):
    _, broken = stub_images
    entries = [e for e in ENTRIES if e.id not in EXCLUDED and e not in OFFLINE_ONLY]
    report = runner.run(broken, [e.run_spec() for e in entries], assume=("gpu", "fabric"))
    outcomes = {o.id: o for o in report.outcomes}
    assert set(outcomes) == {e.run_id for e in entries}
    missed = sorted(i for i, o in outcomes.items() if o.status != "failed")
    assert not missed, f"these checks did not catch the broken image: {missed}"
    assert all(o.detail for o in outcomes.values()), "a failure must show what went wrong"


@pytest.mark.parametrize("hcas", [("mlx5_0", "mlx5_1"), ("ibp65s0",), ("rocep65s0f0", "rocep65s0f1")])
def test_fabric_check_accepts_every_rdma_device_naming(hcas):
    """``ofed.devices`` counts devices in rdma-core's documented ``-l`` format: hosts name them mlx5_N (OFED)
    or, with rdma-core's persistent naming, ibp*/rocep*; "0 HCAs found:" must fail."""
    expect = next(e.spec["expect"] for e in ENTRIES if e.id == "ofed.devices")
    assert re.search(expect, stub_image.ibv_devinfo_list(hcas))
    assert not re.search(expect, stub_image.ibv_devinfo_list(()))
