"""NVIDIA HPC-X: Open MPI, UCX (with its multi-threaded build), UCC, HCOLL, SHARP and the SHARP NCCL plugin.

One prebuilt tarball fills three roles: the stack's MPI (HPC-X's Open MPI, at
``/opt/hpcx/ompi``, so nccl-tests builds against it as MPI_HOME),
its UCX, and the NCCL network plugin (``nccl_rdma_sharp_plugin/lib/libnccl-net.so``,
which NCCL loads by that default name when NCCL_NET_PLUGIN is unset).

Layout and names follow HPC-X's documentation and HPCCM's ``hpcx`` block:
``hpcx-v{version}-gcc-{ofed}-{os}-{cuda}-{arch}.tbz`` under ``v{version}``
(``v{version}_{cuda}`` from 2.24); the ``doca_ofed`` label from 2.21,
``mlnx_ofed`` before; ``inbox`` builds for distro rdma-core. The environment
that ``hpcx_load`` sets interactively is set as image ENV here, and the library
directories go to ld.so.conf.d rather than LD_LIBRARY_PATH (Enroot and Pyxis
keep the image's ld.so.cache). ``ucx/mt`` is used by default: Open MPI under
MPI_THREAD_MULTIPLE needs a thread-safe UCX. HPC-X's pkg-config, libtool and
CMake files name its build host's ``/build-result/...`` prefix; they are
rewritten to the install prefix so builds against it link.

NVIDIA publishes no checksums for HPC-X tarballs: a stack pins the sha256 of
the file it mirrors.
"""

from __future__ import annotations

import re

from imagekit import checks, sources
from imagekit.components import _blocks
from imagekit.components._base import Component, Requires
from imagekit.util.schema import Option

PREFIX = "/opt/hpcx"
# HPC-X release -> the Open MPI series it loads by default ("HPC-X includes Open MPI v4.1.x": the
# installation pages of HPC-X 2.19 to 2.22; HPC SDK 26.5 release notes: "Open MPI v5.0.x is now the default
# MPI implementation in HPC-X 2.50 ... UCC is the default collective framework ... HCOLL ... disabled by
# default"); other releases are refused, not guessed.
OMPI_SERIES = {"2.19": "4.1", "2.20": "4.1", "2.21": "4.1", "2.21.3": "4.1", "2.22": "4.1", "2.22.1": "4.1",
               "2.26": "4.1", "2.50": "5.0"}
# Releases that ship both Open MPIs side by side, in ompi4/ and ompi5/ (with ompi/ the default's link):
# CoreWeave's image on hpcx-v2.26-...-cuda13 removes /opt/hpcx/ompi4 and /opt/hpcx/ompi5 after rebuilding.
BOTH_OMPI = ("2.26", "2.50")
OS_LABELS = {"ubuntu20": "ubuntu20.04", "ubuntu22": "ubuntu22.04", "ubuntu24": "ubuntu24.04",
             "rhel8": "redhat8", "rhel9": "redhat9", "rockylinux8": "redhat8", "rockylinux9": "redhat9"}
LIB_DIRS = ("ompi/lib", "{ucx}/lib", "{ucx}/lib/ucx", "ucc/lib", "ucc/lib/ucc", "hcoll/lib", "sharp/lib",
            "nccl_rdma_sharp_plugin/lib")


