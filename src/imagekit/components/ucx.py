"""UCX: the communication layer under OpenMPI's ``pml ucx`` (and UCC, NCCL's UCX plugin)."""

from __future__ import annotations

import re

from imagekit import checks
from imagekit.components import Component
from imagekit.components.gdrcopy import PREFIX as GDRCOPY_PREFIX
from imagekit.schema import Option

PREFIX = "/usr/local/ucx"


class Ucx(Component):
    name = "ucx"
    summary = "UCX with optional CUDA, gdrcopy, KNEM, XPMEM and verbs support"
    order = 30
    sources = ("upstream", "distro")
    options = {
        "cuda": Option(bool, False, "build CUDA-aware (needs the cuda component)"),
        "gdrcopy": Option(bool, False, "use gdrcopy (needs the gdrcopy component)"),
        "knem": Option(bool, False, "build and use KNEM (user-space headers; module on the host)"),
        "xpmem": Option(bool, False, "build and use XPMEM (user-space library; module on the host)"),
        "ofed": Option(bool, True, "use verbs/RDMA (rdma-core or OFED from the ofed component)"),
    }
    distro_packages = ("libucx0", "ucx-utils")
    distro_devel_packages = ("libucx-dev",)
    distro_note = "UCX (distro)"
    distro_versions = {"debian12": "1.13.1", "debian11": "1.10.1", "ubuntu22": "1.12.1", "ubuntu24": "1.16.0"}

    def configure(self) -> None:
        super().configure()
        if self.source == "distro":
            for opt in ("cuda", "gdrcopy", "knem", "xpmem"):
                if self.enabled(opt):
                    self.error(opt, f"the distro's UCX is not built with {opt}",
                               f"use `source: upstream` for ucx, or set `{opt}: false`")

    @property
    def prefix(self) -> str:
        return PREFIX if self.source == "upstream" else "/usr"

    def building_blocks(self) -> list:
        from hpccm.building_blocks import knem, ucx, xpmem

        blocks = []
        if self.enabled("knem"):
            blocks.append(knem())
        if self.enabled("xpmem"):
            blocks.append(xpmem())
        blocks.append(ucx(
            version=self.version, prefix=PREFIX, ldconfig=True, disable_static=True,
            cuda="/usr/local/cuda" if self.enabled("cuda") else False,
            gdrcopy=GDRCOPY_PREFIX if self.enabled("gdrcopy") else False,
            knem="/usr/local/knem" if self.enabled("knem") else False,
            xpmem="/usr/local/xpmem" if self.enabled("xpmem") else False,
            ofed=self.enabled("ofed"),
        ))
        return blocks

    def labels(self) -> dict[str, str]:
        return {k: str(self.enabled(k)).lower() for k in ("cuda", "gdrcopy", "knem", "xpmem", "ofed")}

    def checks(self) -> list:
        out = [
            checks.run("ucx.version", f"ucx_info reports UCX {self.version}", "ucx_info -v",
                       expect=rf"[Vv]ersion:?\s+{re.escape(self.version)}"),
            checks.library("ucx.libucp", "libucp.so.0"),
        ]
        if self.enabled("cuda"):
            out.append(checks.run("ucx.cuda", "UCX offers the cuda_copy transport", "ucx_info -d",
                                  expect="cuda_copy", needs="gpu"))
        if self.enabled("ofed"):
            out.append(checks.run("ucx.verbs", "UCX offers a verbs transport", "ucx_info -d",
                                  expect=r"Transport: (rc|dc|ud)_(verbs|mlx5)", needs="fabric"))
        return out
