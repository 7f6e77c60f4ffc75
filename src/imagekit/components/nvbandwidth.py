"""nvbandwidth: NVIDIA's GPU memory-copy bandwidth tool (NVLink, PCIe, C2C; multi-node NVLink with MPI).

The fabric diagnostic a GPU image carries beside nccl-tests (CoreWeave's benchmark images ship it):
where nccl-tests says a collective is slow, nvbandwidth says which copy path is, one link at a time
(``nvbandwidth -t device_to_device_memcpy_read_ce``), without NCCL in between. Built from NVIDIA's
tagged release (CMake, Boost program_options) for the stack's GPU architectures; the runtime keeps the
binary and Boost's program_options library.

Every one of its test cases launches kernels (the copy-engine ones too: spin and memset kernels), and
PTX never JIT-compiles down to an older GPU, so it must carry SASS for the oldest GPU the image serves:
a stack whose nccl-tests has sm_70 code and whose nvbandwidth has not is refused (fourth CUDA review,
J4: nvbandwidth failed on every V100 with "no kernel image is available").
"""

from __future__ import annotations

from imagekit import checks, sources
from imagekit.components import _blocks
from imagekit.components._base import Component, Requires
from imagekit.components.nccl import default_archs
from imagekit.util.schema import Option

PREFIX = "/usr/local/nvbandwidth"
# Boost program_options' run-time package in each distro (the -dev package pulls it into devel).
BOOST_RUNTIME = {"debian12": "libboost-program-options1.74.0", "ubuntu22": "libboost-program-options1.74.0",
                 "debian13": "libboost-program-options1.83.0", "ubuntu24": "libboost-program-options1.83.0"}


class Nvbandwidth(Component):
    name = "nvbandwidth"
    summary = "nvbandwidth: GPU copy bandwidth over NVLink, PCIe and C2C, link by link (fabric diagnostics)"
    order = 71   # beside nccl-tests: a bump rebuilds no layer below it
    requires = (Requires("cuda", why="it is CUDA code"),)
    sources = ("upstream",)
    upstream_file = ("nvbandwidth-{version}.tar.gz",
                     "https://github.com/NVIDIA/nvbandwidth/archive/refs/tags/v{version}.tar.gz")
    prefix = PREFIX
    options = {
        "archs": Option(list, None, 'GPU architectures, e.g. ["70", "80", "90"] (default: the cuda component\'s '
                                    "arch_list, else Ampere to Blackwell where this CUDA has them)", item_type=str),
    }

    def configure(self) -> None:
        super().configure()
        if self.stack.base.distro not in BOOST_RUNTIME:
            self.error(None, f"Boost's package names on {self.stack.base.distro} are not known here",
                       "use a base of: " + ", ".join(sorted(BOOST_RUNTIME)))
        cuda = self.stack.provider("cuda")
        if cuda is not None:
            for arch in self.opts.get("archs") or []:
                cuda.check_arch("archs", arch, owner=self)

    def check_stack(self) -> None:
        # The oldest GPU another binary of the image serves must get code from this one too.
        mine = set(self.archs)
        for other in self.stack.components.values():
            theirs = getattr(other, "archs", None) if other is not self and other.name != "cuda" else None
            lacking = sorted(set(theirs or []) - mine, key=int) if isinstance(theirs, list) else []
            if lacking and int(lacking[0]) < min(map(int, mine)):
                self.error("archs", f"nvbandwidth has no sm_{lacking[0]} code, which {other.name} carries: on that "
                           "GPU every nvbandwidth test fails (\"no kernel image is available\"; PTX is never "
                           "compiled for an older GPU)", f"add archs: {sorted(mine | set(lacking), key=int)} to "
                           "nvbandwidth")

    @property
    def archs(self) -> list[str]:
        cuda = self.stack.provider("cuda")
        return list(self.opts.get("archs") or cuda.opts.get("arch_list") or default_archs(cuda))

    def building_blocks(self) -> list:
        from hpccm.building_blocks import generic_build

        (artifact,) = self.artifacts()
        src = sources.block_source(self.stack, artifact)
        archs = ";".join(self.archs)
        return _blocks.build_tools(self.stack, ["cmake", "libboost-program-options-dev"], "nvbandwidth build tools") + [
            generic_build(**{k: v for k, v in src.items() if k != "preconfigure"},
                          directory=f"nvbandwidth-{self.version}", prefix=PREFIX, runtime=[PREFIX],
                          build=[*src["preconfigure"],
                                 f"cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc "
                                 f"-DCMAKE_CUDA_ARCHITECTURES=\"{archs}\"",
                                 "cmake --build build -j$(nproc)"],
                          install=[f"mkdir -p {PREFIX}/bin", f"cp build/nvbandwidth {PREFIX}/bin/"])]

    def runtime(self) -> list:
        return _blocks.apt_install(self.stack, [BOOST_RUNTIME[self.stack.base.distro]], "Boost for nvbandwidth") + \
            super().runtime()

    def environment(self) -> dict[str, str]:
        return {"PATH": f"{PREFIX}/bin:$PATH"}

    def labels(self) -> dict[str, str]:
        return {"archs": ",".join(self.archs)}

    def checks(self) -> list:
        return [
            checks.file("nvbandwidth.binary", f"{PREFIX}/bin/nvbandwidth"),
            checks.run("nvbandwidth.runs", "nvbandwidth measures a device-to-device copy on this host's GPUs",
                       "nvbandwidth -t device_to_device_memcpy_read_ce", expect=r"SUM device_to_device", needs="gpu"),
        ]
