"""UCX: the communication layer under OpenMPI's ``pml ucx`` (and UCC, NCCL's UCX plugin).

Built thread-safe (``--enable-mt``): without it Open MPI's UCX PML refuses
MPI_THREAD_MULTIPLE and silently falls back to ob1 (TCP) for any threaded MPI
program (ompi ``pml_ucx.c``: "UCP worker does not support
MPI_THREAD_MULTIPLE"). Only the libraries and tools are built: UCX's test
apps and examples are not installed and some do not compile against CUDA 13.
"""

from __future__ import annotations

import re

from imagekit import checks, sources
from imagekit.components import _blocks
from imagekit.components._base import Component, Requires
from imagekit.components.gdrcopy import PREFIX as GDRCOPY_PREFIX
from imagekit.util.schema import Option

PREFIX = "/usr/local/ucx"
# The installed parts of the tree; the top-level Makefile would also build test/apps and examples.
SUBDIRS = ("src/ucm", "src/ucs", "src/uct", "src/ucp", "src/tools/info", "src/tools/vfs", "src/tools/perf",
           "src/tools/profile", "cmake", "config")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


class Ucx(Component):
    name = "ucx"
    summary = "UCX (thread-safe) with optional CUDA, gdrcopy, KNEM, XPMEM and verbs support"
    order = 30
    provides = ("ucx",)
    requires = (Requires("gdrcopy", option="gdrcopy"), Requires("cuda", option="cuda"),
                Requires("rdma", option="ofed"))
    forward_env = ("UCX_",)
    sources = ("upstream", "distro")
    upstream_file = ("ucx-{version}.tar.gz", "https://github.com/openucx/ucx/releases/download/v{version}/ucx-{version}.tar.gz")
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
    distro_versions = {"debian12": "1.13.1", "debian13": "1.18.1", "debian11": "1.10.1", "ubuntu22": "1.12.1",
                       "ubuntu24": "1.16.0"}
    acceptable = {
        "ucx-before-cuda13": "UCX < 1.19.1 built against CUDA 13, which upstream never released it for",
        "ucx-cuda-hooks": "UCX < 1.18.1 with CUDA on x86_64, whose memory hooks fail on R575+ drivers",
    }

    def configure(self) -> None:
        super().configure()
        if self.source == "distro":
            for opt in ("cuda", "gdrcopy", "knem", "xpmem"):
                if self.enabled(opt):
                    self.error(opt, f"the distro's UCX is not built with {opt}",
                               f"use `source: upstream` for ucx, or set `{opt}: false`")
        cuda = self.stack.provider("cuda")
        if self.source == "upstream" and self.enabled("cuda") and cuda is not None \
                and int(cuda.major) >= 12 and _version_tuple(self.version) < (1, 14, 1):
            self.error("version", f"UCX {self.version} does not build against CUDA 12 (fixed in 1.14.1: "
                       "UCX NEWS, \"Fixed compatibility with CUDA 12\")", 'use UCX "1.14.1" or newer')

    def check_stack(self) -> None:
        cuda = self.stack.provider("cuda")
        if self.source != "upstream" or not self.enabled("cuda") or cuda is None:
            return
        version = _version_tuple(self.version)
        if int(cuda.major) >= 13 and version < (1, 19, 1):
            # Finding 9 of the second CUDA review: a release built against a CUDA it predates, patched
            # to compile, is not what upstream tested; CUDA-aware MPI with cuMem/VMM buffers (NCCL >= 2.19,
            # PyTorch's expandable segments) is where it breaks.
            self.refuse_unless_accepted(
                "ucx-before-cuda13", "version",
                f"UCX {self.version} predates CUDA 13: upstream added CUDA 13 in 1.19.1 (UCX NEWS: \"Added "
                "CUDA 13 support to the release pipeline\") and 1.20.0, and this build would only compile "
                "with a typedef patched in", 'use UCX "1.19.1" or newer ("1.20.1")')
        elif self.stack.base.arch == "x86_64" and version < (1, 18, 1):
            self.refuse_unless_accepted(
                "ucx-cuda-hooks", "version",
                f"UCX {self.version} cannot hook libcuda from R575+ drivers on x86_64 (openucx/ucx#10627, fixed "
                "in 1.18.1 and 1.19.0): its memory and registration caches then miss cudaFree, which "
                "crashes CUDA-aware MPI", 'use UCX "1.18.1" or newer ("1.20.1")')

    @property
    def prefix(self) -> str:
        return PREFIX if self.source == "upstream" else "/usr"

    def _cuda13_compat(self) -> list[str]:
        """UCX before 1.19 names PFN_cuMemGetHandleForAddressRange, a typedef CUDA 13 dropped in favour
        of its versioned name; UCX 1.19 switched to the versioned name, and this does the same."""
        cuda = self.stack.provider("cuda")
        if self.enabled("cuda") and cuda is not None and int(cuda.major) >= 13 \
                and _version_tuple(self.version) < (1, 19) and self.accepted("ucx-before-cuda13"):
            return ["CPPFLAGS=-DPFN_cuMemGetHandleForAddressRange=PFN_cuMemGetHandleForAddressRange_v11070"]
        return []

    def building_blocks(self) -> list:
        from hpccm.building_blocks import generic_autotools, knem, xpmem

        blocks = []
        if self.enabled("knem"):
            blocks.append(knem())
        if self.enabled("xpmem"):
            blocks.append(xpmem())
        (artifact,) = self.artifacts()
        src = sources.block_source(self.stack, artifact)
        # Logging stays in (UCX's default, as HPC-X and most sites ship it): UCX_LOG_LEVEL is how a field
        # problem is triaged.
        opts = ["--enable-mt", "--disable-static", "--enable-optimizations",
                "--disable-debug", "--disable-assertions", "--disable-params-check", "--disable-doxygen-doc",
                "--without-java", "--without-go", "--without-rocm",
                "--with-cuda=/usr/local/cuda" if self.enabled("cuda") else "--without-cuda",
                f"--with-gdrcopy={GDRCOPY_PREFIX}" if self.enabled("gdrcopy") else "--without-gdrcopy",
                "--with-knem=/usr/local/knem" if self.enabled("knem") else "--without-knem",
                "--with-xpmem=/usr/local/xpmem" if self.enabled("xpmem") else "--without-xpmem",
                *(["--with-verbs", "--with-rdmacm"] if self.enabled("ofed") else ["--without-verbs", "--without-rdmacm"])]
        make = " ".join(self._cuda13_compat())
        build = [f"for d in {' '.join(SUBDIRS)}; do make -C $d -j$(nproc) {make} install || exit 1; done",
                 "make install-pkgconfigDATA"]
        blocks += _blocks.build_tools(self.stack, ["pkg-config"], "UCX build tools") + [
            generic_autotools(**{k: v for k, v in src.items() if k != "preconfigure"},
                              directory=f"ucx-{self.version}", prefix=PREFIX, ldconfig=True,
                              preconfigure=src["preconfigure"], configure_opts=opts,
                              make=False, install=False, postconfigure=build)]
        return blocks

    def runtime(self) -> list:
        if self.source == "distro":
            return super().runtime()
        # ucx_perftest is built with OpenMP.
        return _blocks.apt_install(self.stack, ["libgomp1"], "UCX runtime libraries") + super().runtime()

    def environment(self) -> dict[str, str]:
        # UCX_VFS_ENABLE=no: no per-process FUSE monitoring daemon socket in containers (CoreWeave's
        # images set it too).
        return {"PATH": f"{PREFIX}/bin:$PATH", "UCX_VFS_ENABLE": "no"} if self.source == "upstream" else {}

    def labels(self) -> dict[str, str]:
        return {k: str(self.enabled(k)).lower() for k in ("cuda", "gdrcopy", "knem", "xpmem", "ofed")}

    def checks(self) -> list:
        out = [
            checks.run("ucx.version", f"ucx_info reports UCX {self.version}", "ucx_info -v",
                       expect=rf"[Vv]ersion:?\s+{re.escape(self.version)}"),
            checks.library("ucx.libucp", "libucp.so.0"),
        ]
        if self.source == "upstream":
            out.append(checks.run("ucx.mt", "UCX is built thread-safe (--enable-mt, for MPI_THREAD_MULTIPLE)",
                                  "ucx_info -b", expect=r"#define ENABLE_MT\s+1"))
        if self.enabled("cuda"):
            out.append(checks.run("ucx.cuda_build", "UCX is built with CUDA (ucx_info -b)", "ucx_info -b",
                                  expect=r"#define HAVE_CUDA\s+1"))
            # Without a GPU: the module that carries the CUDA transports is installed (the closure check
            # resolves its libraries; libcuda is the driver's, mounted at run time).
            out.append(checks.file("ucx.cuda_module", f"{PREFIX}/lib/ucx/libuct_cuda.so.0"))
            out.append(checks.run("ucx.cuda", "UCX offers the cuda_copy transport", "ucx_info -d",
                                  expect="cuda_copy", needs="gpu"))
        if self.enabled("ofed"):
            out.append(checks.run("ucx.verbs", "UCX offers a verbs transport", "ucx_info -d",
                                  expect=r"Transport: (rc|dc|ud)_(verbs|mlx5)", needs="fabric"))
        return out
