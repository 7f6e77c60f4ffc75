"""Compatibility rules and component-level validation.

Every requirement a component declares, every component's own ``check_stack``
and every function in ``rules.CHECKS`` has a case here:
a violating stack must raise StackError naming the file, the line, the key and
a fix, and the same stack with the fix applied must load. Two guard tests fail
when a rule is added to rules.py without a case here.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from imagekit import components, rules
from imagekit.components import EXCLUSIVE_ROLES, Component, Requires, registry
from imagekit import stack as stack_mod
from helpers.stack_helpers import CUDA, DEBIAN, expect_error, line_of, write

UBUNTU24 = DEBIAN.replace("imagekit/debian:bookworm", "ubuntu:24.04").replace("debian12", "ubuntu24")
ROCKY = DEBIAN.replace("imagekit/debian:bookworm", "rockylinux:9").replace("debian12", "rockylinux9")


@dataclass
class Case:
    id: str
    header: str
    bad: str          # the components block (YAML lines below `components:`)
    needle: str       # text on the line the error must point at
    key: str
    fragments: tuple
    good: str         # the same stack, fixed as the hint says

    def yaml(self, body: str) -> str:
        return self.header + "components:\n" + body


def c(id, header, bad, needle, key, fragments, good):
    return Case(id, header, bad, needle, key, tuple(fragments), good)


GPU_MPI = ("  cuda: {}\n  openmpi: {version: '4.1.7', ucx: false}\n")

NEEDS_CASES = {
    ("openmpi", "pmix", "pmix"): c(
        "openmpi.pmix", DEBIAN, "  openmpi: {source: distro, ucx: false,\n            pmix: true}\n",
        "pmix: true", "components.openmpi.pmix",
        ["`openmpi.pmix: true` needs the `pmix` component", "matching the site's Slurm",
         "add `pmix` to components, or set `pmix: false` on openmpi"],
        "  openmpi: {source: distro, ucx: false, pmix: true}\n  pmix: {source: distro}\n"),
    ("openmpi", "ucx", "ucx"): c(
        "openmpi.ucx", DEBIAN, "  openmpi:\n    source: distro\n    ucx: true\n",
        "ucx: true", "components.openmpi.ucx",
        ["`openmpi.ucx: true` needs the `ucx` component", "set `ucx: false` on openmpi"],
        "  openmpi: {source: distro, ucx: true}\n  ucx: {source: distro, ofed: false}\n"),
    ("openmpi", "cuda", "cuda"): c(
        "openmpi.cuda", CUDA, "  openmpi: {version: '4.1.7', ucx: false, cuda: true}\n",
        "openmpi:", "components.openmpi.cuda",
        ["`openmpi.cuda: true` needs the `cuda` component", "add `cuda` to components"],
        "  openmpi: {version: '4.1.7', ucx: false, cuda: true}\n  cuda: {}\n"),
    ("ucx", "gdrcopy", "gdrcopy"): c(
        "ucx.gdrcopy", CUDA, "  cuda: {}\n  ucx: {version: '1.18.1', cuda: true, gdrcopy: true, ofed: false}\n",
        "ucx:", "components.ucx.gdrcopy",
        ["`ucx.gdrcopy: true` needs the `gdrcopy` component", "set `gdrcopy: false` on ucx"],
        "  cuda: {}\n  ucx: {version: '1.18.1', cuda: true, gdrcopy: true, ofed: false}\n"
        "  gdrcopy: {version: '2.4.4'}\n"),
    ("ucx", "cuda", "cuda"): c(
        "ucx.cuda", CUDA, "  ucx: {version: '1.18.1', ofed: false,\n        cuda: true}\n",
        "cuda: true", "components.ucx.cuda",
        ["`ucx.cuda: true` needs the `cuda` component"],
        "  ucx: {version: '1.18.1', ofed: false, cuda: true}\n  cuda: {}\n"),
    ("ucx", "rdma", "ofed"): c(
        "ucx.ofed", DEBIAN, "  ucx:\n    source: distro\n    ofed: true\n",
        "ofed: true", "components.ucx.ofed",
        ["`ucx.ofed: true` needs a component that provides `rdma`", "add `ofed` to components", "set `ofed: false` on ucx"],
        "  ucx: {source: distro, ofed: true}\n  ofed: {flavor: inbox}\n"),
    ("gdrcopy", "cuda", None): c(
        "gdrcopy", CUDA, "  gdrcopy: {version: '2.4.4'}\n",
        "gdrcopy:", "components.gdrcopy",
        ["`gdrcopy` needs the `cuda` component", "add `cuda` to components"],
        "  gdrcopy: {version: '2.4.4'}\n  cuda: {}\n"),
    ("nccl-tests", "nccl", None): c(
        "nccl-tests.nccl", CUDA, GPU_MPI + "  nccl-tests: {version: '2.17.6'}\n",
        "nccl-tests:", "components.nccl-tests",
        ["`nccl-tests` needs the `nccl` component"],
        GPU_MPI + "  nccl-tests: {version: '2.17.6'}\n  nccl: {source: repo, version: '2.23.4-1'}\n"),
    ("nccl-tests", "cuda", None): c(
        "nccl-tests.cuda", DEBIAN,
        "  nccl: {source: pypi, version: '2.21.5', cuda: '12'}\n  nccl-tests: {version: '2.17.6', mpi: false}\n",
        "nccl-tests:", "components.nccl-tests",
        ["`nccl-tests` needs the `cuda` component (nccl-tests is CUDA code)"],
        "  nccl: {source: pypi, version: '2.21.5', cuda: '12'}\n  nccl-tests: {version: '2.17.6', mpi: false}\n"
        "  cuda: {version: '12.4.1'}\n"),
    ("nccl-tests", "mpi", "mpi"): c(
        "nccl-tests.mpi", CUDA,
        "  cuda: {}\n  nccl: {source: repo, version: '2.23.4-1'}\n  nccl-tests:\n    version: '2.17.6'\n"
        "    mpi: true\n",
        "mpi: true", "components.nccl-tests.mpi",
        ["`nccl-tests.mpi: true` needs a component that provides `mpi` (built with MPI=1)", "`openmpi`", "set `mpi: false` on nccl-tests"],
        "  cuda: {}\n  nccl: {source: repo, version: '2.23.4-1'}\n  nccl-tests: {version: '2.17.6', mpi: false}\n"),
    ("pytorch", "python-env", None): c(
        "pytorch.python", CUDA, "  cuda: {}\n  pytorch: {version: '2.5.1'}\n",
        "pytorch:", "components.pytorch", ["`pytorch` needs a component that provides `python-env`", "add `python`"],
        "  cuda: {}\n  pytorch: {version: '2.5.1'}\n  python: {}\n"),
    ("pytorch", "cuda", None): c(
        "pytorch.cuda", DEBIAN, "  python: {}\n  pytorch: {version: '2.5.1'}\n",
        "pytorch:", "components.pytorch", ["`pytorch` needs the `cuda` component", "CUDA-matched"],
        "  python: {}\n  pytorch: {version: '2.5.1'}\n  cuda: {version: '12.4.1'}\n"),

}

CHECK_CASES = {
    "_same_source_mpi_stack": [
        c("distro-openmpi-upstream-pmix", DEBIAN,
          "  openmpi: {source: distro, ucx: false, pmix: true}\n  pmix:\n    source: upstream\n    version: '4.2.9'\n",
          "source: upstream", "components.pmix.source",
          ["`source: upstream` pmix is not used by `source: distro` openmpi", "use `source: distro` for pmix"],
          "  openmpi: {source: distro, ucx: false, pmix: true}\n  pmix: {source: distro}\n"),
        c("distro-openmpi-upstream-ucx", DEBIAN,
          "  openmpi: {source: distro}\n  ucx: {version: '1.18.1', ofed: false}\n",
          "ucx:", "components.ucx.source", ["`source: upstream` ucx is not used"],
          # not using UCX from OpenMPI is the other way out
          "  openmpi: {source: distro, ucx: false}\n  ucx: {version: '1.18.1', ofed: false}\n"),
    ],
    "nccl.check_stack": [
        c("nccl-cuda-suffix-mismatch", CUDA,
          "  cuda: {}\n  nccl:\n    source: pypi\n    version: '2.21.5'\n    cuda: '11'\n",
          "cuda: '11'", "components.nccl.cuda",
          ["the nvidia-nccl-cu11 wheel is for CUDA 11, and this stack's CUDA is 12.4.1", "drop `cuda:` from nccl"],
          "  cuda: {}\n  nccl: {source: pypi, version: '2.21.5'}\n"),
        c("nccl-repo-without-cuda", DEBIAN, "  nccl: {source: repo, version: '2.23.4-1'}\n",
          "nccl:", "components.nccl.source",
          ["NCCL needs a CUDA version and this stack has no cuda component", "add `cuda: {}`"],
          "  nccl: {source: repo, version: '2.23.4-1'}\n  cuda: {version: '12.4.1'}\n"),
        c("nccl-pypi-without-cuda", DEBIAN, "  nccl:\n    source: pypi\n    version: '2.21.5'\n",
          "source: pypi", "components.nccl.source",
          ["NCCL needs a CUDA version", '`source: pypi` with `cuda: "12"`'],
          "  nccl: {source: pypi, version: '2.21.5', cuda: '12'}\n"),
    ],
    "pytorch.check_stack": [
        c("pytorch-unknown-version", CUDA, "  cuda: {}\n  python: {}\n  pytorch:\n    version: '2.0.0'\n",
          "version: '2.0.0'", "components.pytorch.version",
          ["no CUDA build table for PyTorch 2.0.0", "known versions: 2.4.1, 2.5.1"],
          "  cuda: {}\n  python: {}\n  pytorch: {version: '2.5.1'}\n"),
        c("pytorch-no-build-for-cuda", CUDA, "  cuda: {}\n  python: {}\n  pytorch: {version: '2.8.0'}\n",
          "pytorch:", "components.pytorch.version",
          ["PyTorch 2.8.0 has no build for CUDA 12.4.1 (cu124)", "built for: cu126, cu128, cu129"],
          "  cuda: {}\n  python: {}\n  pytorch: {version: '2.6.0'}\n"),
    ],
    "ofed.check_stack": [
        c("mlnx-ubuntu24-aarch64", UBUNTU24.replace("distro: ubuntu24", "distro: ubuntu24\n  arch: aarch64"),
          "  ofed:\n    flavor: mlnx\n    version: '24.10-1.1.4.0'\n",
          "flavor: mlnx", "components.ofed.flavor", ["MLNX OFED has no ubuntu24 aarch64 build", "`flavor: doca`"],
          "  ofed: {flavor: doca, version: '2.9.1'}\n"),
    ],
}

CONFIGURE_CASES = [
    *[c(f"distro-ucx-{opt}", DEBIAN, f"  ucx:\n    source: distro\n    ofed: false\n    {opt}: true\n",
        f"{opt}: true", f"components.ucx.{opt}",
        [f"the distro's UCX is not built with {opt}", "use `source: upstream` for ucx"],
        "  ucx: {source: distro, ofed: false}\n") for opt in ("cuda", "gdrcopy", "knem", "xpmem")],
    c("distro-openmpi-cuda", CUDA, "  cuda: {}\n  openmpi:\n    source: distro\n    ucx: false\n    cuda: true\n",
      "cuda: true", "components.openmpi.cuda", ["the distro's OpenMPI is not CUDA-aware", "`source: upstream`"],
      "  cuda: {}\n  openmpi: {version: '4.1.7', ucx: false, cuda: true}\n"),
    c("cuda-version-mismatch", CUDA, "  cuda:\n    version: '12.6'\n", "version: '12.6'", "components.cuda.version",
      ["CUDA 12.6 does not match the base image nvidia/cuda:12.4.1-devel-ubuntu22.04 (CUDA 12.4.1)",
       "drop `version:`"],
      "  cuda: {version: '12.4'}\n"),
    c("cuda-unreadable-version", DEBIAN, "  cuda: {}\n", "cuda:", "components.cuda",
      ["cannot read the CUDA version from the base image 'imagekit/debian:bookworm'", 'add `version: "12.4.1"`'],
      "  cuda: {version: '12.4.1'}\n"),
    c("upstream-without-version", CUDA, "  pmix: {}\n", "pmix:", "components.pmix.version",
      ["`source: upstream` needs a pinned version", 'add `version: "X.Y.Z"` to pmix'],
      "  pmix: {version: '4.2.9'}\n"),
    c("pypi-without-version", CUDA, "  cuda: {}\n  nccl: {source: pypi}\n", "nccl:", "components.nccl.version",
      ["`source: pypi` needs a pinned version"], "  cuda: {}\n  nccl: {source: pypi, version: '2.21.5'}\n"),
    c("repo-without-version", CUDA, "  cuda: {}\n  nccl: {}\n", "nccl:", "components.nccl.version",
      ["`source: repo` needs a pinned version"], "  cuda: {}\n  nccl: {version: '2.23.4-1'}\n"),
    # An option that is not written is located at the component's options (here: their first line).
    c("openmpi5-without-pmix", CUDA, "  openmpi:\n    version: '5.0.7'\n    ucx: false\n", "version: '5.0.7'",
      "components.openmpi.pmix", ["OpenMPI 5 needs an external PMIx here", "set `pmix: true`"],
      "  openmpi: {version: '5.0.7', ucx: false, pmix: true}\n  pmix: {version: '5.0.7'}\n"),
    c("openmpi5-pmix-false", CUDA, "  openmpi:\n    version: '5.0.7'\n    ucx: false\n    pmix: false\n",
      "pmix: false", "components.openmpi.pmix", ["OpenMPI 5 needs an external PMIx here"],
      "  openmpi: {version: '4.1.7', ucx: false, pmix: false}\n"),
    c("ofed-flavor-source-conflict", CUDA, "  ofed:\n    flavor: doca\n    version: '2.9.1'\n    source: distro\n",
      "source: distro", "components.ofed.source", ["flavor 'doca' implies `source: upstream`", "drop `source:`"],
      "  ofed: {flavor: doca, version: '2.9.1'}\n"),
    c("ofed-inbox-upstream-conflict", DEBIAN, "  ofed: {flavor: inbox, source: upstream}\n",
      "ofed:", "components.ofed.source", ["flavor 'inbox' implies `source: distro`"],
      "  ofed: {flavor: inbox, source: distro}\n"),
    c("ofed-doca-without-version", CUDA, "  ofed: {flavor: doca}\n", "ofed:", "components.ofed.version",
      ["`source: upstream` needs a pinned version"], "  ofed: {flavor: doca, version: '2.9.1'}\n"),
    c("distro-source-on-rpm-base", ROCKY, "  openmpi:\n    source: distro\n    ucx: false\n", "source: distro",
      "components.openmpi.source", ["only packaged here for Debian/Ubuntu bases", "use `source: upstream`"],
      "  openmpi: {version: '4.1.7', ucx: false}\n"),
    c("not-a-version", DEBIAN, "  openmpi:\n    source: upstream\n    version: 'abc'\n    ucx: false\n",
      "version: 'abc'", "components.openmpi.version", ["'abc' is not a version", 'like "4.1.7"'],
      "  openmpi: {source: upstream, version: '4.1.7', ucx: false}\n"),
    c("nccl-not-a-version", DEBIAN, "  nccl: {source: pypi, cuda: '12',\n         version: 'x.y'}\n",
      "version: 'x.y'", "components.nccl.version", ["'x.y' is not a version"],
      "  nccl: {source: pypi, cuda: '12', version: '2.21.5'}\n"),
    c("wrong-source-choice", DEBIAN, "  sshd: {source: upstream}\n", "sshd:", "components.sshd.source",
      ["invalid value 'upstream'", "valid: distro"], "  sshd: {source: distro}\n"),
]

PYPI_CUDA = "  cuda: {source: pypi, version: '13.0.2'}\n"
PIN = "sha256: '" + "ab" * 32 + "'"

CHECK_CASES.update({
    "openmpi.check_stack": [
        c("cuda-mpi-over-cpu-ucx", CUDA,
          "  cuda: {}\n  ucx:\n    version: '1.18.1'\n    ofed: false\n  openmpi: {version: '4.1.7', cuda: true}\n",
          "version: '1.18.1'", "components.ucx.cuda",
          ["`openmpi.cuda: true` over pml ucx needs a CUDA-enabled UCX", "set `cuda: true` on ucx"],
          "  cuda: {}\n  ucx: {version: '1.18.1', ofed: false, cuda: true}\n  openmpi: {version: '4.1.7', cuda: true}\n"),
    ],
    "nccl.check_stack:repo": [
        c("nccl-repo-on-wheel-cuda", DEBIAN, PYPI_CUDA + "  nccl:\n    source: repo\n    version: '2.23.4-1'\n",
          "source: repo", "components.nccl.source",
          ["`source: repo` needs an nvidia/cuda base", "use `source: pypi` for nccl (the wheel for CUDA 13)"],
          PYPI_CUDA + "  nccl: {source: pypi, version: '2.28.9'}\n"),
    ],
    "pytorch.check_stack:pypi": [
        c("pytorch-pypi-wheel-on-another-cuda", DEBIAN,
          PYPI_CUDA + "  python: {}\n  pytorch:\n    version: '2.15.0'\n    index: pypi\n",
          "version: '2.15.0'", "components.pytorch.version",
          ["PyPI's torch 2.15.0 is built for CUDA 13.2", "this stack's CUDA is 13.0.2", "two CUDAs",
           "use CUDA 13.2"],
          "  cuda: {source: pypi, version: '13.2.2'}\n  python: {}\n  pytorch: {version: '2.15.0', index: pypi}\n"),
        c("pytorch-version-not-on-that-index", DEBIAN,
          "  cuda: {source: pypi, version: '13.2.2'}\n  python: {}\n  pytorch:\n    version: '2.15.0'\n    index: pytorch\n",
          "index: pytorch", "components.pytorch.index",
          ["no PyTorch 2.15.0 build on the pytorch index", "`index: pypi` (cu132)"],
          "  cuda: {source: pypi, version: '13.2.2'}\n  python: {}\n  pytorch: {version: '2.15.0', index: pypi}\n"),
    ],
    "pytorch.check_stack:nccl": [
        c("pytorch-and-another-nccl", DEBIAN,
          "  cuda: {source: pypi, version: '13.2.2'}\n  nccl:\n    source: pypi\n    version: '2.32.3'\n"
          "  python: {}\n  pytorch: {version: '2.15.0', index: pypi}\n",
          "version: '2.32.3'", "components.nccl.version",
          ["PyTorch 2.15.0 loads the NCCL 2.30.7 its nvidia-nccl-cu13 wheel requires", "NCCL 2.32.3 (pypi)",
           "two NCCLs", 'version: "2.30.7"', "`nccl: false`"],
          "  cuda: {source: pypi, version: '13.2.2'}\n  nccl: {source: pypi, version: '2.30.7'}\n"
          "  python: {}\n  pytorch: {version: '2.15.0', index: pypi}\n"),
        c("pytorch-and-a-repo-nccl", CUDA,
          "  cuda: {}\n  nccl:\n    source: repo\n    version: '2.23.4-1'\n  python: {}\n  pytorch: {version: '2.5.1'}\n",
          "version: '2.23.4-1'", "components.nccl.version",
          ["PyTorch 2.5.1 loads the NCCL 2.21.5", "NCCL 2.23.4-1 (repo)", "two NCCLs"],
          "  cuda: {}\n  python: {}\n  pytorch: {version: '2.5.1'}\n"),
    ],
})

CONFIGURE_CASES += [
    # A component that does not build for the stack's arch is named (components._base.arch_problem).
    c("pytorch-aarch64-without-a-cuda-wheel", CUDA + "  arch: aarch64\n",
      "  cuda: {}\n  python: {}\n  pytorch:\n    version: '2.5.1'\n",
      "version: '2.5.1'", "components.pytorch.version",
      ["pytorch does not build for aarch64: imagekit knows no aarch64 CUDA build of PyTorch 2.5.1",
       "2.15.0 (index: pypi)"],
      "  cuda: {}\n  python: {}\n"),
    c("nccl-wheel-without-aarch64", DEBIAN + "  arch: aarch64\n",
      "  nccl:\n    source: pypi\n    version: '2.21.5'\n    cuda: '12'\n",
      "version: '2.21.5'", "components.nccl.version",
      ["nccl does not build for aarch64: PyPI has no aarch64 wheel of nvidia-nccl-cu12 2.21.5", '"2.23.4"'],
      "  nccl: {source: pypi, version: '2.23.4', cuda: '12'}\n"),
    c("cuda-pypi-12-has-no-nvcc", DEBIAN, "  cuda:\n    source: pypi\n    version: '12.4.1'\n",
      "version: '12.4.1'", "components.cuda.version",
      ["CUDA 12.4.1 has no compiler on PyPI", "carries ptxas alone", "use a 13.x version"], PYPI_CUDA),
    c("cuda-pypi-unpublished", DEBIAN, "  cuda:\n    source: pypi\n    version: '13.0.9'\n",
      "version: '13.0.9'", "components.cuda.version",
      ["PyPI's cuda-toolkit has no version 13.0.9", "published: 13.0.0, 13.0.1"], PYPI_CUDA),
    c("gencode-too-old-for-cuda-13", DEBIAN,
      PYPI_CUDA + "  openmpi: {source: distro, ucx: false}\n  nccl: {source: pypi, version: '2.28.9'}\n"
      f"  nccl-tests:\n    version: '2.19.6'\n    {PIN}\n    gencode: ['70', '90']\n",
      "gencode:", "components.nccl-tests.gencode",
      ["CUDA 13.0.2 cannot compile for sm_70", "CUDA 13.0 compiles for: 75, 80"],
      PYPI_CUDA + "  openmpi: {source: distro, ucx: false}\n  nccl: {source: pypi, version: '2.28.9'}\n"
      f"  nccl-tests: {{version: '2.19.6', {PIN}, gencode: ['80', '90']}}\n"),
    c("nccl-wheel-for-another-cuda-major", DEBIAN,
      PYPI_CUDA + "  nccl:\n    source: pypi\n    version: '2.28.9'\n    cuda: '12'\n",
      "cuda: '12'", "components.nccl.cuda",
      ["the nvidia-nccl-cu12 wheel is for CUDA 12, and this stack's CUDA is 13.0.2", "nvidia-nccl-cu13"],
      PYPI_CUDA + "  nccl: {source: pypi, version: '2.28.9'}\n"),
    c("nccl-wheel-unpublished", DEBIAN, PYPI_CUDA + "  nccl:\n    source: pypi\n    version: '2.21.5'\n",
      "version: '2.21.5'", "components.nccl.version",
      ["PyPI has no nvidia-nccl-cu13 2.21.5", "published for CUDA 13"],
      PYPI_CUDA + "  nccl: {source: pypi, version: '2.28.9'}\n"),
    c("ucx-too-old-for-cuda-12", CUDA, "  cuda: {}\n  ucx:\n    version: '1.12.1'\n    " + PIN + "\n    ofed: false\n    cuda: true\n",
      "version: '1.12.1'", "components.ucx.version",
      ["UCX 1.12.1 does not build against CUDA 12", "1.14.1"],
      "  cuda: {}\n  ucx: {version: '1.18.1', ofed: false, cuda: true}\n"),
    c("sha256-not-a-digest", DEBIAN, "  pmix:\n    version: '4.2.9'\n    sha256: \"x'; touch /pwned; '\"\n",
      "sha256:", "components.pmix.sha256",
      ["is not a sha256 digest", "64 lowercase hex digits"], "  pmix: {version: '4.2.9'}\n"),
    c("openmpi-5-with-pmix-3", DEBIAN,
      "  pmix:\n    version: '3.2.5'\n    " + PIN + "\n  openmpi: {version: '5.0.7', ucx: false, pmix: true}\n",
      "version: '3.2.5'", "components.pmix.version",
      ["OpenMPI 5.0.7 needs PMIx 4.2.0 or newer", "pmix_min_version"],
      "  pmix: {version: '4.2.9'}\n  openmpi: {version: '5.0.7', ucx: false, pmix: true}\n"),
]

# -- the second CUDA review's finding 16 (and 6, 9): each case fails on the code before these rules ----
CUDA126 = CUDA.replace("12.4.1", "12.6.3")
CUDA128 = CUDA.replace("12.4.1", "12.8.1")
UBUNTU24_CUDA = CUDA126.replace("ubuntu22.04", "ubuntu24.04").replace("distro: ubuntu22", "distro: ubuntu24")
CHECK_CASES.update({
    "ucx.check_stack": [
        c("ucx-before-1.19.1-on-cuda-13", DEBIAN, PYPI_CUDA + "  ucx:\n    version: '1.18.1'\n    cuda: true\n"
          "    ofed: false\n",
          "version: '1.18.1'", "components.ucx.version",
          ["UCX 1.18.1 predates CUDA 13", "1.19.1", 'use UCX "1.19.1" or newer',
           "add `accept: [ucx-before-cuda13]` to ucx"],
          PYPI_CUDA + "  ucx: {version: '1.20.1', cuda: true, ofed: false}\n"),
        c("ucx-1.18.1-accepted-on-cuda-13", DEBIAN, PYPI_CUDA + "  ucx:\n    version: '1.18.1'\n    cuda: true\n"
          "    ofed: false\n",
          "version: '1.18.1'", "components.ucx.version", ["UCX 1.18.1 predates CUDA 13"],
          PYPI_CUDA + "  ucx: {version: '1.18.1', cuda: true, ofed: false, accept: [ucx-before-cuda13]}\n"),
        c("ucx-1.17-hooks-on-x86_64", CUDA, "  cuda: {}\n  ucx:\n    version: '1.17.0'\n    cuda: true\n"
          "    ofed: false\n",
          "version: '1.17.0'", "components.ucx.version",
          ["UCX 1.17.0 cannot hook libcuda from R575+ drivers on x86_64", "openucx/ucx#10627",
           'use UCX "1.18.1" or newer'],
          "  cuda: {}\n  ucx: {version: '1.18.1', cuda: true, ofed: false}\n"),
    ],
    "nccl.check_stack:cuda-minor": [
        # a.yaml: NVIDIA's repo has no 2.18.5 package for CUDA 12.6 (the old rule checked only the suffix).
        c("nccl-2.18.5-on-cuda-12.6", CUDA126, "  cuda: {}\n  nccl:\n    source: repo\n    version: '2.18.5-1'\n",
          "version: '2.18.5-1'", "components.nccl.version",
          ["NVIDIA's repo has no libnccl2=2.18.5-1+cuda12.6", "NCCL 2.18.5 predates CUDA 12.6",
           'use NCCL "2.22.3-1" or newer for CUDA 12.6'],
          "  cuda: {}\n  nccl: {source: repo, version: '2.23.4-1'}\n"),
    ],
    "nccl.check_stack:blackwell": [
        c("nccl-before-2.25-for-sm100", CUDA128, "  cuda: {arch_list: ['90', '100']}\n  nccl:\n    source: pypi\n"
          "    version: '2.23.4'\n",
          "version: '2.23.4'", "components.nccl.version",
          ["NCCL 2.23.4 cannot drive Blackwell (sm_100 in this stack)", "2.25.1", 'use NCCL "2.25.1" or newer'],
          "  cuda: {arch_list: ['90', '100']}\n  nccl: {source: pypi, version: '2.28.9'}\n"),
    ],
    "ofed.check_stack:doca-distro": [
        # b.yaml: DOCA 2.5.0 on Ubuntu 24.04.
        c("doca-2.5-on-ubuntu24", UBUNTU24_CUDA, "  ofed:\n    flavor: doca\n    version: '2.5.0'\n",
          "version: '2.5.0'", "components.ofed.version",
          ["DOCA 2.5.0 predates ubuntu24", "no ubuntu24 tree before DOCA 2.7.0", 'use DOCA "2.7.0" or newer'],
          "  ofed: {flavor: doca, version: '2.9.1'}\n"),
    ],
    "openmpi.check_stack:pmix-4.2.3": [
        c("ompi-4.1.5-with-pmix-4.2.9", CUDA, "  pmix: {version: '4.2.9', " + PIN + "}\n  openmpi:\n"
          "    version: '4.1.5'\n    " + PIN + "\n    ucx: false\n    pmix: true\n",
          "version: '4.1.5'", "components.openmpi.version",
          ["Open MPI 4.1.5 cannot use PMIx 4.2.9", "from 4.1.6", 'use Open MPI "4.1.8"'],
          "  pmix: {version: '4.2.9'}\n  openmpi: {version: '4.1.8', ucx: false, pmix: true}\n"),
    ],
})


ALL = [*NEEDS_CASES.values(), *[x for cases in CHECK_CASES.values() for x in cases], *CONFIGURE_CASES]


@pytest.mark.parametrize("case", ALL, ids=[x.id for x in ALL])
def test_violation_is_located_and_offers_a_fix(tmp_path, case):
    path = write(tmp_path, case.yaml(case.bad))
    expect_error(lambda: stack_mod.load(path), path, line_of(path, case.needle), case.key, *case.fragments)


@pytest.mark.parametrize("case", ALL, ids=[x.id for x in ALL])
def test_fixed_stack_passes(tmp_path, case):
    s = stack_mod.load(write(tmp_path, case.yaml(case.good)))
    rules.enforce(s)  # idempotent on a valid stack


# The components these tests know; a component added later brings its own rule cases in its own tests.
KNOWN = {"cuda", "ofed", "gdrcopy", "ucx", "pmix", "openmpi", "nccl", "nccl-tests", "python", "pytorch",
         "sshd"}


def test_every_requirement_has_a_case():
    assert {(name, r.role, r.option) for name, cls in registry().items() if name in KNOWN
            for r in cls.requires} == set(NEEDS_CASES)


def test_every_check_function_has_a_case():
    own = {f"{name}.check_stack" for name, cls in registry().items()
           if name in KNOWN and cls.check_stack is not Component.check_stack}
    # _exclusive_roles has its own test below: no two shipped components fill one exclusive role.
    assert {f.__name__ for f in rules.CHECKS} - {"_exclusive_roles"} | own == {k.split(":")[0] for k in CHECK_CASES}


def test_a_requirement_is_met_by_any_provider_of_its_role(tmp_path, monkeypatch):
    # A role is filled by whichever component provides it, and the fix names every provider.
    s = stack_mod.load(write(tmp_path, DEBIAN + "components:\n  openmpi: {source: distro, ucx: false, pmix: true}\n"
                             "  pmix: {source: distro}\n"))
    mpi = s.get("openmpi")
    need = Requires("pmix", option="pmix")
    need.check(mpi)
    pmix = s.components.pop("pmix")
    known = {**registry(), "other-pmix": type("OtherPmix", (Component,), {"name": "other-pmix", "provides": ("pmix",)})}
    # Requires reads the defined components from below the package (components._base).
    monkeypatch.setattr(components._base, "defined", lambda: known)
    with pytest.raises(rules.StackError, match=r"needs the `pmix` component") as info:
        need.check(mpi)
    assert "add `pmix` or `other-pmix` to components" in info.value.hint
    s.components["other-pmix"] = type("Filler", (), {"provides": ("pmix",)})()
    need.check(mpi)
    assert pmix.provides == ("pmix",)


def test_two_providers_of_one_exclusive_role_are_refused(tmp_path, monkeypatch):
    """Two MPIs in one image: refused at the second one's line, naming both and the role."""
    fake = type("OtherMpi", (Component,), {"name": "other-mpi", "summary": "a second MPI", "order": 55,
                                           "provides": ("mpi",), "sources": ("distro",)})
    monkeypatch.setattr(components, "_SHIPPED", {**components.shipped(), "other-mpi": fake})
    path = write(tmp_path, DEBIAN + "components:\n  openmpi: {source: distro, ucx: false}\n  other-mpi: {}\n")
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "other-mpi:"), "components.other-mpi",
                 "`other-mpi` and `openmpi` both provide `mpi`; an image has one", "keep one of `openmpi`, `other-mpi`")
    assert "mpi" in EXCLUSIVE_ROLES


def test_shipped_stacks_pass_every_rule():
    for path in stack_mod.shipped():
        for variant in stack_mod.load_all(path):
            rules.enforce(variant)


def test_cuda_version_prefix_of_the_tag_is_accepted(tmp_path):
    for given in ("12", "12.4", "12.4.1"):
        s = stack_mod.load(write(tmp_path, CUDA + f"components:\n  cuda: {{version: '{given}'}}\n"))
        assert s.get("cuda").version == given


def test_horovod_is_refused_by_name_with_the_replacement(tmp_path):
    """Horovod is dead (0.28.1, 2023): the key names it, not "unknown key", and the fix is torch.distributed."""
    body = "  cuda: {}\n  python: {}\n  pytorch: {version: '2.5.1'}\n  horovod:\n    version: '0.28.1'\n"
    path = write(tmp_path, CUDA + "components:\n" + body)
    expect_error(lambda: stack_mod.load(path), path, line_of(path, "horovod:"), "components.horovod",
                 "Horovod is dead", "0.28.1 (2023)", "torch.distributed", "torchrun", "`pytorch` stack")
    assert "horovod" not in registry() and "horovod" in components.RETIRED

