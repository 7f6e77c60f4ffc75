"""aws-ofi-nccl: the NCCL network plugin over libfabric (EFA, and any other libfabric provider).

libfabric is the stack's ``libfabric`` component when it has one (built from upstream with CUDA:
GPUDirect RDMA), else the distro's (``libfabric-dev`` to build, ``libfabric1`` and ``fi_info`` at
run time; no CUDA, refused unless ``accept: [no-gdr]``). The plugin carries its own copy of NCCL's net plugin
headers and links CUDA's runtime statically (the driver is dlopened), so it
builds against the stack's CUDA without NCCL's headers. NCCL loads
``libnccl-net-${NCCL_NET_PLUGIN}.so`` through the dynamic loader, so the image
sets ``NCCL_NET_PLUGIN=ofi`` and registers the plugin's directory with
ldconfig; upstream's second copy named ``libnccl-net.so`` (what NCCL loads with
no ``NCCL_NET_PLUGIN``) is left out, so nothing loads it behind the user's back.

imagekit carries no upstream pin for it: Spack pins GitHub's tag archives (up to 1.19.0), not the
release files (``make dist``, with ``configure`` and ``3rd-party/``) built here, so a stack gives
``sha256:`` or the site pins file does.

``platform_aws`` (upstream's EFA tuning and the tuner plugin) needs libfabric
1.22 or newer, which Debian 12's 1.17 is not.

``require`` (default on) sets ``NCCL_NET=Libfabric`` (the plugin's network name): NCCL then uses that
network or fails at init, instead of falling back to its own IB or to TCP sockets when the plugin
does not load or finds no provider (NCCL docs: NCCL_NET "forces NCCL to use a specific network").

The runtime stage keeps the topology files the plugin points NCCL at on p4d, p4de and g5
(``share/aws-ofi-nccl/xml``, compiled in as XML_DIR: fourth CUDA review, J10). Over Slingshot
(``provider: cxi``) the image sets the settings HPE, CSCS and Isambard-AI publish for NCCL over
aws-ofi-nccl on CXI (:data:`SLINGSHOT_ENV`, each with its source).
"""

from __future__ import annotations

import re

from imagekit import checks, sources
from imagekit.checks import Opens
from imagekit.components import _blocks
from imagekit.components._base import Component, Requires
from imagekit.util.schema import Option

