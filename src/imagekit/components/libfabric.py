"""libfabric (OFI) built from upstream's release, with CUDA (and gdrcopy) memory support.

No distro builds libfabric with CUDA, so an NCCL net plugin over the distro's library has no
GPUDirect RDMA and stages every transfer through host memory (second CUDA review, finding 2).
Built here ``--with-cuda`` (``--enable-cuda-dlopen``: libcuda is the host driver's, opened at run
time, so the image links no driver library) and optionally ``--with-gdrcopy``, with only the
providers asked for (``--enable-only``): ``efa`` (AWS; its verbs extension ``efadv`` comes from
rdma-core, which the ofed component provides), ``shm``, ``tcp``, ``rxm``, ``verbs``.

Slingshot (HPE CXI): the provider needs HPE's user-space libcxi and the Cassini and CXI uAPI
headers. ``cxi: true`` builds it against those, found under ``cxi_prefix`` in the base image (a
site base with HPE's Slingshot host software). Without them (any base here) a Slingshot image
builds libfabric without CXI and the site binds its host's libfabric, which has CXI, over this
prefix at run time: the plugin above it is built against libfabric >= 1.22 headers, so either
library serves it (``docs/fabrics.md``).
"""

from __future__ import annotations

import re

from imagekit import checks, sources
from imagekit.components import _blocks
from imagekit.components._base import Component, Requires
from imagekit.util.schema import Option

PREFIX = "/opt/libfabric"
PROVIDERS = ("efa", "shm", "tcp", "rxm", "verbs", "udp", "rxd", "sm2", "lnx", "cxi")
# Build headers and libraries each provider needs from the distro (rdma-core's for efa and verbs).
PROVIDER_PACKAGES = {"efa": ["libibverbs-dev", "librdmacm-dev"], "verbs": ["libibverbs-dev", "librdmacm-dev"],
                     "cxi": ["libcurl4-openssl-dev", "libjson-c-dev", "libnl-3-dev"]}


