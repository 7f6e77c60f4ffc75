"""NCCL from NVIDIA's repo, built from source, or from the PyPI wheel.

``repo``: the nvidia/cuda images already configure NVIDIA's CUDA apt repo and
hold the NCCL they ship (``apt-mark hold libnccl2 libnccl-dev``). Adding the
repo a second time with another ``signed-by`` makes apt refuse every later
update ("Conflicting values set for option Signed-By"), and installing
another version of a held package fails, so imagekit uses the image's repo,
changes the held packages explicitly and holds the pinned version again.
The CUDA suffix always comes from the base image's CUDA (HPCCM's ``nccl()``
otherwise picks the newest CUDA).

``pypi``: the ``nvidia-nccl-cuXX`` wheel for the stack's CUDA major, unpacked
into a normal prefix and registered with the loader; its headers stay in the
devel stage.
"""

from __future__ import annotations

import re

from imagekit import checks, sources
from imagekit.checks.dlopen import DRIVER, IMAGE, OPTIONAL, Opens
from imagekit.components import _blocks
from imagekit.components._base import _VERSION, Component
from imagekit.util import known_errors
from imagekit.util.schema import Option

PREFIX = "/usr/local/nccl"
# nvidia-nccl-cuXX versions published on PyPI, per CUDA major.
WHEELS = {
    "12": ("2.16.2", "2.16.5", "2.17.1", "2.18.1", "2.18.3", "2.19.3", "2.20.5", "2.21.5", "2.22.3", "2.23.4",
           "2.24.3", "2.25.1", "2.25.1.post1", "2.26.2", "2.26.2.post1", "2.26.5", "2.27.3", "2.27.5", "2.27.6", "2.27.7", "2.28.3", "2.28.7",
           "2.28.9", "2.29.2", "2.29.3", "2.29.7", "2.30.3", "2.30.4", "2.30.7", "2.31.2", "2.32.3"),
    "13": ("2.27.7", "2.28.3", "2.28.7", "2.28.9", "2.29.2", "2.29.3", "2.29.7", "2.30.3", "2.30.4", "2.30.7",
           "2.31.2", "2.32.3"),
}

# nvidia-nccl-cu12 releases with no aarch64 (manylinux *_aarch64) wheel on PyPI (`pip index versions
# --platform manylinux_2_28_aarch64 ...`, November 2026): 2.20.3, 2.20.5 and 2.23.4 onwards have one.
# Every nvidia-nccl-cu13 release has one.
NO_AARCH64_WHEEL = {"12": ("2.16.2", "2.16.5", "2.17.1", "2.18.1", "2.18.3", "2.19.3", "2.21.5", "2.22.3")}

# The first NCCL release NVIDIA packaged for each CUDA minor: the one the nvidia/cuda images of that minor
# first carried (their NV_LIBNCCL_PACKAGE_VERSION; 13.0: the first nvidia-nccl-cu13 wheel). An NCCL
# released before a CUDA minor has no `+cudaX.Y` package in the repo. Where unsure, the earlier release
# is listed, so the rule never refuses a package that exists.
FIRST_FOR_CUDA = {"12.0": "2.16.2", "12.1": "2.17.1", "12.2": "2.18.3", "12.3": "2.19.3", "12.4": "2.20.5",
                  "12.5": "2.21.5", "12.6": "2.22.3", "12.8": "2.25.1", "12.9": "2.26.5", "13.0": "2.27.7"}
# The newest CUDA minor of each major NVIDIA still packages new NCCL releases for: from NCCL 2.28 on, the
# repository has `+cuda12.9` and `+cuda13.x` packages only (public package lists show libnccl2 2.28.9 for
# +cuda12.9 and +cuda13.0, none for 12.4 .. 12.8), so an older 12.x minor cannot get one.
REPO_ONLY_FOR = ((2, 28, 0), {"12": "12.9"})
# NCCL 2.25.1 ("Add Blackwell/SM100 support": kernels, graph search speeds, NVLink domain limits).
BLACKWELL = (2, 25, 1)


def release_of(version: str) -> str:
    """The NCCL release a version names: "2.26.2.post1" (a wheel's post-release), "2.23.4-1" (a package
    revision) and "2.23.4" are all NCCL 2.23.4, which is what the library reports."""
    return re.match(r"\d+(?:\.\d+)*", version).group(0)


# Releases NVIDIA published (the wheels follow every release): a repo or source version outside them names
# no package or tag. Newer releases are added here; `imagekit outdated` shows when one is out.
# A .postN wheel repackages its release (2.26.2.post1 is NCCL 2.26.2): the release is the X.Y.Z before it.
RELEASES = tuple(sorted({release_of(v) for vs in WHEELS.values() for v in vs}, key=lambda v: tuple(map(int, v.split(".")))))


def _vtuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version.split("-")[0])[:3])