PREFIX = "/opt/amazon/aws-ofi-nccl"
PLUGIN = "ofi"  # NCCL_NET_PLUGIN=ofi -> libnccl-net-ofi.so
LIBRARY = f"libnccl-net-{PLUGIN}.so"
# The distro's libfabric (packages.debian.org; Ubuntu's as the second recipe review read it), each at least
# the 1.11 aws-ofi-nccl needs (upstream m4/check_pkg_libfabric.m4); platform_aws needs >= 1.22
# (m4/ax_platform_aws.m4). A distro not listed is refused: Ubuntu 20.04's 1.6 would fail configure.
LIBFABRIC = {"debian12": "1.17.0", "debian13": "2.1.0", "ubuntu22": "1.11.0", "ubuntu24": "1.17.0"}
PLATFORM_AWS_LIBFABRIC = (1, 22)
NET_NAME = "Libfabric"  # the plugin's ncclNet_t name (src/nccl_ofi_interface_nvidia.cpp), what NCCL_NET matches
# Where `make install` puts the topology files platform-aws.cpp names (topology/Makefile.am: ${pkgdatadir}/xml).
XML_DIR = f"{PREFIX}/share/aws-ofi-nccl/xml"
# What the Slingshot sites publish for NCCL over aws-ofi-nccl on CXI: (value, source). Sources:
#   HPE  = HewlettPackard/shs-ccl-docs ccl_env.sh ("recommended NCCL or RCCL environment variables")
#   CSCS = eth-cscs/cscs-docs docs/software/communication/nccl_env_vars ("should always be set")
#   ISAM = Isambard-AI, docs.isambard.ac.uk user-documentation/guides/example-data/nccl/env_vars.sh
# Where they differ, HPE's (the vendor's) value is taken and the other named. Not set, because they
# need the launch's cooperation: FI_CXI_RDZV_PROTO=alt_read with FI_CXI_RDZV_EAGER_SIZE=0 (HPE, ISAM)
# needs `srun --network=disable_rdzv_get` (HPE's note), which an image cannot add; and
# NCCL_NET="AWS Libfabric" (all three) is the older plugin's name: 1.21.1's is NET_NAME, set above.
SLINGSHOT_ENV = {
    # Hangs: CUDA allocations deadlock with the provider's host-memory registration (HPE, CSCS, ISAM).
    "FI_CXI_DISABLE_HOST_REGISTER": ("1", "HPE, CSCS, ISAM"),
    # The registration cache's monitor: userfaultfd rather than memhooks, which corrupt it under CUDA (HPE, CSCS, ISAM).
    "FI_MR_CACHE_MONITOR": ("userfaultfd", "HPE, CSCS, ISAM"),
    "FI_CXI_DEFAULT_CQ_SIZE": ("131072", "HPE, CSCS, ISAM"),
    "FI_CXI_DEFAULT_TX_SIZE": ("2048", "HPE, ISAM (CSCS: 16384)"),
    "FI_CXI_RX_MATCH_MODE": ("hybrid", "HPE, ISAM (CSCS: software)"),
    "NCCL_NET_GDR_LEVEL": ("PHB", "HPE, CSCS, ISAM"),
    "NCCL_CROSS_NIC": ("1", "HPE, CSCS, ISAM"),
    # LL128 performs worse on Slingshot from NCCL 2.27 (CSCS); on GH200 it corrupts data with GPUDirect
    # (NCCL issue 2001, as Sigma2's Olivia documentation reports).
    "NCCL_PROTO": ("^LL128", "CSCS"),
    # The Slingshot NICs' netdevs (hsn0..hsn3) carry NCCL's bootstrap (HPE: hsn0,hsn1,hsn2,hsn3; ISAM: hsn).
    "NCCL_SOCKET_IFNAME": ("hsn", "ISAM (HPE: hsn0,hsn1,hsn2,hsn3)"),
}
# One GPU, NCCL told to use the plugin over the tcp provider (no EFA or CXI NIC on a GPU test host):
# NCCL must name the plugin and its network, with GPUDirect RDMA, and fail when told to use a plugin
# that is not there (fails closed rather than running over sockets).
_NCCL_LOADS = ("out=$(FI_PROVIDER=tcp OFI_NCCL_PROTOCOL=SENDRECV NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET "
               "all_reduce_perf -b 8 -e 1M -f 4 -g 1 2>&1); rc=$?; echo \"$out\" | grep -E 'NET/OFI|NET/Plugin|"
               "Using network|GPUDirect|WARN'; echo \"loaded rc=$rc\"; "
               "NCCL_NET_PLUGIN=imagekit-none all_reduce_perf -b 8 -e 8 -g 1 >/dev/null 2>&1; "
               "echo \"without the plugin rc=$?\"")


