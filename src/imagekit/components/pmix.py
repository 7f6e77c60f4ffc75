"""PMIx: the process-management interface Slurm's ``--mpi=pmix`` speaks.

For ``srun --mpi=pmix`` the image's OpenMPI should use an external PMIx of the
same major version as the site's Slurm PMIx; the ``major`` label lets
``imagekit preflight`` compare the two.
"""

from __future__ import annotations

import re

from imagekit import checks
from imagekit.components import Component

PREFIX = "/usr/local/pmix"


class Pmix(Component):
    name = "pmix"
    summary = "external PMIx for OpenMPI and Slurm's --mpi=pmix"
    order = 40
    sources = ("upstream", "distro")
    distro_packages = ("libpmix-bin", "libpmix2")
    distro_devel_packages = ("libpmix-dev",)
    distro_note = "PMIx (distro)"
    distro_versions = {"debian12": "4.2.2", "debian11": "3.2.3", "ubuntu22": "4.1.2", "ubuntu24": "5.0.1"}

    @property
    def prefix(self) -> str:
        if self.source == "upstream":
            return PREFIX
        return f"/usr/lib/{self.stack.base.arch}-linux-gnu/pmix2"

    def building_blocks(self) -> list:
        from hpccm.building_blocks import pmix

        return [pmix(version=self.version, prefix=PREFIX, ldconfig=True)]

    def labels(self) -> dict[str, str]:
        return {"major": self.version.split(".")[0], "prefix": self.prefix}

    def checks(self) -> list:
        info = "pmix_info" if self.source == "distro" else f"{PREFIX}/bin/pmix_info"
        return [
            checks.library("pmix.lib", "libpmix.so.2"),
            checks.run("pmix.version", f"pmix_info reports PMIx {self.version}", info,
                       expect=rf"PMIX: {re.escape(self.version)}"),
        ]
