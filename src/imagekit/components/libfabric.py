"""libfabric (OFI) built from upstream's release, with CUDA (and gdrcopy) memory support.

No distro builds libfabric with CUDA, so an NCCL net plugin over the distro's library has no
GPUDirect RDMA and stages every transfer through host memory (second CUDA review, finding 2).
Built here ``--with-cuda`` (``--enable-cuda-dlopen``: libcuda is the host driver's, opened at run
time, so the image links no driver library) and optionally ``--with-gdrcopy``, with only the
providers asked for (``--enable-only``): ``efa`` (AWS; its verbs extension ``efadv`` comes from
rdma-core, which the ofed component provides), ``shm``, ``tcp``, ``rxm``, ``verbs``, ``cxi``.

What it opens at run time (src/hmem_cuda.c, src/hmem_cuda_gdrcopy.c at v2.6.0): exactly
``libcudart.so``, the unversioned name, which ``ldconfig`` never makes and only a -dev layout has;
without it CUDA memory support turns itself off with an INFO line and the efa provider stops
offering FI_HMEM (fourth CUDA review, J1). So the runtime stage links ``libcudart.so`` to the
CUDA runtime the stack keeps, and ``image.dlopen_closure`` resolves every name (:meth:`dlopens`).

EFA: RDMA write needs rdma-core 46 or newer (``EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE``; without it
libfabric emulates writes and the NCCL net plugin's RDMA protocol refuses the endpoint on p5/p6: J2), so
the efa provider is refused on an older RDMA user space (Debian 12's inbox is 44).

Slingshot (HPE CXI): ``cxi: true`` builds the provider against the stack's ``libcxi`` component
(HPE's public sources), or against ``cxi_prefix`` in the base image. ``host_bind: true`` keeps the
other way open: libfabric installs in HPE's layout (``lib64``), so a site binding its host's
libfabric over this prefix (``/opt/cray/libfabric/<ver>:/opt/libfabric``) puts it at the very path
the loader cache names, and the runtime carries the libraries HPE's build links besides libcxi
(libcurl, json-c, libnl). ``fabtests`` builds upstream's test programs from the same release
(``fi_rdm_pingpong -D cuda`` moves device memory on a GPU host).
"""

from __future__ import annotations

import re

from imagekit import checks, sources
from imagekit.checks import Opens
from imagekit.components import _blocks
from imagekit.components._base import Component, Requires
from imagekit.util.schema import Option

PREFIX = "/opt/libfabric"
PROVIDERS = ("efa", "shm", "tcp", "rxm", "verbs", "udp", "rxd", "sm2", "lnx", "cxi")
# Build headers and libraries each provider needs from the distro (rdma-core's for efa and verbs).
PROVIDER_PACKAGES = {"efa": ["libibverbs-dev", "librdmacm-dev"], "verbs": ["libibverbs-dev", "librdmacm-dev"],
                     "cxi": ["libcurl4-openssl-dev", "libjson-c-dev", "libnl-3-dev"]}