class Libfabric(Component):
    name = "libfabric"
    summary = "libfabric (OFI) from upstream's release: CUDA and gdrcopy memory, chosen providers, CXI on request"
    # After nccl-tests and before the net plugins: adding a fabric to a stack keeps every layer below it.
    order = 72
    provides = ("libfabric",)
    requires = (Requires("cuda", option="cuda", why="CUDA memory registration (GPUDirect RDMA)"),
                Requires("gdrcopy", option="gdrcopy", why="gdrcopy for small device copies"))
    forward_env = ("FI_",)
    sources = ("upstream",)
    upstream_file = ("libfabric-{version}.tar.bz2",
                     "https://github.com/ofiwg/libfabric/releases/download/v{version}/libfabric-{version}.tar.bz2")
    prefix = PREFIX
    options = {
        "cuda": Option(bool, True, "CUDA memory support (--with-cuda, libcuda opened at run time)"),
        "gdrcopy": Option(bool, False, "gdrcopy support (--with-gdrcopy, opened at run time)"),
        "providers": Option(list, ["efa", "shm", "tcp", "rxm"], "providers to build (--enable-only): "
                            + ", ".join(PROVIDERS), item_type=str, pattern="|".join(PROVIDERS),
                            pattern_help="one of " + ", ".join(PROVIDERS)),
        "cxi": Option(bool, False, "HPE Slingshot's CXI provider: needs libcxi and the Cassini/CXI uAPI headers "
                                   "under cxi_prefix in the base image"),
        "cxi_prefix": Option(str, "/usr", "where the base image has HPE's libcxi (lib, include)",
                             pattern=r"/[A-Za-z0-9_./-]*", pattern_help="an absolute path"),
    }

    def configure(self) -> None:
        super().configure()
        providers = list(self.opts.get("providers") or [])
        if not providers:
            self.error("providers", "libfabric with no provider moves no data", "list at least one, e.g. [tcp]")
        if self.enabled("cxi") != ("cxi" in providers):
            self.error("cxi" if self.enabled("cxi") else "providers",
                       "`cxi: true` and the `cxi` provider go together (CXI needs HPE's libcxi in the base image)",
                       "add cxi to providers and set `cxi: true`, or drop both (bind the host's libfabric with CXI at "
                       "run time instead)")
        if self.stack.base.family != "deb":
            self.error(None, "libfabric's build packages are named for Debian/Ubuntu bases here",
                       "use a Debian or Ubuntu base")

    def check_stack(self) -> None:
        verbs = [p for p in self.opts["providers"] if p in ("efa", "verbs")]
        if verbs and self.stack.provider("rdma") is None:
            self.error("providers", f"the {', '.join(verbs)} provider builds on rdma-core's verbs (efadv for efa), and "
                       "this stack has no RDMA user space", "add `ofed: {flavor: inbox}` (or doca) to components, or "
                       f"drop {', '.join(verbs)} from providers")

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", self.version)[:3])

    def configure_opts(self) -> list[str]:
        providers = list(self.opts["providers"])
        opts = ["--disable-static", "--enable-only", *[f"--enable-{p}" for p in providers if p != "cxi"]]
        if self.enabled("cxi"):
            prefix = self.opts["cxi_prefix"]
            opts += [f"--enable-cxi={prefix}", f"--with-cassini-headers={prefix}/include",
                     f"--with-cxi-uapi-headers={prefix}/include"]
        opts += ["--with-cuda=/usr/local/cuda", "--enable-cuda-dlopen"] if self.enabled("cuda") else ["--without-cuda"]
        gdrcopy = self.stack.provider("gdrcopy")
        if self.enabled("gdrcopy") and gdrcopy is not None:
            opts += [f"--with-gdrcopy={gdrcopy.prefix}", "--enable-gdrcopy-dlopen"]
        return opts

    def building_blocks(self) -> list:
        from hpccm.building_blocks import generic_autotools

        (artifact,) = self.artifacts()
        src = sources.block_source(self.stack, artifact)
        packages = sorted({p for prov in self.opts["providers"] for p in PROVIDER_PACKAGES.get(prov, [])})
        guard = []
        if self.enabled("cxi"):
            prefix = self.opts["cxi_prefix"]
            guard = [f"test -e {prefix}/include/cxi_prov_hw.h || {{ echo 'imagekit: libfabric cxi: true needs HPE "
                     f"libcxi and the Cassini headers under {prefix} in the base image' >&2; exit 1; }}"]
        return _blocks.build_tools(self.stack, ["pkg-config", *packages], "libfabric build tools") + [
            generic_autotools(**{k: v for k, v in src.items() if k != "preconfigure"},
                              directory=f"libfabric-{self.version}", prefix=PREFIX, ldconfig=True,
                              preconfigure=[*src["preconfigure"], *guard], configure_opts=self.configure_opts(),
                              # Man pages and the fabtests-free docs are for people, not jobs.
                              postinstall=[f"rm -rf {PREFIX}/share/man {PREFIX}/share/doc {PREFIX}/lib/*.la"],
                              runtime=[PREFIX])]

    def environment(self) -> dict[str, str]:
        return {"PATH": f"{PREFIX}/bin:$PATH"}

    def labels(self) -> dict[str, str]:
        return {"prefix": PREFIX, "providers": ",".join(self.opts["providers"]),
                "cuda": str(self.enabled("cuda")).lower(), "gdrcopy": str(self.enabled("gdrcopy")).lower()}

    def checks(self) -> list:
        out = [
            checks.library("libfabric.lib", "libfabric.so.1"),
            checks.run("libfabric.version", f"fi_info reports libfabric {self.version}", "fi_info --version",
                       expect=rf"libfabric: {re.escape(self.version)}\b"),
            # Each built provider is listed (fi_info -l lists providers that loaded, fabric or not: efa and
            # verbs show up only with a device, so the check keeps to those that need none).
            checks.run("libfabric.providers", "fi_info lists the device-free providers it was built with",
                       "env -u FI_PROVIDER fi_info -l",
                       expect="(?m)" + "".join(rf"(?=[\s\S]*^{p}:)" for p in self.opts["providers"]
                                      if p in ("tcp", "shm", "udp", "sm2")) + r"[\s\S]*"),
        ]
        if self.enabled("cuda"):
            # What GPUDirect RDMA needs from libfabric itself: its HMEM CUDA interface compiled in. The
            # symbols only exist when configure found CUDA (src/hmem_cuda.c is #if HAVE_CUDA).
            out.append(checks.run("libfabric.cuda", "libfabric was built with CUDA memory support (hmem cuda)",
                                  f"grep -c -a 'cuPointerGetAttribute' {PREFIX}/lib/libfabric.so.1",
                                  expect=r"^[1-9]"))
        out.append(checks.run("libfabric.fabric", "fi_info finds a fabric device (efa, cxi or verbs)",
                              "fi_info -l", expect=r"(?m)^(efa|cxi|verbs):", needs="fabric"))
        return out
