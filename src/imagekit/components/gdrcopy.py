"""gdrcopy: low-latency GPU memory copies, used by UCX (and NCCL's GDRDMA path)."""

from __future__ import annotations

from imagekit import checks
from imagekit.components import Component

PREFIX = "/usr/local/gdrcopy"


class Gdrcopy(Component):
    name = "gdrcopy"
    summary = "gdrcopy user-space library (the kernel module stays on the host)"
    order = 20
    sources = ("upstream",)

    def building_blocks(self) -> list:
        from hpccm.building_blocks import gdrcopy

        return [gdrcopy(version=self.version, prefix=PREFIX, ldconfig=True)]

    def labels(self) -> dict[str, str]:
        return {"prefix": PREFIX}

    def checks(self) -> list:
        return [
            checks.library("gdrcopy.lib", "libgdrapi.so.2"),
            checks.run("gdrcopy.device", "the host's gdrdrv device is visible", "test -c /dev/gdrdrv",
                       needs="gpu"),
        ]
