"""OpenMPI, wired to the stack's UCX, PMIx, CUDA and (optionally) Slurm."""

from __future__ import annotations

import re

from imagekit import checks
from imagekit.components import Component
from imagekit.schema import Option

PREFIX = "/usr/local/openmpi"


class Openmpi(Component):
    name = "openmpi"
    summary = "OpenMPI with UCX (pml ucx), external PMIx, CUDA and Slurm options"
    order = 50
    sources = ("upstream", "distro")
    options = {
        "ucx": Option(bool, True, "use the ucx component (pml ucx)"),
        "pmix": Option(bool, False, "use the pmix component as external PMIx (for srun --mpi=pmix)"),
        "cuda": Option(bool, False, "CUDA-aware build (needs the cuda component)"),
        "slurm": Option(bool, False, "build Slurm support (--with-slurm) for mpirun inside allocations"),
    }
    distro_packages = ("libopenmpi3", "openmpi-bin")
    distro_devel_packages = ("build-essential", "libopenmpi-dev")
    distro_note = "OpenMPI (distro; links the distro's UCX and PMIx)"
    distro_versions = {"debian12": "4.1.4", "debian11": "4.1.0", "ubuntu22": "4.1.2", "ubuntu24": "4.1.6"}

    def configure(self) -> None:
        super().configure()
        if self.source == "distro" and self.enabled("cuda"):
            self.error("cuda", "the distro's OpenMPI is not CUDA-aware",
                       "use `source: upstream` for openmpi, or set `cuda: false`")
        if self.source == "upstream" and int(self.version.split(".")[0]) >= 5 and not self.enabled("pmix"):
            self.error("pmix", "OpenMPI 5 needs an external PMIx here",
                       "add the pmix component and set `pmix: true`")

    @property
    def home(self) -> str:
        """MPI_HOME for builds against this MPI (include/ and lib/ below it)."""
        if self.source == "upstream":
            return PREFIX
        return f"/usr/lib/{self.stack.base.arch}-linux-gnu/openmpi"

    def building_blocks(self) -> list:
        from hpccm import toolchain
        from hpccm.building_blocks import openmpi

        ucx, pmix = self.stack.get("ucx"), self.stack.get("pmix")
        extra = ["--with-slurm"] if self.enabled("slurm") else ["--without-slurm"]
        return [openmpi(
            version=self.version, prefix=PREFIX, ldconfig=True, disable_static=True,
            cuda=self.enabled("cuda"), infiniband=False,
            ucx=ucx.prefix if (ucx and self.enabled("ucx")) else False,
            pmix=pmix.prefix if (pmix and self.enabled("pmix")) else "internal",
            configure_opts=["--disable-getpwuid", "--enable-orterun-prefix-by-default", *extra],
            toolchain=toolchain(CC="gcc", CXX="g++", F77="gfortran", F90="gfortran", FC="gfortran"),
        )]

    def labels(self) -> dict[str, str]:
        return {k: str(self.enabled(k)).lower() for k in ("ucx", "pmix", "cuda", "slurm")}

    def checks(self) -> list:
        out = [
            checks.run("openmpi.version", f"mpirun reports Open MPI {self.version}", "mpirun --version",
                       expect=rf"Open MPI\)? {re.escape(self.version)}"),
            checks.run("openmpi.runs", "mpirun starts 2 local ranks",
                       "mpirun --allow-run-as-root --oversubscribe -np 2 echo rank-ok",
                       expect=r"rank-ok\s+rank-ok"),
        ]
        if self.enabled("ucx"):
            out.append(checks.run("openmpi.pml_ucx", "ompi_info lists the ucx pml", "ompi_info",
                                  expect=r"MCA pml: ucx"))
        if self.enabled("pmix"):
            out.append(checks.run("openmpi.pmix_external", "OpenMPI uses an external PMIx",
                                  "ompi_info", expect=r"MCA pmix: ext\d"))
        if self.enabled("cuda"):
            out.append(checks.run("openmpi.cuda", "OpenMPI is CUDA-aware", "ompi_info --parsable --all",
                                  expect=r"mpi_built_with_cuda_support:value:true"))
        if self.enabled("slurm"):
            out.append(checks.run("openmpi.slurm", "OpenMPI has Slurm support", "ompi_info",
                                  expect=r"MCA ras: slurm"))
        return out