class Nccl(Component):
    name = "nccl"
    summary = "NCCL: the CUDA image's repo package, a source build, or the PyPI wheel"
    order = 60
    provides = ("nccl",)
    forward_env = ("NCCL_",)
    sources = ("repo", "upstream", "pypi")
    upstream_file = ("nccl-{tag}.tar.gz", "https://github.com/NVIDIA/nccl/archive/v{tag}.tar.gz")
    options = {
        "cuda": Option(str, None, 'CUDA major of the PyPI wheel (e.g. "12"); derived from the cuda '
                                  "component otherwise", pattern=r"[0-9]+(\.[0-9]+)*",
                     pattern_help='a CUDA version, e.g. "12" (only the major picks the wheel)'),
    }

    def configure(self) -> None:
        version = self.opts.get("version") or ""
        if self.source != "pypi" and _VERSION.match(version) and release_of(version) != version.split("-")[0]:
            # A post-release or local version names a wheel; NVIDIA's repo and NCCL's tags know X.Y.Z[-N]
            # (said before the pin look-up, which would name a tag that cannot exist).
            self.error("version", *known_errors.WHEEL_VERSION_FROM_SOURCE.text(
                version=version, source=self.source, release=release_of(version)))
        super().configure()
        if self.source == "pypi" and self.opts.get("version") and self.cuda:  # no CUDA at all: rules.py says
            major = self.cuda
            published = WHEELS.get(major)
            if published is None:
                self.error("cuda", f"there is no NCCL wheel for CUDA {major}",
                           "NCCL wheels exist for CUDA " + ", ".join(WHEELS))
            elif self.version not in published:
                self.error("version", f"PyPI has no nvidia-nccl-cu{major} {self.version}",
                           f"published for CUDA {major}: " + ", ".join(published[-8:]) + " (and older)")

    def arch_problem(self, arch: str) -> tuple[str, str] | None:
        if self.source == "pypi" and arch == "aarch64" and self.version in NO_AARCH64_WHEEL.get(self.cuda, ()):
            have = [v for v in WHEELS.get(self.cuda, ()) if v not in NO_AARCH64_WHEEL[self.cuda]]
            near = next((v for v in have if _vtuple(v) > _vtuple(self.version)), have[-1])
            return (f"PyPI has no aarch64 wheel of nvidia-nccl-cu{self.cuda} {self.version}",
                    f"aarch64 wheels: {', '.join(have[:3])}, ... {have[-1]}; pin one for aarch64 alone with "
                    f'per_arch: {{aarch64: {{components: {{nccl: {{version: "{near}"}}}}}}}}')
        return super().arch_problem(arch)

    def check_stack(self) -> None:
        cuda = self.stack.provider("cuda")
        wanted = self.opts.get("cuda")
        if cuda is not None:
            if wanted and self.source == "pypi" and wanted.split(".")[0] != cuda.major:
                self.error("cuda", f"the nvidia-nccl-cu{wanted.split('.')[0]} wheel is for CUDA "
                           f"{wanted.split('.')[0]}, and this stack's CUDA is {cuda.version}",
                           f"drop `cuda:` from nccl (the wheel follows the cuda component: nvidia-nccl-cu{cuda.major})")
            if wanted and not cuda.version.startswith(wanted):
                self.error("cuda", f"NCCL's CUDA suffix {wanted!r} does not match the base image's CUDA "
                           f"{cuda.version}", "drop `cuda:` from nccl: it is derived from the base image")
            # NCCL's repo packages come from the CUDA apt repo that nvidia/cuda images configure.
            if self.source == "repo" and cuda.source != "base":
                self.error("source", f"`source: repo` needs an nvidia/cuda base (its CUDA apt repo); this stack's "
                           f"CUDA comes from {cuda.source}", "use `source: pypi` for nccl (the wheel for CUDA "
                           f"{cuda.major})")
            first = FIRST_FOR_CUDA.get(cuda.major_minor)
            if self.source == "repo" and first and _vtuple(self.version) < _vtuple(first):
                self.error("version", f"NVIDIA's repo has no libnccl2={self.tag}+cuda{cuda.major_minor}: NCCL "
                           f"{self.version.split('-')[0]} predates CUDA {cuda.major_minor}, whose first NCCL is "
                           f"{first}", f'use NCCL "{first}-1" or newer for CUDA {cuda.major_minor}, or a base image '
                           f"of the CUDA minor NCCL {self.version.split('-')[0]} was released for")
            self._check_published(cuda)
            self._check_blackwell(cuda)
        elif self.source != "pypi" or not wanted:
            self.error("source", "NCCL needs a CUDA version and this stack has no cuda component",
                       "add `cuda: {}` (version read from the base image), or use "
                       '`source: pypi` with `cuda: "12"` for the CUDA-major wheel')

    def _check_published(self, cuda) -> None:
        """A repo package or source tag that does not exist fails deep in the build (apt: "Version ... not
        found"); refuse it here, naming what exists."""
        if self.source not in ("repo", "upstream"):
            return
        release = release_of(self.version)
        if _vtuple(release) > _vtuple(RELEASES[-1]):
            # Older releases without a wheel exist (2.18.5), so only a version past the newest known is refused.
            self.error("version", f"NCCL {release} is newer than any release imagekit knows ({RELEASES[-1]})",
                       "releases known to imagekit: " + ", ".join(RELEASES[-8:]) + " (and older); if NVIDIA has "
                       "published it since, `imagekit outdated` shows it and nccl.py's WHEELS table needs it")
        since, only = REPO_ONLY_FOR
        newest = only.get(cuda.major)
        if self.source == "repo" and newest and _vtuple(release) >= since and cuda.major_minor != newest:
            self.error("version", f"NVIDIA's repo has no libnccl2={self.tag}+cuda{cuda.major_minor}: from NCCL "
                       f"{'.'.join(map(str, since))} on, CUDA {cuda.major} packages are built for CUDA {newest} only",
                       f"use an nvidia/cuda:{newest}.x base image (minor-version compatibility keeps the driver "
                       f"needs of CUDA {cuda.major}.0), or an NCCL before {'.'.join(map(str, since))} for CUDA "
                       f"{cuda.major_minor}")

    def _check_blackwell(self, cuda) -> None:
        """Code for Blackwell (sm_100 and later) in the stack needs an NCCL that knows Blackwell."""
        archs = list(cuda.opts.get("arch_list") or [])
        for component in self.stack.components.values():
            if component is not self and isinstance(getattr(type(component), "archs", None), property):
                archs += list(component.archs)  # what it compiles for (nccl-tests' gencode or its default)
        blackwell = sorted({a for a in archs if a.isdigit() and int(a) >= 100}, key=int)
        if blackwell and _vtuple(self.version) < BLACKWELL:
            self.error("version", f"NCCL {self.version} cannot drive Blackwell (sm_{', sm_'.join(blackwell)} in this "
                       "stack): Blackwell support came in NCCL 2.25.1 (\"Add Blackwell/SM100 support\"), and "
                       "older releases have no sm_100 kernels or graph search speeds for it",
                       'use NCCL "2.25.1" or newer (current: 2.32.3), or drop sm_100 and later from the GPU '
                       "architectures")

    @property
    def cuda(self) -> str:
        cuda = self.stack.provider("cuda")
        if self.source == "pypi":
            return cuda.major if cuda else (self.opts.get("cuda") or "").split(".")[0]
        return cuda.major_minor

    @property
    def tag(self) -> str:
        # NCCL's release tags carry the package revision: v2.23.4-1 (there is no v2.23.4 tag).
        return self.version if "-" in self.version else f"{self.version}-1"

    def url_fields(self) -> dict[str, str]:
        return {"version": self.version, "tag": self.tag}

    @property
    def pin_version(self) -> str:
        # "2.23.4" and "2.23.4-1" name the same release file (the tag carries the revision).
        return self.tag

    @property
    def prefix(self) -> str:
        return PREFIX if self.source != "repo" else "/usr"

    @property
    def wheel(self) -> str:
        return f"nvidia-nccl-cu{self.cuda}=={self.version}"

    def _repo_install(self, packages: list[str]) -> list:
        pinned = " ".join(f"{p}={self.tag}+cuda{self.cuda}" for p in packages)
        # Under the apt cache mounts, so the .debs (hundreds of MB for libnccl-dev) stay out of the layer.
        return _blocks.apt_run(self.stack, [
            "ls /etc/apt/sources.list.d/cuda*.list >/dev/null 2>&1 || { echo 'imagekit: no NVIDIA CUDA apt "
            "repo in the base image (expected from an nvidia/cuda image)' >&2; exit 1; }",
            "apt-get update -y",
            "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
            f"--allow-change-held-packages --allow-downgrades {pinned}",
            f"apt-mark hold {' '.join(packages)}"])

    def building_blocks(self) -> list:
        from hpccm.building_blocks import generic_build

        (artifact,) = self.artifacts()
        src = sources.block_source(self.stack, artifact)
        cuda = self.stack.provider("cuda")
        gencode = cuda_gencode(cuda, cuda.opts.get("arch_list") or default_archs(cuda)) if cuda else ""
        return _blocks.build_tools(self.stack, ["python3-minimal"], "NCCL build tools") + [generic_build(
            **{k: v for k, v in src.items() if k != "preconfigure"}, directory=f"nccl-{self.tag}",
            prefix=PREFIX, ldconfig=True, libdir=f"{PREFIX}/lib", runtime=[f"{PREFIX}/lib"],
            build=[*src["preconfigure"],
                   f"make -j$(nproc) src.build CUDA_HOME=/usr/local/cuda NVCC_GENCODE=\"{gencode}\""],
            install=[f"make src.install PREFIX={PREFIX}"])]

    def devel(self) -> list:
        if self.source == "repo":
            return self._repo_install(["libnccl2", "libnccl-dev"])
        if self.source != "pypi":
            return super().devel()
        stage = "/var/tmp/nccl-wheel"
        return _blocks.apt_install(self.stack, ["python3-minimal", "python3-pip"], "pip, to fetch the NCCL wheel") + \
            _blocks.pip_run([
                f"python3 -m pip download --no-deps --only-binary=:all: --dest {stage} {self.wheel}",
                f"python3 -m zipfile -e {stage}/nvidia_nccl_cu{self.cuda}-*.whl {stage}/whl",
                f"mkdir -p {PREFIX}",
                f"cp -a {stage}/whl/nvidia/nccl/lib {stage}/whl/nvidia/nccl/include {PREFIX}/",
                f"ln -sf libnccl.so.2 {PREFIX}/lib/libnccl.so",
                f"rm -f {PREFIX}/lib/__init__.py {PREFIX}/include/__init__.py",
                f"rm -rf {stage}",
            ], f"NCCL {self.version} from the {self.wheel.split('==')[0]} wheel") + \
            _blocks.ldconfig_dir("nccl", f"{PREFIX}/lib")

    def runtime(self) -> list:
        if self.source == "repo":
            return self._repo_install(["libnccl2"])
        if self.source != "pypi":
            return super().runtime()
        # Only the shared library: the device bitcode and LTO IR are for linking, not running.
        return _blocks.copy_from_devel(f"{PREFIX}/lib/libnccl.so.2") + _blocks.ldconfig_dir("nccl", f"{PREFIX}/lib")

    def labels(self) -> dict[str, str]:
        return {"cuda": self.cuda, "prefix": self.prefix}

    def dlopens(self) -> list[Opens]:
        """What NCCL opens by name (read from libnccl.so.2 2.30-2.32's strings and NCCL's src/misc/*wrap*,
        *symbols.cc): RDMA verbs for its own IB transport, gdrcopy, the driver's libraries; the DOCA GIN
        libraries and the GIN/RMA plugins are optional features."""
        lib = "libnccl.so.2"
        rdma = IMAGE if self.stack.provider("rdma") is not None else OPTIONAL
        gdr = IMAGE if self.stack.provider("gdrcopy") is not None else OPTIONAL
        return [
            Opens(lib, ("libibverbs.so", "libibverbs.so.1"), "src/misc/ibvsymbols.cc (NET/IB)", by=rdma),
            Opens(lib, ("libmlx5.so", "libmlx5.so.1"), "src/misc/mlx5dvsymbols.cc (Data Direct)", by=OPTIONAL),
            Opens(lib, ("libgdrapi.so", "libgdrapi.so.2"), "src/misc/gdrwrap.cc (NCCL_GDRCOPY_ENABLE)", by=gdr),
            Opens(lib, ("libcuda.so.1", "libcuda.so"), "src/misc/cudawrap.cc", by=DRIVER),
            Opens(lib, ("libnvidia-ml.so.1",), "src/misc/nvmlwrap.cc", by=DRIVER),
            Opens(lib, ("libdoca_gpunetio.so", "libdoca_verbs.so", "libdoca_common.so"), "GPU-initiated networking "
                  "(DOCA GPUNetIO)", by=OPTIONAL),
        ]

    def checks(self) -> list:
        version = release_of(self.version)
        # NCCL compiles "NCCL version X.Y.Z+cudaA.B" into the library: read it from the file the loader
        # resolves, with no Python needed in the image.
        probe = ("lib=$(ldconfig -p | awk '/libnccl[.]so[.]2 /{print $NF; exit}'); "
                 "[ -n \"$lib\" ] && grep -a -o -m1 'NCCL version [0-9][0-9.]*' \"$lib\"")
        return [
            checks.library("nccl.lib", "libnccl.so.2"),
            checks.run("nccl.version", f"libnccl.so.2 is NCCL {version}", probe,
                       expect=rf"NCCL version {re.escape(version)}\b"),
        ]


def default_archs(cuda) -> list[str]:
    """Ampere and Hopper, plus Blackwell where this CUDA has it (what AWS's and CoreWeave's recipes build):
    sm_100 (B200, GB200), sm_103 (B300, GB300; CUDA 12.9 and later) and sm_120 (RTX Blackwell)."""
    return [a for a in ("80", "90", "100", "103", "120") if a in cuda.gpu_archs]


def cuda_gencode(cuda, archs: list[str]) -> str:
    """nvcc -gencode flags: SASS for each architecture and PTX of the newest, for GPUs after it."""
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    return " ".join(flags + [f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}"])
