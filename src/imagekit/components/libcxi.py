"""libcxi: HPE Slingshot's CXI user library, built from HPE's public sources, for libfabric's ``cxi`` provider.

HPE publishes the Slingshot host software (``HewlettPackard/shs-libcxi``, ``shs-cassini-headers``,
``shs-cxi-driver``, tagged ``release/shs-X.Y.Z``), so the CXI provider can be built into the image
instead of binding the host's libfabric in at run time (fourth CUDA review, J3). Three files:

- ``shs-cassini-headers``: the Cassini NIC's hardware definitions (``cxi_prov_hw.h``, and
  ``csr_defs.json``, which libcxi's ``cxi_dump_csrs`` is generated from);
- ``shs-cxi-driver``: only its user-space headers (``include/uapi/misc/cxi.h``); the kernel driver
  itself stays the host's, as do ``/dev/cxi*``;
- ``shs-libcxi``: ``libcxi.so.1`` (links libnl-3 only) and the ``cxi_*`` diagnostics
  (``cxi_stat``, ``cxi_write_bw``, ...), a Slingshot node's ``ib_write_bw``.

Installed under ``/opt/cxi`` in HPE's layout (``lib64``, as the cray-libcxi package installs in
``/usr/lib64``), so that a site binding its host's ``libcxi.so.1`` over the image's
(``--mounts /usr/lib64/libcxi.so.1:/opt/cxi/lib64/libcxi.so.1``) replaces the very file the loader
cache names. Built as the mirror's README says it builds on Debian 12: the headers on the
preprocessor path, the Cassini tree also reachable as ``../cassini-headers/install`` (libcxi's
Makefile reads it there), and ``-Wno-error`` (gcc 12 stops on an unused variable in
``utils/cxi_dump_csrs.c`` under upstream's ``-Werror``), given as ``pkg_CFLAGS`` so that configure's
CUDA flags stay (the GPU diagnostics open ``libcudart.so``).

imagekit carries no upstream pin for these: HPE publishes git tags, not release files, so a site
pins the files its mirror holds (tag archives with ``configure`` generated).
"""

from __future__ import annotations

from imagekit import checks, sources
from imagekit.checks import Opens
from imagekit.components import _blocks
from imagekit.components._base import Component, pinnable
from imagekit.util.schema import Option

PREFIX = "/opt/cxi"
LIBDIR = f"{PREFIX}/lib64"
_GITHUB = "https://github.com/HewlettPackard"
# The other two source trees libcxi builds against: (option holding the version, mirror file, URL).
PARTS = {
    "cassini-headers": ("cassini_headers", "shs-cassini-headers-{version}.tar.gz",
                        _GITHUB + "/shs-cassini-headers/archive/refs/tags/release/shs-{version}.tar.gz"),
    "cxi-driver": ("cxi_driver", "shs-cxi-driver-{version}.tar.gz",
                   _GITHUB + "/shs-cxi-driver/archive/refs/tags/release/shs-{version}.tar.gz"),
}
# libcxi's configure: PKG_CHECK_MODULES for libconfig, libuv, fuse, yaml-0.1, libnl-3.0, numa, and
# sensors/sensors.h; python3 (its json module: not in python3-minimal) generates cxi_dump_csrs.h from the
# Cassini csr_defs.json.
BUILD_PACKAGES = ["libconfig-dev", "libfuse-dev", "libnl-3-dev", "libnl-route-3-dev", "libnuma-dev", "libsensors-dev",
                  "libuv1-dev", "libyaml-dev", "pkg-config", "python3"]
# What the runtime keeps needs: libcxi.so.1 links libnl-3; the kept diagnostics add libm/libdl (libc).
RUNTIME_PACKAGES = ["libnl-3-200"]
# The diagnostics the runtime stage keeps: none of them needs libsensors, libnuma, libuv or fuse
# (cxi_heatsink_check and the retry handler cxi_rh, which do, are a host's, not a job's).
TOOLS = ("cxi_stat", "cxi_write_bw", "cxi_read_bw", "cxi_write_lat", "cxi_read_lat", "cxi_send_bw",
         "cxi_send_lat", "cxi_atomic_bw", "cxi_atomic_lat", "cxi_gpu_loopback_bw")


