"""The rule probes of the second CUDA recipe review (cuda-recipes-2-stacks/rules/, copied here as text):
each either loads, or is refused at the right line and key with the error that names the fix. Before
this work a, b, d and g loaded silently, c was refused for want of a pin, and e named Horovod's C++14."""

from __future__ import annotations

import pytest

from imagekit import stack as stack_mod
from helpers.stack_helpers import expect_error, line_of, write

BASE = "extends: base/cuda12-ubuntu22\n"
PROBES = {
    # NCCL 2.18.5 has no package for CUDA 12.6.
    "a": (BASE + "base: {image: nvidia/cuda:12.6.3-devel-ubuntu22.04, runtime: nvidia/cuda:12.6.3-runtime-ubuntu22.04}\n"
          "components:\n  nccl: {source: repo, version: \"2.18.5-1\"}\n  nccl-tests: {version: \"2.17.6\", mpi: true}\n",
          "2.18.5-1", "components.nccl.version", ["no libnccl2=2.18.5-1+cuda12.6", "NCCL \"2.22.3-1\" or newer"]),
    # DOCA 2.5.0 predates Ubuntu 24.04.
    "b": (BASE + "base: {image: nvidia/cuda:12.6.3-devel-ubuntu24.04, runtime: nvidia/cuda:12.6.3-runtime-ubuntu24.04, "
          "distro: ubuntu24}\ncomponents:\n  ofed: {flavor: doca, version: \"2.5.0\"}\n"
          "  nccl-tests: {version: \"2.17.6\", mpi: true}\n",
          "2.5.0", "components.ofed.version", ["DOCA 2.5.0 predates ubuntu24", "DOCA \"2.7.0\" or newer"]),
    # nccl-tests 2.13.11 now has upstream's pin: it loads.
    "c": (BASE + "components:\n  nccl-tests: {version: \"2.13.11\", mpi: true}\n", None, None, None),
    # aws-ofi-nccl on Ubuntu 22.04's libfabric 1.11 (no CUDA): no GPUDirect RDMA.
    "d": (BASE + "components:\n  aws-ofi-nccl: {version: \"1.21.1\", sha256: \"" + "0" * 64 + "\"}\n"
          "  nccl-tests: {version: \"2.17.6\", mpi: true}\n",
          "aws-ofi-nccl:", "components.aws-ofi-nccl",
          ["ubuntu22's libfabric 1.11.0 has no GPUDirect RDMA", "accept: [no-gdr]"]),
    # Horovod is retired, with torch.distributed as the replacement.
    "e": (BASE + "components:\n  python: {packages: [numpy]}\n  pytorch: {version: \"2.5.1\"}\n"
          "  horovod: {version: \"0.28.1\"}\n",
          "horovod:", "components.horovod", ["Horovod is dead", "torch.distributed"]),
    # Blackwell code on the CUDA 13 stack: CUDA 13 compiles sm_100 and NCCL 2.28.9 drives it.
    "f": ("extends: debian-cuda\ncomponents:\n  cuda: {source: pypi, version: \"13.0.2\", arch_list: [\"80\", \"90\", \"100\"]}\n",
          None, None, None),
    # HPC-X's mlnx_ofed build on the base's DOCA OFED.
    "g": (BASE + "components:\n  ucx: false\n  pmix: false\n  openmpi: false\n"
          "  hpcx: {version: \"2.19\", sha256: \"" + "0" * 64 + "\", ofed: mlnx_ofed}\n"
          "  nccl-tests: {version: \"2.17.6\", mpi: true}\n",
          "hpcx:", "components.hpcx.ofed", ["HPC-X's mlnx_ofed build does not match", "doca_ofed"]),
}


@pytest.mark.parametrize("name", sorted(PROBES))
def test_review_probe(tmp_path, name):
    text, needle, key, fragments = PROBES[name]
    path = write(tmp_path, f"name: {name}\n" + text)
    if needle is None:
        assert stack_mod.load(path).name == name
        return
    expect_error(lambda: stack_mod.load(path), path, line_of(path, needle), key, *fragments)