class AwsOfiNccl(Component):
    name = "aws-ofi-nccl"
    summary = "aws-ofi-nccl NCCL net plugin over the distro's libfabric (EFA and other OFI providers)"
    order = 75  # after nccl-tests: a plugin bump rebuilds no benchmark layer
    provides = ("nccl-net-plugin",)
    requires = (Requires("nccl", why="it is an NCCL network plugin"),
                Requires("cuda", why="the plugin registers GPU memory through CUDA"))
    forward_env = ("FI_", "OFI_NCCL_")
    sources = ("upstream",)
    upstream_file = ("aws-ofi-nccl-{version}.tar.gz",
                     "https://github.com/aws/aws-ofi-nccl/releases/download/v{version}/aws-ofi-nccl-{version}.tar.gz")
    prefix = PREFIX
    acceptable = {
        "no-gdr": "the distro's libfabric, built without CUDA: no GPUDirect RDMA, every transfer staged "
                  "through host memory",
    }
    options = {
        "platform_aws": Option(bool, False, "upstream's AWS platform support (EFA tuning, tuner plugin; "
                                            "needs libfabric >= 1.22)"),
        # NCCL tries an external plugin before its own IB: unfiltered, the plugin would carry an IB
        # cluster's traffic over libfabric's verbs provider; kept to efa it fails to start there, and
        # NCCL falls back to its own IB (second CUDA review, finding 2).
        "provider": Option(str, "efa", "the libfabric provider the image keeps to (FI_PROVIDER)",
                           pattern=r"[a-z0-9_;]+", pattern_help="libfabric provider names, e.g. efa or tcp;ofi_rxm"),
        "require": Option(bool, True, f"NCCL_NET={NET_NAME}: NCCL fails at init when the plugin does not load, "
                                      "instead of falling back to IB or TCP sockets"),
    }

    def configure(self) -> None:
        super().configure()
        if self.stack.base.family != "deb":
            self.error(None, "aws-ofi-nccl takes libfabric from Debian/Ubuntu packages here",
                       "use a Debian or Ubuntu base")

    @property
    def libfabric(self):
        """The stack's libfabric component (built with CUDA), or None for the distro's."""
        return self.stack.provider("libfabric")

    def check_stack(self) -> None:
        own = self.libfabric
        if own is not None:
            if not own.enabled("cuda"):
                self.refuse_unless_accepted(
                    "no-gdr", None, "the stack's libfabric is built with `cuda: false`: no GPUDirect RDMA, NCCL "
                    "stages every network transfer through host memory", "set `cuda: true` on libfabric")
            if self.enabled("platform_aws") and own.version_tuple[:2] < PLATFORM_AWS_LIBFABRIC:
                self.error("platform_aws", f"`platform_aws: true` needs libfabric 1.22 or newer, not {own.version}",
                           'use libfabric "2.6.0"')
            if self.opts["provider"] not in own.opts["providers"] and self.opts["provider"] != "cxi":
                own.error("providers", f"aws-ofi-nccl keeps to provider {self.opts['provider']!r} (FI_PROVIDER), "
                          "which this libfabric is not built with",
                          f"add {self.opts['provider']} to libfabric's providers")
            return
        have = LIBFABRIC.get(self.stack.base.distro)
        if have is None:
            self.error(None, f"imagekit does not know which libfabric {self.stack.base.distro} ships, so it cannot "
                       "tell whether aws-ofi-nccl builds on it (it needs libfabric 1.11 or newer)",
                       "use a base of: " + ", ".join(sorted(LIBFABRIC)))
        # No distro builds libfabric with CUDA (Debian 12's 1.17 has no cuPointerGetAttribute, no libcuda;
        # hmem_cuda.c is compiled only #if HAVE_CUDA): the plugin then logs "without GPUDirect RDMA
        # support" and forces NCCL_PROTO=simple (second CUDA review, finding 2).
        self.refuse_unless_accepted(
            "no-gdr", None, f"aws-ofi-nccl over {self.stack.base.distro}'s libfabric {have} has no GPUDirect RDMA: "
            "the distro builds libfabric without CUDA, so NCCL stages every network transfer through host memory",
            "for EFA use AWS's EFA installer libfabric (built with CUDA), which imagekit does not package yet; for "
            "a test or a fabric without GPU RDMA, accept it")
        if self.enabled("platform_aws") and \
                tuple(int(x) for x in have.split(".")[:2]) < PLATFORM_AWS_LIBFABRIC:
            self.error("platform_aws", f"`platform_aws: true` needs libfabric 1.22 or newer and "
                       f"{self.stack.base.distro} has {have} (aws-ofi-nccl configure: \"On AWS platforms, "
                       "Libfabric 1.22.0 or later is required\")",
                       "set `platform_aws: false`, or use a debian13 (trixie) base (libfabric 2.1)")

    def building_blocks(self) -> list:
        from hpccm.building_blocks import generic_build

        (artifact,) = self.artifacts()
        src = sources.block_source(self.stack, artifact)
        # Debian's CUDA toolkit (cuda `source: distro`) keeps its headers in /usr/include: configure's
        # `-isystem DIR/include` would put /usr/include ahead of libstdc++'s own headers, whose
        # `#include_next <stdlib.h>` then fails (and bare --with-cuda links no CUDA runtime at all). So
        # the plugin gets a CUDA home of its own: the toolkit's headers (those nvidia-cuda-dev installs),
        # its static runtime's directory and nvcc.
        cuda_home, home = "/usr/local/cuda", []
        if getattr(self.stack.provider("cuda"), "source", None) == "distro":
            cuda_home = "/var/tmp/aws-ofi-nccl-cuda"
            home = [f"mkdir -p {cuda_home}/include",
                    "for e in $(dpkg -L nvidia-cuda-dev | sed -n 's#^/usr/include/\\([^/]*\\)$#\\1#p'); do "
                    f"cp -as /usr/include/$e {cuda_home}/include/; done",
                    f"test -e {cuda_home}/include/cuda_runtime.h",
                    f"ln -sfn /usr/lib/$(gcc -print-multiarch) {cuda_home}/lib64",
                    f"ln -sfn /usr/local/cuda/bin {cuda_home}/bin"]
        configure = ["./configure", f"--prefix={PREFIX}", f"--with-cuda={cuda_home}", "--disable-tests",
                     "--disable-werror", "--without-lttng", "--without-valgrind",
                     "--enable-platform-aws" if self.enabled("platform_aws") else "--disable-platform-aws"]
        own = self.libfabric
        if own is not None:
            configure.append(f"--with-libfabric={own.prefix}")
            gdrcopy = self.stack.provider("gdrcopy")
            if gdrcopy is not None:
                configure.append(f"--with-gdrcopy={gdrcopy.prefix}")
        tools = ["libhwloc-dev"] + ([] if own is not None else ["libfabric-dev"])
        return _blocks.build_tools(self.stack, tools, "aws-ofi-nccl build tools") + [
            generic_build(
                **{k: v for k, v in src.items() if k != "preconfigure"}, directory=f"aws-ofi-nccl-{self.version}",
                prefix=PREFIX, ldconfig=True, libdir=f"{PREFIX}/lib", runtime=[f"{PREFIX}/lib", XML_DIR],
                build=[*src["preconfigure"], *home, " ".join(configure), "make -j$(nproc)", "make install",
                       f"rm -rf {PREFIX}/lib/*.la {PREFIX}/lib/libnccl-net.so" + (f" {cuda_home}" if home else "")])]

    def runtime(self) -> list:
        distro = [] if self.libfabric is not None else ["libfabric1", "libfabric-bin"]
        return _blocks.apt_install(self.stack, [*distro, "libhwloc15"], "libfabric/hwloc for aws-ofi-nccl") \
            + super().runtime()

    def environment(self) -> dict[str, str]:
        env = {"NCCL_NET_PLUGIN": PLUGIN, "FI_PROVIDER": self.opts["provider"]}
        if self.enabled("require"):
            env["NCCL_NET"] = NET_NAME
        if self.opts["provider"] == "cxi":
            env.update({name: value for name, (value, _source) in SLINGSHOT_ENV.items()})
        if getattr(self.stack.provider("mpi"), "name", None) == "openmpi":
            # On EFA there is no mlx device: pml ucx would run MPI over UCX's TCP, and a rank that sees no GPU
            # aborts in MPI_Init. ob1 then takes MPI's bootstrap-sized traffic. The btls stay Open MPI's
            # default: AWS's recipe narrows them to tcp,self, which drops shared memory between the ranks of
            # a node and, where the only interface is loopback (which btl tcp skips), leaves no path at all.
            env["OMPI_MCA_pml"] = "^ucx"
        return env

    def labels(self) -> dict[str, str]:
        own = self.libfabric
        return {"prefix": PREFIX, "plugin": PLUGIN,
                "libfabric": own.version if own is not None else LIBFABRIC.get(self.stack.base.distro, "distro"),
                "gdr": str(own is not None and own.enabled("cuda")).lower(),
                "platform_aws": str(self.enabled("platform_aws")).lower()}

    def dlopens(self) -> list[Opens]:
        lib = f"{PREFIX}/lib/{LIBRARY}"
        return [
            # NCCL opens the plugin by the name NCCL_NET_PLUGIN makes (src/plugin/net.cc).
            Opens("libnccl.so.2", ("libnccl-net-%s.so",), "NCCL src/plugin/net.cc (NCCL_NET_PLUGIN)",
                  env="NCCL_NET_PLUGIN"),
            Opens(lib, ("libgdrapi.so",), "src/nccl_ofi_gdrcopy.cpp (--with-gdrcopy)"),
            Opens(lib, ("libcudart.so",), "src/nccl_ofi_cuda.cpp (--enable-cudart-dynamic)"),
            Opens(lib, ("libcuda.so.1",), "CUDA's static runtime, linked into the plugin", by="driver"),
        ]

    def checks(self) -> list:
        lib = f"{PREFIX}/lib/{LIBRARY}"
        out = [
            checks.file("aws-ofi-nccl.plugin", lib),
            checks.run("aws-ofi-nccl.ldd", f"{LIBRARY} resolves every library and symbol (ldd -r; the driver's "
                       "libcuda.so.1 is dlopened)",
                       f"ldd -r {lib} 2>&1; ! ldd -r {lib} 2>&1 | grep -E 'not found|undefined symbol'",
                       expect=r"libfabric\.so\.1 => /"),
            checks.run("aws-ofi-nccl.nccl_finds_it",
                       "NCCL_NET_PLUGIN names a plugin the loader resolves (NCCL loads libnccl-net-$NCCL_NET_PLUGIN.so)",
                       'echo "NCCL_NET_PLUGIN=$NCCL_NET_PLUGIN"; '
                       'ldconfig -p | grep -E "^[[:space:]]+libnccl-net-${NCCL_NET_PLUGIN:-unset}[.]so "',
                       expect=rf"NCCL_NET_PLUGIN={PLUGIN}\n\s*{re.escape(LIBRARY)} .*=> {re.escape(lib)}$"),
            checks.run("aws-ofi-nccl.interface", "the plugin exports an NCCL net plugin interface (ncclNetPlugin_v*)",
                       f"grep -ao 'ncclNetPlugin_v[0-9]*' {lib} | sort -u", expect=r"ncclNetPlugin_v\d+"),
            checks.run("aws-ofi-nccl.fi_info", "libfabric lists its providers (fi_info -l, unfiltered)",
                       "env -u FI_PROVIDER fi_info -l",
                       expect=r"(?m)^(tcp|sockets|shm)"),
        ]
        if self.enabled("platform_aws"):
            # Every topology file the plugin names (platform-aws.cpp, for p4d, p4de, g5) is where it looks.
            out.append(checks.run(
                "aws-ofi-nccl.topology", f"the topology files the plugin points NCCL at are in {XML_DIR}",
                f"n=0; for f in $(grep -a -o '[A-Za-z0-9.-]*-topo[.]xml' {lib} | sort -u); do n=$((n + 1)); "
                f"test -s {XML_DIR}/$f && echo \"ok $f\" || {{ echo \"missing {XML_DIR}/$f\"; exit 1; }}; done; "
                "echo \"$n topology files\"", expect=r"(?m)^[1-9]\d* topology files"))
        if self.enabled("require"):
            # An image that would fall back to NCCL's own IB or to sockets fails: NCCL_NET must name the
            # plugin's network, so that NCCL fails at init without it.
            out.append(checks.run("aws-ofi-nccl.fails_closed", f"NCCL_NET={NET_NAME}: NCCL fails at init rather than "
                                  "fall back to sockets when the plugin does not load",
                                  'echo "NCCL_NET=$NCCL_NET"', expect=rf"^NCCL_NET={NET_NAME}$"))
            out.append(checks.run("aws-ofi-nccl.nccl_loads_it", "on a GPU, NCCL loads the plugin with GPUDirect "
                                  "RDMA (NCCL_DEBUG=INFO) and fails without it", _NCCL_LOADS,
                                  expect=r"(?s)(?=.*Using network Libfabric)(?=.*with GPUDirect RDMA support)"
                                         r"(?=.*loaded rc=0)(?=.*without the plugin rc=[1-9])",
                                  excluded=r"Using network Socket|without GPUDirect RDMA", needs="gpu"))
        return out