class Libcxi(Component):
    name = "libcxi"
    summary = "HPE Slingshot's libcxi and the Cassini/CXI uAPI headers from HPE's public sources (libfabric's cxi)"
    # Before libfabric (72), after the MPI stack: adding Slingshot to a stack keeps every layer below it.
    order = 71
    provides = ("cxi",)
    sources = ("upstream",)
    upstream_file = ("shs-libcxi-{version}.tar.gz",
                     _GITHUB + "/shs-libcxi/archive/refs/tags/release/shs-{version}.tar.gz")
    prefix = PREFIX
    parts = {part: file for part, (_option, file, _url) in PARTS.items()}   # what a site pins file may pin
    options = {
        "cassini_headers": Option(str, None, 'shs-cassini-headers release (default: libcxi\'s, e.g. "14.0.0")'),
        "cxi_driver": Option(str, None, 'shs-cxi-driver release whose uAPI headers libcxi builds against '
                                        '(default: libcxi\'s; "14.0.1" is the 14.0 series\' fix release)'),
    }

    def configure(self) -> None:
        super().configure()
        if self.stack.base.family != "deb":
            self.error(None, "libcxi's build packages are named for Debian/Ubuntu bases here", "use a Debian or Ubuntu base")
        if self.source == "upstream":
            self.artifacts()   # a part without a pin is refused at load, like the component's own file

    def part_version(self, part: str) -> str:
        return self.opts.get(PARTS[part][0]) or self.version

    def artifacts(self) -> list[sources.Artifact]:
        out = super().artifacts()
        if self.source != "upstream":
            return out
        for part, (_option, file, url) in PARTS.items():
            version = self.part_version(part)
            digest, origin = sources.pin(part, version, pinnable(self.stack.site), self.stack.site)
            if digest is None:
                self.error(PARTS[part][0] if self.where is not None and PARTS[part][0] in self.where else "version",
                           f"imagekit has no sha256 pin for {part} {version} ({url.format(version=version)})",
                           f"pin the site mirror's {file.format(version=version)} in the site pins file (--site FILE "
                           f"or ${sources.SITE_ENV}): `pins: {{{part}: {{\"{version}\": \"<sha256>\"}}}}`")
            out.append(sources.Artifact(part, file.format(version=version), url.format(version=version), digest,
                                        origin, version))
        return out

    def _directory(self, artifact: sources.Artifact, repo: str) -> str:
        # The mirror's files unpack to NAME-VERSION/ (release style); GitHub's tag archives to
        # REPO-release-shs-VERSION/.
        return (artifact.filename.removesuffix(".tar.gz") if self.stack.mirror
                else f"{repo}-release-shs-{artifact.version}")

    def building_blocks(self) -> list:
        from hpccm.building_blocks import generic_build

        lib, cassini, driver = self.artifacts()
        # HPE's tag archives (no mirror) have no configure: autogen.sh needs the autotools.
        autotools = [] if self.stack.mirror else ["autoconf", "automake", "libtool"]
        blocks = _blocks.build_tools(self.stack, BUILD_PACKAGES + autotools, "libcxi build tools: libconfig, libuv, "
                                     "fuse, yaml, libnl, numa and sensors headers; python3 for cxi_dump_csrs.h")
        for artifact, repo, install in (
                (cassini, "shs-cassini-headers", [f"mkdir -p {PREFIX}/include {PREFIX}/share",
                                                  f"cp -a include/. {PREFIX}/include/",
                                                  f"cp -a share/. {PREFIX}/share/"]),
                (driver, "shs-cxi-driver", [f"mkdir -p {PREFIX}/include", f"cp -a include/. {PREFIX}/include/"])):
            src = sources.block_source(self.stack, artifact)
            blocks.append(generic_build(**{k: v for k, v in src.items() if k != "preconfigure"},
                                        directory=self._directory(artifact, repo),
                                        build=[*src["preconfigure"], *install]))
        src = sources.block_source(self.stack, lib)
        tmp = sources.BUILD_DIR
        blocks.append(generic_build(
            **{k: v for k, v in src.items() if k != "preconfigure"}, directory=self._directory(lib, "shs-libcxi"),
            prefix=PREFIX, ldconfig=True, libdir="lib64",
            build=[*src["preconfigure"],
                   # libcxi's Makefile looks for ../cassini-headers/install and ../cxi-driver beside itself.
                   f"mkdir -p {tmp}/cassini-headers {tmp}/cxi-driver",
                   f"ln -sfn {PREFIX} {tmp}/cassini-headers/install",
                   f"ln -sfn {PREFIX}/include {tmp}/cxi-driver/include",
                   "test -x configure || ./autogen.sh",
                   f"./configure --prefix={PREFIX} --libdir={LIBDIR} --disable-static "
                   f"CPPFLAGS=\"-I{PREFIX}/include -I{PREFIX}/include/uapi\"",
                   # Upstream's -Werror lives in pkg_CFLAGS: replacing CFLAGS (as the mirror's README
                   # does) would also drop configure's -DHAVE_CUDA_SUPPORT, and the GPU diagnostics.
                   "make -j$(nproc) pkg_CFLAGS=\"-Wall -Wno-error\"",
                   "make install",
                   f"rm -rf {tmp}/cassini-headers {tmp}/cxi-driver {LIBDIR}/*.la {PREFIX}/share/man"]))
        return blocks

    def runtime(self) -> list:
        tools = [f"{PREFIX}/bin/{t}" for t in TOOLS]
        return _blocks.apt_install(self.stack, RUNTIME_PACKAGES, "libcxi's libraries (libnl-3)") + \
            _blocks.copy_from_devel(LIBDIR, *tools) + _blocks.ldconfig_dir("cxi", LIBDIR) + \
            _blocks.env(self.environment())

    def environment(self) -> dict[str, str]:
        return {"PATH": f"{PREFIX}/bin:$PATH"}

    def labels(self) -> dict[str, str]:
        return {"prefix": PREFIX, "libdir": LIBDIR, "cassini_headers": self.part_version("cassini-headers"),
                "cxi_driver": self.part_version("cxi-driver")}

    def dlopens(self) -> list[Opens]:
        # The GPU diagnostics (cxi_gpu_loopback_bw, the *_bw tools' --use-gpu) open the vendor's runtime
        # by name (utils/utils_gpu_*.c, each #ifdef its configure found); configure finds CUDA where
        # /usr/local/cuda exists, as in the CUDA stacks.
        utils = f"{LIBDIR}/libcxiutils.so.0"
        return [Opens(utils, ("libcudart.so",), "utils/utils_gpu_cuda.c (HAVE_CUDA_SUPPORT)"),
                Opens(utils, ("libamdhip64.so",), "utils/utils_gpu_hip.c (HAVE_HIP_SUPPORT)"),
                Opens(utils, ("libze_loader.so",), "utils/utils_gpu_ze.c (HAVE_ZE_SUPPORT)")]

    def checks(self) -> list:
        return [
            checks.library("libcxi.lib", "libcxi.so.1"),
            checks.run("libcxi.tools", "the CXI diagnostics are installed (cxi_stat, cxi_write_bw)",
                       "command -v cxi_stat && command -v cxi_write_bw"),
            checks.run("libcxi.devices", "cxi_stat sees a Slingshot NIC (cxi0)", "cxi_stat -l", expect=r"cxi\d",
                       needs="fabric"),
        ]