# What the cxi provider links at run time (configure.m4: libcxi, libcurl, json-c), and HPE's own
# libfabric with it in host-bind mode; libcxi itself comes from the libcxi component or the host.
CXI_RUNTIME = ["libcurl4", "libjson-c5", "libnl-3-200"]
# Their sonames on Debian 12 and 13: what the image carries for a bound libfabric (the label host_libs).
CXI_RUNTIME_SONAMES = ("libcurl.so.4", "libjson-c.so.5", "libnl-3.so.200")
# RDMA write on EFA (EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE) first appears in rdma-core v46.0's efadv.h;
# libfabric's prov/efa/configure.m4 compiles efa_device_support_rdma_write() as `return false` without it.
EFA_RDMA_CORE = (46,)
# fabtests programs fabtests: may name (benchmarks/ and functional/ in fabtests/Makefile.am).
FABTESTS = ("fi_rdm_pingpong", "fi_rma_bw", "fi_rdm_tagged_bw", "fi_msg_pingpong", "fi_rdm")
_FABTEST_DIR = {"fi_rdm": "functional"}
# The GPU check's transfer: 1 MiB of CUDA device memory each way over shm between two processes, the
# addresses exchanged out of band on a loopback port (fabtests -E).
_CUDA_PINGPONG = ("p=$((20000 + $$ % 10000)); fi_rdm_pingpong -p shm -D cuda -S 1048576 -I 20 -E=$p & s=$!; "
                  "sleep 1; fi_rdm_pingpong -p shm -D cuda -S 1048576 -I 20 -E=$p 127.0.0.1; c=$?; wait $s; "
                  "s=$?; echo \"client $c server $s\"; [ $c -eq 0 ] && [ $s -eq 0 ]")


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
        "cxi": Option(bool, False, "HPE Slingshot's CXI provider: built against the stack's libcxi component, "
                                   "or libcxi and the Cassini/CXI uAPI headers under cxi_prefix in the base image"),
        "cxi_prefix": Option(str, None, "where the base image has HPE's libcxi (lib64, include), when the stack "
                                        "has no libcxi component", pattern=r"/[A-Za-z0-9_./-]*",
                             pattern_help="an absolute path"),
        "host_bind": Option(bool, False, "HPE's layout (lib64) and libraries, so a site may bind its host's "
                                         "libfabric over /opt/libfabric at run time"),
        "fabtests": Option(list, [], "upstream's fabtests programs to build into the image: "
                           + ", ".join(FABTESTS), item_type=str, pattern="|".join(FABTESTS),
                           pattern_help="one of " + ", ".join(FABTESTS)),
    }

    def configure(self) -> None:
        super().configure()
        providers = list(self.opts.get("providers") or [])
        if not providers:
            self.error("providers", "libfabric with no provider moves no data", "list at least one, e.g. [tcp]")
        if self.enabled("cxi") != ("cxi" in providers):
            self.error("cxi" if self.enabled("cxi") else "providers",
                       "`cxi: true` and the `cxi` provider go together (CXI builds against HPE's libcxi)",
                       "add cxi to providers and set `cxi: true` (with the libcxi component), or drop both and "
                       "set `host_bind: true` to bind the host's libfabric at run time")
        if self.opts.get("fabtests") and not self.enabled("cuda"):
            self.error("fabtests", "fabtests are built here to move CUDA memory (-D cuda), and libfabric has "
                       "`cuda: false`", "set `cuda: true`, or drop fabtests")
        if self.stack.base.family != "deb":
            self.error(None, "libfabric's build packages are named for Debian/Ubuntu bases here",
                       "use a Debian or Ubuntu base")

    def check_stack(self) -> None:
        verbs = [p for p in self.opts["providers"] if p in ("efa", "verbs")]
        rdma = self.stack.provider("rdma")
        if verbs and rdma is None:
            self.error("providers", f"the {', '.join(verbs)} provider builds on rdma-core's verbs (efadv for efa), and "
                       "this stack has no RDMA user space", "add `ofed: {flavor: inbox}` (or doca) to components, or "
                       f"drop {', '.join(verbs)} from providers")
        if "efa" in verbs and rdma.source == "distro":
            have = tuple(int(x) for x in re.findall(r"\d+", rdma.version)[:1])
            if have and have < EFA_RDMA_CORE:
                self.error("providers", f"the efa provider needs rdma-core {EFA_RDMA_CORE[0]} or newer for RDMA write, "
                           f"and {self.stack.base.distro}'s inbox rdma-core is {rdma.version}: libfabric would "
                           "emulate writes, which the NCCL net plugin's RDMA protocol (its default on p5, p5e, p5en, p6) "
                           "refuses, so NCCL fails at init", "use a debian13 base (rdma-core 56): `extends: "
                           "debian-cuda12`, as the shipped debian-efa stack does")
        if self.enabled("cxi") and self.stack.provider("cxi") is None and not self.opts.get("cxi_prefix"):
            self.error("cxi", "`cxi: true` needs HPE's libcxi: the stack has no libcxi component and no cxi_prefix "
                       "names one in the base image", 'add `libcxi: {version: "14.0.0"}` to components (HPE\'s '
                       "public sources), or set cxi_prefix")

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", self.version)[:3])

    @property
    def libdir(self) -> str:
        """Where the library goes: HPE's layout (lib64) when the host's may be bound over the prefix."""
        return f"{PREFIX}/lib64" if self.enabled("host_bind") else f"{PREFIX}/lib"

    @property
    def cxi_prefix(self) -> str | None:
        own = self.stack.provider("cxi")
        return own.prefix if own is not None else self.opts.get("cxi_prefix")

    def configure_opts(self) -> list[str]:
        providers = list(self.opts["providers"])
        # The cxi provider's multinode test programs (noinst, built by `make`) link `-static` against
        # libfabric's internals (cxip_coll_*), which the shared library does not export: with cxi the
        # static library is built too (and removed after install).
        static = "--enable-static" if "cxi" in providers else "--disable-static"
        opts = [static, f"--libdir={self.libdir}", "--enable-only",
                *[f"--enable-{p}" for p in providers if p != "cxi"]]
        if self.enabled("cxi"):
            # Each of --with-cassini-headers and --with-cxi-uapi-headers adds DIR/include (prov/cxi/configure.m4).
            prefix = self.cxi_prefix
            opts += [f"--enable-cxi={prefix}", f"--with-cassini-headers={prefix}", f"--with-cxi-uapi-headers={prefix}"]
        opts += ["--with-cuda=/usr/local/cuda", "--enable-cuda-dlopen"] if self.enabled("cuda") else ["--without-cuda"]
        gdrcopy = self.stack.provider("gdrcopy")
        if self.enabled("gdrcopy") and gdrcopy is not None:
            opts += [f"--with-gdrcopy={gdrcopy.prefix}", "--enable-gdrcopy-dlopen"]
        return opts

    def _fabtests(self) -> list[str]:
        """Commands (run from the libfabric source tree) that build and install the fabtests asked for."""
        programs = list(self.opts.get("fabtests") or [])
        if not programs:
            return []
        targets = " ".join(f"{_FABTEST_DIR.get(p, 'benchmarks')}/{p}" for p in programs)
        return [f"cd /var/tmp/libfabric-{self.version}/fabtests", "./autogen.sh",
                f"./configure --prefix={PREFIX} --with-libfabric={PREFIX} --with-cuda=/usr/local/cuda",
                f"make -j$(nproc) {targets}", f"install -m 755 {targets} {PREFIX}/bin/"]

    def building_blocks(self) -> list:
        from hpccm.building_blocks import generic_autotools

        (artifact,) = self.artifacts()
        src = sources.block_source(self.stack, artifact)
        packages = sorted({p for prov in self.opts["providers"] for p in PROVIDER_PACKAGES.get(prov, [])})
        if self.opts.get("fabtests"):
            packages += ["autoconf", "automake", "libtool"]   # fabtests/ ships without configure
        guard = []
        if self.enabled("cxi"):
            prefix = self.cxi_prefix
            guard = [f"test -e {prefix}/include/cxi_prov_hw.h || {{ echo 'imagekit: libfabric cxi: true needs HPE "
                     f"libcxi and the Cassini headers under {prefix}' >&2; exit 1; }}"]
        return _blocks.build_tools(self.stack, ["pkg-config", *packages], "libfabric build tools") + [
            generic_autotools(**{k: v for k, v in src.items() if k != "preconfigure"},
                              directory=f"libfabric-{self.version}", prefix=PREFIX, ldconfig=True,
                              libdir=self.libdir.rsplit("/", 1)[-1],
                              preconfigure=[*src["preconfigure"], *guard], configure_opts=self.configure_opts(),
                              # Man pages and the fabtests-free docs are for people, not jobs.
                              postinstall=[f"rm -rf {PREFIX}/share/man {PREFIX}/share/doc {self.libdir}/*.la "
                                           f"{self.libdir}/*.a",
                                           *self._fabtests()],
                              runtime=[PREFIX])]

    def runtime(self) -> list:
        packages = list(CXI_RUNTIME) if (self.enabled("cxi") or self.enabled("host_bind")) else []
        out = _blocks.apt_install(self.stack, _blocks.distro_names(self.stack.base.distro, packages),
                                  "what the cxi provider links besides libcxi (curl, json-c, libnl)")
        out += super().runtime()
        cuda = self.stack.provider("cuda")
        if self.enabled("cuda") and cuda is not None:
            # libfabric (and fabtests) dlopen exactly "libcudart.so": ldconfig makes SONAME links only, so the
            # runtime stage, which keeps libcudart.so.MAJOR, gets the unversioned name as a link to it.
            lib = "/usr/local/cuda/lib64"
            out += _blocks.shell_step([f"ln -sf libcudart.so.{cuda.major} {lib}/libcudart.so", "ldconfig",
                                       f"test -e {lib}/libcudart.so"])
        return out

    def environment(self) -> dict[str, str]:
        return {"PATH": f"{PREFIX}/bin:$PATH"}

    def labels(self) -> dict[str, str]:
        out = {"prefix": PREFIX, "providers": ",".join(self.opts["providers"]),
               "cuda": str(self.enabled("cuda")).lower(), "gdrcopy": str(self.enabled("gdrcopy")).lower(),
               "libdir": self.libdir}
        if self.enabled("host_bind"):
            # Preflight reads them: a --mounts SRC:/opt/libfabric must hold libfabric.so.1 under SRC/lib64 (or
            # lib), and each library it links must be one of host_libs or bound as well.
            out["host_bind"] = PREFIX
            out["host_libs"] = ",".join(self.host_libs)
        return out

    @property
    def host_libs(self) -> list[str]:
        """The libraries this image carries for a host's libfabric bound over it: what HPE's build links
        besides glibc (libcxi, curl, json-c, libnl; verbs and rdmacm for its verbs provider)."""
        out = list(CXI_RUNTIME_SONAMES)
        if self.stack.provider("cxi") is not None:
            out.insert(0, "libcxi.so.1")
        if self.stack.provider("rdma") is not None:
            out += ["libibverbs.so.1", "librdmacm.so.1"]
        return out

    def dlopens(self) -> list[Opens]:
        lib = f"{self.libdir}/libfabric.so.1"
        out = [
            Opens(lib, ("libcudart.so",), "src/hmem_cuda.c cuda_hmem_dl_init (--enable-cuda-dlopen)"),
            Opens(lib, ("libcuda.so.1",), "src/hmem_cuda.c cuda_hmem_dl_init", by="driver"),
            Opens(lib, ("libnvidia-ml.so.1",), "src/hmem_cuda.c cuda_hmem_dl_init (optional: nvml calls)",
                  by="driver"),
            Opens(lib, ("libgdrapi.so", "libgdrapi.so.2"), "src/hmem_cuda_gdrcopy.c (--enable-gdrcopy-dlopen)"),
            # The cxi provider's collectives open curl and json-c by name only when built with
            # --enable-cxi-curl-dlopen/--enable-cxi-json-dlopen (not here: it links them).
            Opens(lib, ("libcurl.so",), "prov/cxi/src/cxip_curl.c (--enable-cxi-curl-dlopen)"),
            Opens(lib, ("libjson-c.so",), "prov/cxi/src/cxip_curl.c (--enable-cxi-json-dlopen)"),
            # Other vendors' device memory: compiled out here, listed so that a build that has them is judged.
            Opens(lib, ("libze_loader.so.1",), "src/hmem_ze.c (--with-ze)"),
            Opens(lib, ("libhsa-runtime64.so",), "src/hmem_rocr.c (--with-rocr)"),
            Opens(lib, ("libnrt.so.1",), "src/hmem_neuron.c (--with-neuron)"),
            Opens(lib, ("libSynapse.so",), "src/hmem_synapseai.c (--with-synapseai)"),
            Opens(lib, ("libaccel-config.so",), "prov/shm/src/smr_dsa.c (--enable-shm-dsa)"),
        ]
        for program in self.opts.get("fabtests") or []:
            out.append(Opens(f"{PREFIX}/bin/{program}", ("libcudart.so",), "fabtests/common/hmem_cuda.c (-D cuda)"))
        return out

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
            # The capability, not a symbol: libfabric's CUDA interface initialises as far as this host allows.
            # Without a GPU it stops at the driver ("Failed to dlopen libcuda.so.1", a warning); without the
            # runtime's libcudart.so, or built without CUDA, it says so at INFO and turns CUDA memory off.
            out.append(checks.run(
                "libfabric.cuda", "libfabric's CUDA memory interface initialises up to the host's driver "
                "(libcudart.so opens; FI_LOG_LEVEL=info fi_info)",
                "env -u FI_PROVIDER FI_LOG_LEVEL=info FI_HMEM=cuda fi_info -l 2>&1",
                expect=r"(?m)^(tcp|shm|efa|cxi|verbs):",
                excluded=r"Failed to dlopen libcudart\.so|Hmem iface FI_HMEM_CUDA not supported"))
            out.append(checks.run(
                "libfabric.hmem", "the shm and tcp providers offer FI_HMEM with CUDA memory initialised",
                "for p in shm tcp; do FI_LOG_LEVEL=info FI_HMEM=cuda fi_info -p $p -c FI_HMEM >/dev/null 2>/tmp/fi.$$ "
                "&& ! grep -qi 'iface FI_HMEM_CUDA\\|Failed to dlopen' /tmp/fi.$$ && echo \"FI_HMEM on $p\"; "
                "cat /tmp/fi.$$; done; rm -f /tmp/fi.$$", expect=r"FI_HMEM on (shm|tcp)", needs="gpu"))
            if self.opts.get("fabtests"):
                out.append(checks.run("libfabric.cuda_transfer", "fi_rdm_pingpong moves 1 MiB of CUDA device "
                                      "memory between two processes over shm (fabtests -D cuda)", _CUDA_PINGPONG,
                                      expect=r"client 0 server 0", needs="gpu"))
        if "efa" in self.opts["providers"]:
            out.append(checks.run(
                "libfabric.efa_rdma_write", f"the efa provider's rdma-core is {EFA_RDMA_CORE[0]} or newer (RDMA "
                "write; EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE)", "dpkg-query -W -f '${Version}\\n' libibverbs1 "
                "2>/dev/null", expect=r"^(4[6-9]|[5-9]\d|\d{3,})\."))
        if self.enabled("host_bind"):
            libs = " ".join(self.host_libs)
            out.append(checks.run(
                "libfabric.host_libs", "the libraries the image carries for a host's libfabric resolve (label "
                "host_libs, which preflight holds a bound libfabric to)",
                f"n=0; for l in {libs}; do if ldconfig -p | grep -q \"^[[:space:]]*$l \"; then n=$((n + 1)); "
                "else echo \"missing $l\"; fi; done; echo \"$n of " + str(len(self.host_libs)) + " resolve\"",
                expect=rf"(?m)^{len(self.host_libs)} of {len(self.host_libs)} resolve$"))
        if self.enabled("cxi"):
            out.append(checks.run("libfabric.cxi_built", "libfabric was built with the cxi provider (it links "
                                  "libcxi.so.1)", f"ldd {self.libdir}/libfabric.so.1", expect=r"libcxi\.so\.1 => /"))
        out.append(checks.run("libfabric.fabric", "fi_info finds a fabric device (efa, cxi or verbs)",
                              "fi_info -l", expect=r"(?m)^(efa|cxi|verbs):", needs="fabric"))
        return out
