"""nccl-tests, built with MPI=1 against the stack's MPI, NCCL and CUDA.

The GPU architectures are explicit (``gencode``, default: Ampere and Hopper,
plus Blackwell where the CUDA has it): nccl-tests' Makefile defaults differ
by release, and before v2.13.13 they have no sm_90 code, so Hopper ran JIT-
compiled PTX, which fails under CUDA minor-version compatibility.
"""

from __future__ import annotations

import re

from imagekit import checks, sources
from imagekit.components import _blocks
from imagekit.components._base import Component, Requires
from imagekit.components.nccl import cuda_gencode, default_archs
from imagekit.util.schema import Option

PREFIX = "/usr/local/nccl-tests"
# `launch --validate`'s default: one GPU per rank, NCCL_DEBUG=INFO so the transport shows in the log.
BENCHMARK = ["all_reduce_perf", "-b", "8", "-e", "1G", "-f", "2", "-g", "1"]
BENCHMARK_ENV = {"NCCL_DEBUG": "INFO"}
BINARIES = ("all_reduce_perf", "all_gather_perf", "alltoall_perf", "broadcast_perf",
            "reduce_scatter_perf", "sendrecv_perf")


class NcclTests(Component):
    name = "nccl-tests"
    summary = "NVIDIA nccl-tests (all_reduce_perf, ...) built with MPI=1 for explicit GPU architectures"
    order = 70
    requires = (Requires("nccl"), Requires("cuda", why="nccl-tests is CUDA code"),
                Requires("mpi", option="mpi", why="built with MPI=1"))
    sources = ("upstream",)
    upstream_file = ("nccl-tests-{version}.tar.gz",
                     "https://github.com/NVIDIA/nccl-tests/archive/v{version}.tar.gz")
    prefix = PREFIX
    options = {
        "mpi": Option(bool, True, "build with MPI=1 (multi-node runs)"),
        "gencode": Option(list, None, 'GPU architectures, e.g. ["80", "90"] (default: the cuda component\'s '
                                      "arch_list, else Ampere, Hopper and Blackwell where this CUDA has them)",
                          item_type=str),
    }

    def configure(self) -> None:
        super().configure()
        cuda = self.stack.provider("cuda")
        if cuda is not None:
            for arch in self.archs:
                cuda.check_arch("gencode", arch, owner=self)

    @property
    def archs(self) -> list[str]:
        cuda = self.stack.provider("cuda")
        return self.opts.get("gencode") or cuda.opts.get("arch_list") or default_archs(cuda)

    def building_blocks(self) -> list:
        from hpccm.building_blocks import generic_build

        mpi = self.stack.provider("mpi")
        nccl = self.stack.provider("nccl")
        cuda = self.stack.provider("cuda")
        # DSO=1 (recent nccl-tests; older ones ignore it): the verification kernels go into one
        # libverifiable.so beside the binaries (RUNPATH $ORIGIN) instead of a copy in each of them.
        make = ["make", "-j$(nproc)", "DSO=1", "CUDA_HOME=/usr/local/cuda", f"NCCL_HOME={nccl.prefix}",
                f"NVCC_GENCODE=\"{cuda_gencode(cuda, self.archs)}\""]
        if self.enabled("mpi"):
            make += ["MPI=1", f"MPI_HOME={mpi.home}"]
        (artifact,) = self.artifacts()
        src = sources.block_source(self.stack, artifact)
        return _blocks.build_tools(self.stack, note="nccl-tests build tools") + [generic_build(
            **{k: v for k, v in src.items() if k != "preconfigure"}, directory=f"nccl-tests-{self.version}",
            build=[*src["preconfigure"], " ".join(make)], prefix=PREFIX,
            install=[f"mkdir -p {PREFIX}/bin", f"cp build/*_perf {PREFIX}/bin/",
                     f"if [ -f build/verifiable/libverifiable.so ]; then cp -a build/verifiable/libverifiable.so* "
                     f"{PREFIX}/bin/; fi"],
        )]

    def benchmark(self) -> tuple[list[str], dict[str, str]]:
        return list(BENCHMARK), dict(BENCHMARK_ENV)

    def environment(self) -> dict[str, str]:
        return {"PATH": f"{PREFIX}/bin:$PATH"}

    def labels(self) -> dict[str, str]:
        return {"mpi": str(self.enabled("mpi")).lower(), "gencode": ",".join(self.archs)}

    def checks(self) -> list:
        nccl = self.stack.provider("nccl")
        probe = f"{PREFIX}/bin/all_reduce_perf"
        out = [checks.file(f"nccl-tests.{b}", f"{PREFIX}/bin/{b}") for b in BINARIES] + [
            checks.run("nccl-tests.all_reduce", "all_reduce_perf runs on one GPU",
                       "all_reduce_perf -b 8 -e 1M -f 2 -g 1", expect=r"# Avg bus bandwidth", needs="gpu"),
        ]
        # The devel image has cuobjdump: every architecture's SASS, and PTX of the newest, must be in
        # the installed binaries (a Makefile that ignores NVCC_GENCODE would leave Blackwell to JIT).
        archs = self.archs
        wanted = "".join(rf"(?=.*\bsm_{a}[a-z]?\.cubin\b)" for a in archs) + rf"(?=.*\bsm_{archs[-1]}[a-z]?\.ptx\b)"
        out.append(checks.run(
            "nccl-tests.sm_code", f"the binaries carry SASS for sm_{', sm_'.join(archs)} and PTX for "
                                  f"sm_{archs[-1]} (cuobjdump)",
            f"cd {PREFIX}/bin && for f in *; do /usr/local/cuda/bin/cuobjdump --list-elf --list-ptx \"$f\" "
            "2>/dev/null; done | grep -o -E 'sm_[0-9]+[a-z]?[.](cubin|ptx)' | sort -u",
            expect=rf"(?s)\A{wanted}", target="devel"))
        if nccl is not None:
            # The labels record nccl.prefix: the binaries must load that NCCL, not another on the path.
            out.append(checks.run(
                "nccl-tests.loads_nccl", f"all_reduce_perf loads the stack's NCCL from {nccl.prefix}",
                f"ldd {probe} | awk '/libnccl[.]so[.]2/ {{print $3}}' | xargs -r readlink -f",
                expect=loads_nccl_pattern(nccl.prefix)))
        return out


def loads_nccl_pattern(prefix: str) -> str:
    """What `readlink -f` of the loaded libnccl.so.2 must match for an NCCL under ``prefix``: its
    lib or lib64, or the Debian/Ubuntu multiarch directory under it, where NVIDIA's packages put it
    (/usr/lib/x86_64-linux-gnu/libnccl.so.2.23.4)."""
    return rf"^{re.escape(prefix)}/lib(64)?(/[a-z0-9_]+-linux-gnu[a-z]*)?/libnccl\.so\.2"

