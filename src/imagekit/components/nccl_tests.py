"""nccl-tests, built with MPI=1 against the stack's MPI, NCCL and CUDA."""

from __future__ import annotations

from imagekit import checks
from imagekit.components import Component
from imagekit.schema import Option

PREFIX = "/usr/local/nccl-tests"
BINARIES = ("all_reduce_perf", "all_gather_perf", "alltoall_perf", "broadcast_perf",
            "reduce_scatter_perf", "sendrecv_perf")
URL = "https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v{version}.tar.gz"


class NcclTests(Component):
    name = "nccl-tests"
    summary = "NVIDIA nccl-tests (all_reduce_perf, ...) built with MPI=1"
    order = 70
    sources = ("upstream",)
    options = {"mpi": Option(bool, True, "build with MPI=1 (multi-node runs)")}

    def building_blocks(self) -> list:
        from hpccm.building_blocks import generic_build

        mpi = self.stack.get("openmpi")
        nccl = self.stack.get("nccl")
        make = ["make", "-j$(nproc)", "CUDA_HOME=/usr/local/cuda", f"NCCL_HOME={nccl.prefix}"]
        if self.enabled("mpi"):
            make += ["MPI=1", f"MPI_HOME={mpi.home}"]
        return [generic_build(
            url=URL.format(version=self.version), directory=f"nccl-tests-{self.version}",
            build=[" ".join(make)], prefix=PREFIX,
            install=[f"mkdir -p {PREFIX}/bin", f"cp build/*_perf {PREFIX}/bin/"],
        )]

    def environment(self) -> dict[str, str]:
        return {"PATH": f"{PREFIX}/bin:$PATH"}

    def labels(self) -> dict[str, str]:
        return {"mpi": str(self.enabled("mpi")).lower()}

    def checks(self) -> list:
        return [checks.file(f"nccl-tests.{b}", f"{PREFIX}/bin/{b}") for b in BINARIES] + [
            checks.run("nccl-tests.all_reduce", "all_reduce_perf runs on one GPU",
                       "all_reduce_perf -b 8 -e 1M -f 2 -g 1", expect=r"# Avg bus bandwidth", needs="gpu"),
        ]

