"""gdrcopy: low-latency GPU memory copies, used by UCX (and NCCL's GDRDMA path).

Only the user-space library is built (``make lib lib_install``); the gdrdrv
kernel module stays on the host.
"""

from __future__ import annotations

from imagekit import checks, sources
from imagekit.components import _blocks
from imagekit.components._base import Component, Requires

PREFIX = "/usr/local/gdrcopy"


class Gdrcopy(Component):
    name = "gdrcopy"
    summary = "gdrcopy user-space library (the kernel module stays on the host)"
    order = 20
    provides = ("gdrcopy",)
    requires = (Requires("cuda"),)
    sources = ("upstream",)
    upstream_file = ("gdrcopy-{version}.tar.gz", "https://github.com/NVIDIA/gdrcopy/archive/v{version}.tar.gz")
    prefix = PREFIX

    def building_blocks(self) -> list:
        from hpccm.building_blocks import generic_build

        (artifact,) = self.artifacts()
        src = sources.block_source(self.stack, artifact)
        return _blocks.build_tools(self.stack) + [generic_build(
            **{k: v for k, v in src.items() if k != "preconfigure"},
            directory=f"gdrcopy-{self.version}", prefix=PREFIX, ldconfig=True,
            build=[*src["preconfigure"], f"make prefix={PREFIX} CUDA=/usr/local/cuda lib lib_install"],
            libdir=f"{PREFIX}/lib", runtime=[f"{PREFIX}/lib"],
        )]

    def labels(self) -> dict[str, str]:
        return {"prefix": PREFIX}

    def checks(self) -> list:
        return [
            checks.library("gdrcopy.lib", "libgdrapi.so.2"),
            checks.run("gdrcopy.device", "the host's gdrdrv device is visible", "test -c /dev/gdrdrv",
                       needs="gpu"),
        ]
