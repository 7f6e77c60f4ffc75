"""PMIx: the process-management interface Slurm's ``--mpi=pmix`` speaks.

PMIx 4 and later require hwloc at configure time (``config/pmix_setup_hwloc.m4``
stops with "Cannot continue" without ``hwloc.h``), so the devel stage installs
libhwloc-dev and libevent-dev and passes both explicitly; Open MPI is then
configured with the same two, so the run-time linker loads one copy of each.
``PMIX_MCA_gds=hash`` avoids the shared-memory dstore, which fails between a
container's PMIx and the host Slurm's (apptainer/singularity#5195,
open-mpi/ompi#7516); a job can override it.

Slurm's pmix plugin tells its clients ``PMIX_SECURITY_MODE=munge,native``, which
Enroot's Slurm hook passes on as ``PMIX_MCA_psec``: a PMIx built without munge
stops every rank at the first module it lacks ("Framework: psec Component:
munge"). The upstream build is configured ``--with-munge``, as Debian's is.
"""

from __future__ import annotations

import re

from imagekit import checks, sources
from imagekit.components import _blocks
from imagekit.components._base import Component

PREFIX = "/usr/local/pmix"
DEVEL_PACKAGES = ["libevent-dev", "libhwloc-dev", "zlib1g-dev"]


def runtime_packages(distro: str) -> list[str]:
    """The run-time libraries of PMIx's (and Open MPI's) external hwloc and libevent."""
    return _blocks.distro_names(distro, ["libhwloc15", "libevent-core-2.1-7", "libevent-pthreads-2.1-7", "zlib1g"])


class Pmix(Component):
    name = "pmix"
    summary = "external PMIx for OpenMPI and Slurm's --mpi=pmix"
    order = 40
    provides = ("pmix",)
    sources = ("upstream", "distro")
    upstream_file = ("pmix-{version}.tar.bz2",
                     "https://github.com/openpmix/openpmix/releases/download/v{version}/pmix-{version}.tar.bz2")
    distro_packages = ("libpmix-bin", "libpmix2")
    distro_devel_packages = ("libpmix-dev",)
    distro_note = "PMIx (distro)"
    distro_versions = {"debian12": "4.2.2", "debian13": "5.0.7", "debian11": "3.2.3", "ubuntu22": "4.1.2",
                       "ubuntu24": "5.0.1"}

    @property
    def prefix(self) -> str:
        if self.source == "upstream":
            return PREFIX
        return f"/usr/lib/{self.stack.base.arch}-linux-gnu/pmix2"

    def building_blocks(self) -> list:
        from hpccm.building_blocks import generic_autotools

        (artifact,) = self.artifacts()
        src = sources.block_source(self.stack, artifact)
        # flex: tarballs made from a git tag (not upstream's release tarballs) lack the generated lexer.
        return _blocks.build_tools(self.stack, [*DEVEL_PACKAGES, "flex", "libmunge-dev"],
                                   "PMIx build tools and hwloc/libevent/munge headers") + [
            generic_autotools(**src, directory=f"pmix-{self.version}", prefix=PREFIX, ldconfig=True,
                              configure_opts=["--with-hwloc", "--with-libevent", "--with-munge", "--disable-static",
                                              "--disable-man-pages"])]

    def runtime(self) -> list:
        if self.source == "distro":
            return super().runtime()
        return _blocks.apt_install(self.stack, [*runtime_packages(self.stack.base.distro), "libmunge2"],
                                   "PMIx runtime libraries") + super().runtime()

    def environment(self) -> dict[str, str]:
        return {"PMIX_MCA_gds": "hash"}

    def labels(self) -> dict[str, str]:
        return {"major": self.version.split(".")[0], "prefix": self.prefix}

    def checks(self) -> list:
        info = "pmix_info" if self.source == "distro" else f"{PREFIX}/bin/pmix_info"
        return [
            checks.library("pmix.lib", "libpmix.so.2"),
            checks.run("pmix.version", f"pmix_info reports PMIx {self.version}", info,
                       expect=rf"PMIX: {re.escape(self.version)}"),
            checks.run("pmix.psec_munge", "PMIx authenticates with munge, as Slurm's pmix plugin asks", info,
                       expect=r"MCA psec: munge"),
        ]
