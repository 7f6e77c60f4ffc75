"""OpenMPI, wired to the stack's UCX, PMIx, CUDA and (optionally) Slurm.

Configured explicitly rather than by probing: the external PMIx with the
same hwloc and libevent it was built with (Open MPI's docs: the run-time
linker must load exactly one copy of each), no Fortran bindings (forcing
``FC=gfortran`` without a Fortran compiler aborts configure: "Could not run a
simple Fortran program"), and the UCX PML (ob1's openib and UCX's BTL left
out, as Open MPI recommends with UCX).
"""

from __future__ import annotations

import re

from imagekit import checks, sources
from imagekit.components import _blocks
from imagekit.components._base import Component, Requires
from imagekit.components.pmix import DEVEL_PACKAGES, runtime_packages
from imagekit.util.schema import Option

PREFIX = "/usr/local/openmpi"
# Open MPI's UCX components look for Mellanox devices and verbs transports only: on a host without a
# fabric (a CI runner, a CPU test node) pml ucx then refuses to start. These let it use shared memory
# and TCP; a site's fabric settings replace them.
NO_FABRIC_ENV = "OMPI_MCA_pml_ucx_tls=any OMPI_MCA_pml_ucx_devices=any OMPI_MCA_opal_warn_on_missing_libcuda=0"
# Slurm's PMI-2 client (slurm-wlm's libpmi2-0-dev: pmi2.h under /usr/include/slurm, and its library):
# built against here on Debian 12 and Debian 13, the same slurm-wlm names in Debian 11 and Ubuntu
# 20.04/22.04. The 64-bit time_t transition renamed the library package on Debian 13 (slurm-wlm 24.11)
# and Ubuntu 24.04 (23.11) to libpmi2-0t64; the -dev package kept its name.
PMI2_PACKAGES = {
    **{d: ("libpmi2-0-dev", "libpmi2-0") for d in ("debian11", "debian12", "ubuntu20", "ubuntu22")},
    **{d: ("libpmi2-0-dev", "libpmi2-0t64") for d in ("debian13", "ubuntu24")},
}