class Hpcx(Component):
    name = "hpcx"
    summary = "NVIDIA HPC-X: Open MPI, UCX(-MT), UCC, HCOLL, SHARP and the SHARP NCCL plugin, prebuilt"
    order = 50
    provides = ("mpi", "ucx", "ucc", "sharp", "nccl-net-plugin")
    requires = (Requires("cuda", why="HPC-X's CUDA builds: UCX's CUDA transports and the SHARP NCCL plugin"),
                Requires("rdma", why="UCX verbs, HCOLL and SHARP run over rdma-core or DOCA/MLNX OFED"))
    forward_env = ("HCOLL_", "SHARP_", "UCC_")
    sources = ("upstream",)
    upstream_file = ("{label}.tbz", "https://content.mellanox.com/hpc/hpc-x/{directory}/{label}.tbz")
    prefix = PREFIX
    options = {
        "ofed": Option(str, "doca_ofed", "the OFED the build is for: doca_ofed (2.21+), mlnx_ofed (2.16-2.20), "
                                         "or inbox (distro rdma-core)",
                       choices=("doca_ofed", "mlnx_ofed", "inbox")),
        "cuda": Option(str, None, 'the CUDA build label, e.g. "cuda12" (default: the cuda component\'s major)',
                       pattern=r"cuda[0-9]+", pattern_help='"cuda" and a CUDA major, e.g. "cuda12"'),
        "multi_thread": Option(bool, True, "use HPC-X's thread-safe UCX (ucx/mt), for MPI_THREAD_MULTIPLE"),
        "keep_sources": Option(bool, False, "keep HPC-X's sources/ directory (rebuilds of its Open MPI)"),
        "hcoll": Option(bool, False, "leave HCOLL on in Open MPI's collectives (off by default: opt in where "
                                     "HCOLL is tuned for the fabric; OMPI_MCA_coll_hcoll_enable=1 per job also works)"),
        "ompi": Option(str, None, 'which of the release\'s Open MPIs is the stack\'s MPI, "4" or "5" (HPC-X 2.26 and '
                                  '2.50 ship both; default: the release\'s own default, 4 in 2.26, 5 in 2.50)',
                       choices=("4", "5")),
        "sharp": Option(bool, False, "let NCCL load the SHARP plugin (libnccl-net.so) by default; off, the image "
                                     "sets NCCL_NET_PLUGIN=none so NCCL uses its own IB; a SHARP job then sets "
                                     "NCCL_NET_PLUGIN= and NCCL_COLLNET_ENABLE=1"),
    }

    def configure(self) -> None:
        super().configure()
        if self.stack.base.distro not in OS_LABELS:
            self.error(None, f"HPC-X is published for Ubuntu and RHEL, not {self.stack.base.distro}",
                       "use an Ubuntu or RHEL-family base (e.g. nvidia/cuda:12.6.3-devel-ubuntu22.04)")
        if self.opts.get("version") and self.version not in OMPI_SERIES:
            self.error("version", f"imagekit does not know which Open MPI HPC-X {self.version} carries",
                       "use one of: " + ", ".join(OMPI_SERIES))
        if self.opts.get("ompi") and self.version not in BOTH_OMPI:
            self.error("ompi", f"HPC-X {self.version} ships one Open MPI ({OMPI_SERIES.get(self.version)})",
                       "drop `ompi:`, or use HPC-X " + " or ".join(BOTH_OMPI) + " (Open MPI 4.1 and 5.0 side by side)")

    def check_stack(self) -> None:
        cuda = self.stack.provider("cuda")
        if self.opts.get("cuda") and cuda is not None and self.opts["cuda"] != f"cuda{cuda.major}":
            self.error("cuda", f"the {self.opts['cuda']} build of HPC-X does not match this stack's CUDA "
                       f"{cuda.version}", f'drop `cuda:` (it follows the cuda component: "cuda{cuda.major}")')
        if self.opts["ofed"] == "doca_ofed" and self._minor < (2, 21):
            self.error("ofed", f"HPC-X {self.version} has no doca_ofed build (from 2.21)", "use `ofed: mlnx_ofed`")
        rdma = self.stack.provider("rdma")
        flavor = getattr(rdma, "opts", {}).get("flavor")
        wanted = {"doca": "doca_ofed", "mlnx": "mlnx_ofed", "inbox": "inbox"}.get(flavor)
        if wanted and wanted != self.opts["ofed"]:
            # HPC-X's UCX, HCOLL and SHARP are linked against that OFED's rdma-core (its verbs providers).
            self.error("ofed", f"HPC-X's {self.opts['ofed']} build does not match the image's RDMA user space "
                       f"({rdma.name} flavor {flavor}: {wanted})",
                       f"use `ofed: {wanted}`" + (" (HPC-X 2.21 or later)" if wanted == "doca_ofed" else "")
                       + f", or the ofed flavor HPC-X's {self.opts['ofed']} build is for")

    @property
    def _minor(self) -> tuple[int, int]:
        # A version imagekit has no table for is refused in configure(); until that error is raised,
        # read what digits there are ("12" is 12.0) rather than fail to unpack.
        major, minor = ([int(x) for x in re.findall(r"\d+", self.version)] + [0, 0])[:2]
        return major, minor

    @property
    def ompi_series(self) -> str:
        """The Open MPI series the stack uses: the chosen one of a two-MPI release, else the release's."""
        chosen = self.opts.get("ompi")
        return {"4": "4.1", "5": "5.0"}[chosen] if chosen else OMPI_SERIES.get(self.version, "unknown")

    @property
    def home(self) -> str:
        """MPI_HOME: HPC-X's Open MPI (bin/mpicc, include, lib); the chosen one's own directory when the
        release ships two, so a later change of the default link cannot switch it."""
        if self.version in BOTH_OMPI:
            return f"{PREFIX}/ompi{self.ompi_series[0]}"
        return f"{PREFIX}/ompi"

    @property
    def ucx_dir(self) -> str:
        return f"{PREFIX}/ucx/mt" if self.enabled("multi_thread") else f"{PREFIX}/ucx"

    def url_fields(self) -> dict[str, str]:
        provider = self.stack.provider("cuda")  # None only until the requirement check refuses the stack
        cuda = self.opts.get("cuda") or (f"cuda{provider.major}" if provider is not None else "cuda")
        label = (f"hpcx-v{self.version}-gcc-{self.opts['ofed']}-"
                 f"{OS_LABELS.get(self.stack.base.distro, 'unknown')}-{cuda}-{self.stack.base.arch}")
        directory = f"v{self.version}_{cuda}" if self._minor >= (2, 24) else f"v{self.version}"
        return {"version": self.version, "label": label, "directory": directory}

    def role_versions(self) -> dict[str, str]:
        return {"mpi": self.ompi_series, "ucx": f"hpcx-{self.version}",
                "ucc": f"hpcx-{self.version}", "sharp": f"hpcx-{self.version}",
                "nccl-net-plugin": f"hpcx-{self.version}"}

    def _lib_dirs(self) -> list[str]:
        ucx = "ucx/mt" if self.enabled("multi_thread") else "ucx"
        ompi = self.home.removeprefix(PREFIX + "/")
        return [f"{PREFIX}/{d.format(ucx=ucx).replace('ompi/', ompi + '/', 1)}" for d in LIB_DIRS]

    def _ldconfig(self) -> list:
        return _blocks.shell_step([f"printf '%s\\n' {' '.join(self._lib_dirs())} > /etc/ld.so.conf.d/hpcx.conf",
                                   "ldconfig"])

    def building_blocks(self) -> list:
        from hpccm.building_blocks import generic_build

        (artifact,) = self.artifacts()
        src = sources.block_source(self.stack, artifact)
        install = [*src["preconfigure"], f"mkdir -p {PREFIX}", f"cp -a . {PREFIX}/",
                   # HPC-X's .pc/.la/.cmake files name its build host's prefix.
                   f"grep -rlIF /build-result {PREFIX} | xargs -r sed -i -E 's@/build-result/[^/\"[:space:]]+@{PREFIX}@g'"]
        if not self.enabled("keep_sources"):
            install.append(f"rm -rf {PREFIX}/sources")
        return _blocks.build_tools(self.stack, ["bzip2", "libnuma1", "openssh-client"], "HPC-X unpacking") + [
            generic_build(**{k: v for k, v in src.items() if k != "preconfigure"},
                          directory=self.url_fields()["label"], build=install, prefix=PREFIX,
                          runtime=[PREFIX])] + self._ldconfig()

    def devel(self) -> list:
        return super().devel() + _blocks.mpi_probe(f"{self.home}/bin/mpicc")

    def runtime(self) -> list:
        return _blocks.apt_install(self.stack, ["libnuma1", "openssh-client"], "HPC-X runtime libraries") + \
            super().runtime() + self._ldconfig() + _blocks.copy_from_devel(_blocks.MPI_PROBE)

    def environment(self) -> dict[str, str]:
        ompi = self.home
        env = {
            "HPCX_DIR": PREFIX, "HPCX_MPI_DIR": ompi, "HPCX_UCX_DIR": self.ucx_dir,
            "HPCX_UCC_DIR": f"{PREFIX}/ucc", "HPCX_HCOLL_DIR": f"{PREFIX}/hcoll", "HPCX_SHARP_DIR": f"{PREFIX}/sharp",
            "HPCX_NCCL_RDMA_SHARP_PLUGIN_DIR": f"{PREFIX}/nccl_rdma_sharp_plugin",
            "MPI_HOME": ompi, "OMPI_HOME": ompi, "OPAL_PREFIX": ompi,
            "PATH": f"{ompi}/bin:{self.ucx_dir}/bin:{PREFIX}/ucc/bin:{PREFIX}/hcoll/bin:{PREFIX}/sharp/bin:$PATH",
            "CPATH": f"{ompi}/include:{self.ucx_dir}/include:{PREFIX}/ucc/include:{PREFIX}/hcoll/include:"
                     f"{PREFIX}/sharp/include",
            "PKG_CONFIG_PATH": f"{ompi}/lib/pkgconfig:{self.ucx_dir}/lib/pkgconfig:{PREFIX}/hcoll/lib/pkgconfig:"
                               f"{PREFIX}/sharp/lib/pkgconfig",
            # HPC-X's Open MPI carries its own PMIx client, so the pmix component (which sets this) is not in
            # the stack; under srun --mpi=pmix its shared-memory dstore errors or hangs (open-mpi/ompi#7516).
            "PMIX_MCA_gds": "hash",
        }
        if not self.enabled("hcoll"):
            env["OMPI_MCA_coll_hcoll_enable"] = "0"
        if not self.enabled("sharp"):
            # With NCCL_NET_PLUGIN unset NCCL loads libnccl-net.so, here the SHARP plugin, whose IB net then
            # replaces NCCL's own on every job, SHARP or not.
            env["NCCL_NET_PLUGIN"] = "none"
        return env

    def labels(self) -> dict[str, str]:
        return {"prefix": PREFIX, "ompi": self.ompi_series, "ofed": self.opts["ofed"],
                "multi_thread": str(self.enabled("multi_thread")).lower(), "pmix": "internal"}

    def checks(self) -> list:
        ucx = self.ucx_dir
        return [
            checks.file("hpcx.mpirun", f"{self.home}/bin/mpirun"),
            checks.run("hpcx.ompi", f"HPC-X's Open MPI is {self.ompi_series}.x", "ompi_info --version",
                       expect=rf"Open MPI\)? v?{re.escape(self.ompi_series)}"),
            checks.file("hpcx.ucx", f"{ucx}/lib/libucp.so"),
            checks.run("hpcx.ucx_mt" if self.enabled("multi_thread") else "hpcx.ucx_info",
                       "HPC-X's UCX is thread-safe (ucx/mt)" if self.enabled("multi_thread") else "ucx_info runs",
                       "ucx_info -b", expect=r"#define ENABLE_MT\s+1" if self.enabled("multi_thread") else r"UCX"),
            checks.file("hpcx.ucc", f"{PREFIX}/ucc/lib/libucc.so"),
            checks.file("hpcx.hcoll", f"{PREFIX}/hcoll/lib/libhcoll.so"),
            checks.file("hpcx.sharp", f"{PREFIX}/sharp/lib/libsharp_coll.so"),
            checks.run("hpcx.nccl_plugin", "NCCL finds the SHARP plugin by its default name (libnccl-net.so)",
                       "ldconfig -p | grep -F ' libnccl-net.so '",
                       expect=rf"=> {PREFIX}/nccl_rdma_sharp_plugin/lib/libnccl-net\.so"),
            checks.run("hpcx.no_build_prefix", "no HPC-X file names its build host's /build-result prefix",
                       f"! grep -rlIF /build-result {PREFIX}/ompi/lib/pkgconfig {ucx}/lib/pkgconfig", expect=r"^$"),
        ]