def _vt(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


class Openmpi(Component):
    name = "openmpi"
    summary = "OpenMPI with UCX (pml ucx), external PMIx, CUDA and Slurm options"
    order = 50
    provides = ("mpi",)
    requires = (Requires("pmix", option="pmix", why="an external PMIx matching the site's Slurm"),
                Requires("ucx", option="ucx"), Requires("cuda", option="cuda"))
    sources = ("upstream", "distro")
    upstream_file = ("openmpi-{version}.tar.bz2",
                     "https://download.open-mpi.org/release/open-mpi/v{series}/openmpi-{version}.tar.bz2")
    options = {
        "ucx": Option(bool, True, "use the ucx component (pml ucx)"),
        "pmix": Option(bool, False, "use the pmix component as external PMIx (for srun --mpi=pmix)"),
        "cuda": Option(bool, False, "CUDA-aware build (needs the cuda component)"),
        # Open MPI 4.x recognises `srun --mpi=pmix` direct launch through its Slurm schizo component:
        # built --without-slurm, every rank stops in MPI_Init ("OMPI was not built with SLURM support").
        # The support needs no Slurm library, so it is on unless a site turns it off.
        "slurm": Option(bool, True, "Slurm support (--with-slurm): srun direct launch (4.x) and mpirun "
                                    "inside allocations; needs no Slurm library"),
        # For sites whose Slurm has no pmix plugin: `srun --mpi=pmi2` against Slurm's libpmi2.
        "pmi2": Option(bool, False, "Slurm's PMI-2 (--with-pmi, libpmi2) for `srun --mpi=pmi2`; "
                                    "Open MPI 4.x built from source only (Open MPI 5 speaks PMIx only)"),
    }
    distro_packages = ("libopenmpi3", "openmpi-bin")
    distro_devel_packages = ("build-essential", "libopenmpi-dev")
    distro_note = "OpenMPI (distro; links the distro's UCX and PMIx)"
    distro_versions = {"debian12": "4.1.4", "debian13": "5.0.7", "debian11": "4.1.0", "ubuntu22": "4.1.2",
                       "ubuntu24": "4.1.6"}

    def configure(self) -> None:
        super().configure()
        if self.source == "distro" and self.enabled("cuda"):
            self.error("cuda", "the distro's OpenMPI is not CUDA-aware",
                       "use `source: upstream` for openmpi, or set `cuda: false`")
        if self.source == "upstream" and self.major >= 5 and not self.enabled("pmix"):
            self.error("pmix", "OpenMPI 5 needs an external PMIx here",
                       "add the pmix component and set `pmix: true`")
        pmix = self.stack.provider("pmix")
        if self.source == "upstream" and self.major >= 5 and pmix is not None and self.enabled("pmix") \
                and tuple(int(x) for x in re.findall(r"\d+", pmix.version)[:2]) < (4, 2):
            pmix.error("version", f"OpenMPI {self.version} needs PMIx 4.2.0 or newer, not {pmix.version} "
                       "(ompi VERSION: pmix_min_version=4.2.0)", 'use PMIx "4.2.9" or "5.0.7"')
        if self.source == "upstream" and self.series == "4.1" and pmix is not None and self.enabled("pmix") \
                and pmix.source == "upstream" and _vt(self.version) < (4, 1, 6) and _vt(pmix.version) >= (4, 2, 3):
            # Open MPI 4.1.6 NEWS: "properly handle PMIx v>=4.2.3"; before it, its pmix4x glue breaks on them.
            self.error("version", f"Open MPI {self.version} cannot use PMIx {pmix.version}: Open MPI 4.1 handles "
                       "PMIx 4.2.3 and later only from 4.1.6 (Open MPI NEWS)",
                       'use Open MPI "4.1.8" (or "5.0.10" with PMIx 5), or PMIx "4.2.2"')
        if self.enabled("pmi2"):
            self._check_pmi2()

    def _check_pmi2(self) -> None:
        if self.source != "upstream":
            self.error("pmi2", "the distro's Open MPI is not built against Slurm's libpmi2",
                       "use `source: upstream` with Open MPI 4.1 (e.g. \"4.1.8\"), or launch with "
                       "`srun --mpi=pmix` and drop `pmi2`")
        if self.major >= 5:
            # Open MPI 5.0 removed its PMI-1/PMI-2 components with ORTE: its configure lists --with-pmi as
            # "*DELETED*" ("--with-pmi options were removed in v5.0"), and under `srun --mpi=pmi2` its ranks
            # start as singletons, each rank 0 of 1 (open-mpi/ompi#13523).
            self.error("pmi2", f"Open MPI {self.version} has no PMI-2 support: Open MPI 5 removed PMI-1/PMI-2 "
                       "and speaks PMIx only (under `srun --mpi=pmi2` every rank starts alone, rank 0 of 1)",
                       "launch with `srun --mpi=pmix` (Slurm's pmix plugin, the pmix component with "
                       "`pmix: true`) and drop `pmi2`, or use Open MPI 4.1 (e.g. \"4.1.8\") for `pmi2: true`")
        if self.stack.base.distro not in PMI2_PACKAGES:
            self.error("pmi2", f"Slurm's PMI-2 package names on {self.stack.base.distro} are not known here",
                       f"use a {', '.join(PMI2_PACKAGES)} base, or launch with `srun --mpi=pmix`")

    def check_stack(self) -> None:
        """CUDA-aware MPI over pml ucx moves GPU buffers through UCX: a UCX without CUDA cannot."""
        ucx = self.stack.provider("ucx")
        if ucx is not None and self.enabled("cuda") and self.enabled("ucx") and not ucx.enabled("cuda"):
            ucx.error("cuda", "`openmpi.cuda: true` over pml ucx needs a CUDA-enabled UCX",
                      "set `cuda: true` on ucx (source: upstream), or `cuda: false` on openmpi")

    def url_fields(self) -> dict[str, str]:
        return {"version": self.version, "series": self.series}

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0]) if self.version[:1].isdigit() else 0

    @property
    def series(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @property
    def prefix(self) -> str:
        return PREFIX if self.source == "upstream" else self.home

    @property
    def home(self) -> str:
        """MPI_HOME for builds against this MPI (include/ and lib/ below it)."""
        if self.source == "upstream":
            return PREFIX
        return f"/usr/lib/{self.stack.base.arch}-linux-gnu/openmpi"

    def configure_opts(self) -> list[str]:
        ucx, pmix = self.stack.provider("ucx"), self.stack.provider("pmix")
        opts = ["--disable-static", "--disable-getpwuid", "--disable-mpi-fortran", "--disable-oshmem",
                "--with-hwloc=external", "--with-libevent=external",
                "--with-slurm" if self.enabled("slurm") else "--without-slurm"]
        if pmix is not None and self.enabled("pmix"):
            opts.append(f"--with-pmix={pmix.prefix}")  # Debian's libpmix-dev lives in its own pmix2 tree
        if ucx is not None and self.enabled("ucx"):
            opts.append(f"--with-ucx={ucx.prefix}")
        if self.enabled("pmi2"):
            # Debian's libpmi2-0-dev: /usr/include/slurm/pmi2.h, the library in the multiarch directory.
            opts += ["--with-pmi=/usr", f"--with-pmi-libdir=/usr/lib/{self.stack.base.arch}-linux-gnu"]
        if self.enabled("cuda"):
            # Open MPI 5 links its CUDA component against libcuda: the toolkit's link stub.
            opts += ["--with-cuda=/usr/local/cuda"] + \
                (["--with-cuda-libdir=/usr/local/cuda/lib64/stubs"] if self.major >= 5 else [])
        else:
            opts.append("--without-cuda")
        if self.major < 5:
            # 4.x: mpirun finds its prefix in containers; no openib (UCX carries verbs).
            opts += ["--enable-orterun-prefix-by-default", "--without-verbs", "--enable-mca-no-build=btl-uct"]
        return opts

    def building_blocks(self) -> list:
        from hpccm.building_blocks import generic_autotools

        (artifact,) = self.artifacts()
        src = sources.block_source(self.stack, artifact)
        # openssh-client: Open MPI 4's mpirun will not start, even for local ranks, without an rsh agent.
        # flex: upstream's release tarballs carry the flex-generated *_lex.c files, a tarball a site made
        # from the git tag (as the stand-in mirror's 5.0.10) does not, and its configure stops without flex.
        pmi2 = [PMI2_PACKAGES[self.stack.base.distro][0]] if self.enabled("pmi2") else []
        return _blocks.build_tools(self.stack, [*DEVEL_PACKAGES, "openssh-client", "perl", "flex", *pmi2],
                                   "Open MPI build tools") + [
            generic_autotools(**src, directory=f"openmpi-{self.version}", prefix=PREFIX, ldconfig=True,
                              configure_opts=self.configure_opts(),
                              # Open MPI 5 installs its whole HTML manual (69 MB, 13 % of debian-cuda's
                              # runtime) and man pages: no image keeps distro docs either (_blocks' dpkg
                              # excludes). The help texts mpirun and its components print stay.
                              postinstall=[f"rm -rf {PREFIX}/share/doc {PREFIX}/share/man"])]

    @property
    def mpicc(self) -> str:
        return f"{PREFIX}/bin/mpicc" if self.source == "upstream" else "mpicc"

    def devel(self) -> list:
        cuda_probe = _blocks.cuda_mpi_probe(self.mpicc, "/usr/local/cuda") if self.enabled("cuda") else []
        return super().devel() + _blocks.mpi_probe(self.mpicc) + cuda_probe

    def runtime(self) -> list:
        probe = _blocks.copy_from_devel(_blocks.MPI_PROBE) + \
            (_blocks.copy_from_devel(_blocks.CUDA_MPI_PROBE) if self.enabled("cuda") else [])
        if self.source == "distro":
            return super().runtime() + probe
        # mpirun starts remote daemons over ssh in inside-out launches.
        pmi2 = [PMI2_PACKAGES[self.stack.base.distro][1]] if self.enabled("pmi2") else []
        return _blocks.apt_install(self.stack, [*runtime_packages(self.stack.base.distro), "openssh-client", *pmi2],
                                   "Open MPI runtime libraries") + super().runtime() + probe

    def environment(self) -> dict[str, str]:
        if self.source != "upstream":
            return {}
        # With UCX built in, ask for pml ucx outright: if UCX cannot be used the job fails and says why,
        # instead of running on ob1 over TCP unnoticed (HPCCM's osu recipe does the same). A job can
        # override it (AWS's EFA recipes set ^ucx).
        return {"PATH": f"{PREFIX}/bin:$PATH", **({"OMPI_MCA_pml": "ucx"} if self.enabled("ucx") else {})}

    def labels(self) -> dict[str, str]:
        return {k: str(self.enabled(k)).lower() for k in ("ucx", "pmix", "cuda", "slurm", "pmi2")}

    def checks(self) -> list:
        out = [
            checks.run("openmpi.version", f"mpirun reports Open MPI {self.version}", "mpirun --version",
                       expect=rf"Open MPI\)? {re.escape(self.version)}"),
            checks.run("openmpi.runs", "mpirun starts 2 local ranks",
                       "mpirun --allow-run-as-root --oversubscribe -np 2 echo rank-ok",
                       expect=r"rank-ok\s+rank-ok"),
            # UCX on any device and transport: the checking host may have no fabric, and pml ucx
            # otherwise looks for mlx* devices only (and this image asks for pml ucx outright).
            checks.run("openmpi.ring", f"2 ranks pass a 1 MiB message round a ring and allreduce ({_blocks.MPI_PROBE})",
                       f"{NO_FABRIC_ENV} mpirun --allow-run-as-root --oversubscribe -np 2 {_blocks.MPI_PROBE}",
                       expect=r"2 ranks, ring of 1048576 bytes and allreduce passed"),
        ]
        if self.enabled("ucx"):
            out.append(checks.run("openmpi.pml_ucx", "ompi_info lists the ucx pml", "ompi_info",
                                  expect=r"MCA pml: ucx"))
        if self.enabled("pmix"):
            # 4.x names its PMIx glue component (ext3x for an external PMIx >= 3); 5.x has no such
            # framework and shows the choice only in its configure line.
            if self.major < 5:
                out.append(checks.run("openmpi.pmix_external", "OpenMPI uses an external PMIx", "ompi_info",
                                      expect=r"MCA pmix: ext\d"))
            else:
                out.append(checks.run("openmpi.pmix_external", "OpenMPI is configured with an external PMIx",
                                      "ompi_info --parsable", expect=r"config:cli:.*'--with-pmix=(?!internal)[^']+'"))
        if self.enabled("pmi2"):
            out.append(checks.run("openmpi.pmi2", "Open MPI has Slurm's PMI-2 (srun --mpi=pmi2)", "ompi_info",
                                  expect=r"MCA pmix: s2"))
        if self.enabled("cuda"):
            out.append(checks.run("openmpi.cuda", "OpenMPI is CUDA-aware", "ompi_info --parsable --all",
                                  expect=r"mpi_built_with_cuda_support:value:true"))
            # What the build flag cannot tell: that device memory really moves, through the UCX (or
            # shared-memory) path this image's MPI takes at run time.
            out.append(checks.run("openmpi.cuda_ring", "2 ranks pass 4 MiB of GPU memory round a ring and allreduce "
                                  f"in device memory ({_blocks.CUDA_MPI_PROBE})",
                                  f"{NO_FABRIC_ENV} mpirun --allow-run-as-root --oversubscribe -np 2 "
                                  f"{_blocks.CUDA_MPI_PROBE}",
                                  expect=r"2 ranks, ring of 4194304 bytes of GPU memory and allreduce passed",
                                  needs="gpu"))
            # Without a GPU: the probe was compiled against this MPI's headers, which say it is CUDA-aware.
            out.append(checks.run("openmpi.cuda_probe", "the CUDA-aware MPI probe was built against a CUDA-aware MPI "
                                  f"({_blocks.CUDA_MPI_PROBE} --built)", f"{_blocks.CUDA_MPI_PROBE} --built",
                                  expect=r"built against a CUDA-aware MPI \(MPIX_CUDA_AWARE_SUPPORT 1\)"))
        if self.enabled("slurm"):
            # 5.x hands launching to PRRTE, whose own prte_info lists its Slurm components.
            info = "ompi_info" if self.major < 5 else "prte_info"
            out.append(checks.run("openmpi.slurm", "OpenMPI has Slurm support", info,
                                  expect=r"MCA ras: slurm"))
            if self.major < 5:
                out.append(checks.run("openmpi.srun_direct_launch",
                                      "Open MPI 4.x recognises srun direct launch (schizo slurm)",
                                      "ompi_info", expect=r"MCA schizo: slurm"))
        return out
