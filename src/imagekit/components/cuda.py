"""CUDA: the base image's own (nvidia/cuda), NVIDIA's toolkit wheels from PyPI, or Debian's toolkit.

``source: base`` records the base image's CUDA version so that NCCL, PyTorch
and preflight use the right one. ``source: pypi`` installs the ``cuda-toolkit``
metapackage's wheels (nvcc, crt, nvvm, cudart, cccl, nvml headers) and lays
them out as an ordinary toolkit: ``/usr/local/cuda-X.Y`` with ``bin/nvcc``,
``include``, ``lib64`` and ``lib64/stubs`` (link stubs for the driver's
libcuda and libnvidia-ml, generated from the headers: the wheels ship none),
so UCX, Open MPI and nccl-tests build against it unchanged. Only CUDA 13's
nvcc wheel carries the whole compiler driver (12.x's has ptxas alone), so the
wheels are a toolchain from 13.0 on. The runtime stage keeps libcudart only.

``source: distro`` is the CUDA 12 toolchain that builds with no registry:
12.x's wheels have no compiler, so the devel stage installs Debian 13's
non-free ``nvidia-cuda-toolkit`` (12.4.1: nvcc, headers, every CUDA library,
about 4.9 GB installed under /usr) and lays ``/usr/local/cuda-12.4`` over it
(bin links, include -> /usr/include, lib64 with libcudart and link stubs),
while the runtime stage copies only ``libcudart.so.12`` taken from the
``nvidia-cuda-runtime-cu12`` wheel of the same release, so none of Debian's
packages (and none of the driver libraries they depend on) reach it.

Debian's package depends on the driver's libcuda1/libnvidia-ml1 (550); a container
must use the host's driver (the GPU runtime mounts it), so a placeholder
package provides those names and the link stubs come from the headers, as
for the wheels. The CUDA 12.4 nvcc supports gcc <= 13 and trixie's gcc is
14: Debian's package depends on g++-13 and its nvcc.profile puts
/usr/lib/nvidia-cuda-toolkit/bin first on nvcc's PATH, whose gcc/g++
wrappers run gcc-13, so nvcc's host compiler is 13 while C code (UCX, Open
MPI) builds with the distro's gcc 14.

Drivers: under CUDA minor-version compatibility a CUDA 12.x runtime runs on
any R525+ driver (525.60.13 on Linux) and 13.x on R580+ (580.65.06), so
``NVIDIA_REQUIRE_CUDA`` asks for the major's first minor (cuda>=12.0), not
the toolkit's (cuda>=12.4 would make libnvidia-container refuse an R535
driver, which reports CUDA 12.2). The label ``min_driver`` records the
minimum for preflight.
"""

from __future__ import annotations

import base64
import re

from imagekit import checks
from imagekit.components import _blocks
from imagekit.components._base import Component
from imagekit.util.schema import Option

_TAG = re.compile(r"cuda[^:]*:(\d+\.\d+(?:\.\d+)?)")
HOME = "/usr/local/cuda"
# The program a user's first build compiles: a kernel and the runtime API, linked the way nvcc links by
# default (cudart static, cudadevrt), with no -L or -l of its own. It prints what a GPU computed, so
# the same binary shows on a GPU host that the code runs (tests/gpu_image.py).
_NVCC_PROGRAM = (
    "#include <cstdio>",
    "__global__ void twice(int *v) { v[threadIdx.x] = 2 * threadIdx.x; }",
    "int main() { int *d, h[32], s = 0; if (cudaMalloc(&d, sizeof h) != cudaSuccess) { puts(\"no GPU\"); return 3; }",
    "  twice<<<1, 32>>>(d); cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);",
    "  for (int i = 0; i < 32; i++) s += h[i]; printf(\"kernel sum %d\\n\", s); return s == 992 ? 0 : 1; }",
)
# The program must come out as an executable carrying sm_90 code (cuobjdump reads its fatbin): a compiler
# that exits 0 without writing one fails too.
NVCC_LINK = ("d=$(mktemp -d) && cd \"$d\" && printf '%s\\n' " + " ".join("'" + line + "'" for line in _NVCC_PROGRAM)
             + f" > k.cu && {HOME}/bin/nvcc -gencode arch=compute_90,code=sm_90 k.cu -o k && test -x k && "
             f"{HOME}/bin/cuobjdump --list-elf k | grep -q sm_90 && echo linked k; "
             "rc=$?; cd / && rm -rf \"$d\"; exit $rc")
# cuda-toolkit metapackage versions on PyPI whose nvcc wheel is a whole compiler (13.x).
PYPI_VERSIONS = ("13.0.0", "13.0.1", "13.0.2", "13.0.3", "13.1.0", "13.1.1", "13.1.2", "13.2.0", "13.2.1",
                 "13.2.2", "13.3.0", "13.3.1", "13.4.1", "13.4.2", "13.4.3", "13.5.0")
# cuobjdump: the devel stage can show which SASS a build carries (nccl-tests.sm_code).
WHEEL_EXTRAS = "nvcc,crt,nvvm,cudart,cccl,nvml,cuobjdump"
# Debian's nvidia-cuda-toolkit (non-free) per distro: (CUDA version, the nvidia-cuda-runtime-cuXX wheel
# of the same release that the runtime stage takes libcudart from). Bookworm's is 11.8: too old for NCCL 2.2x.
DISTRO_TOOLKITS = {"debian13": ("12.4.1", "12.4.127")}
# The driver each CUDA major needs, under minor-version compatibility (NVIDIA, "CUDA Compatibility",
# table "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version Compatibility":
# 11.x >= 450.80.02, 12.x >= 525.60.13, 13.x >= 580.65.06 on Linux). Minor-version compatibility
# does not cover PTX newer than the driver: such PTX must be JIT-compiled by a driver that knows it.
MIN_DRIVER = {"11": "450.80.02", "12": "525.60.13", "13": "580.65.06"}
# nvcc tools Debian installs in /usr/bin that builds look for under $CUDA_HOME/bin.
_DISTRO_TOOLS = ("nvcc", "ptxas", "cuobjdump", "nvdisasm", "fatbinary", "nvlink", "bin2c", "cudafe++", "nvprune",
                 "cu++filt")
# Provides Debian's CUDA packages depend on, so that apt installs no driver library into the image.
_NO_DRIVER = (r"Package: imagekit-no-driver\nVersion: 1\nArchitecture: all\nMaintainer: imagekit\n"
              r"Provides: libcuda.so.1 (= 550), libcuda-{mm}-1, libnvidia-ml.so.1 (= 550)\n"
              r"Description: the host NVIDIA driver, mounted by the GPU runtime at run time\n")
# SM architectures each CUDA release compiles for (nvcc --list-gpu-arch): CUDA 12.0 dropped
# Kepler (sm_35/37), 12.8 added Blackwell (sm_100, sm_120), 12.9 sm_103/121, and 13.0 dropped
# everything before Turing (sm_75).
_ARCHS_12 = ("50", "52", "53", "60", "61", "62", "70", "72", "75", "80", "86", "87", "89", "90")
GPU_ARCHS = {
    "11.8": ("35", "37", *_ARCHS_12),
    "12.0": _ARCHS_12, "12.1": _ARCHS_12, "12.2": _ARCHS_12, "12.3": _ARCHS_12, "12.4": _ARCHS_12,
    "12.5": _ARCHS_12, "12.6": _ARCHS_12,
    "12.8": (*_ARCHS_12, "100", "101", "120"),
    "12.9": (*_ARCHS_12, "100", "101", "103", "120", "121"),
    "13": ("75", "80", "86", "87", "88", "89", "90", "100", "103", "110", "120", "121"),
}
# Architectures a CUDA release dropped, with the release and the GPUs they are (for the error a stack gets).
DROPPED = {**{a: ("13.0", "Volta (V100, Titan V)") for a in ("70", "72")},
           **{a: ("13.0", "Pascal (P100, P40)") for a in ("60", "61", "62")},
           **{a: ("13.0", "Maxwell") for a in ("50", "52", "53")},
           **{a: ("12.0", "Kepler (K80)") for a in ("35", "37")}}
# Writes link-only stubs of the driver libraries from the toolkit's own headers: every function
# the (preprocessed and raw) header declares becomes an empty exported symbol.
_STUB_SCRIPT = r"""import re, subprocess, sys
inc, lib = sys.argv[1], sys.argv[2]
pat = re.compile(r"^\s*(?:extern\s+)?\w+\s+(?:CUDAAPI\s+|DECLDIR\s+)?\**((?:cu|nvml)[A-Z]\w*)\s*\(", re.M)
for header, soname, name in (("cuda.h", "libcuda.so.1", "libcuda.so"), ("nvml.h", "libnvidia-ml.so.1", "libnvidia-ml.so")):
    path = f"{inc}/{header}"
    pre = subprocess.run(["cc", "-E", "-P", "-I", inc, path], capture_output=True, text=True, check=True).stdout
    names = sorted(set(pat.findall(pre)) | set(pat.findall(open(path).read())))
    src = f"/tmp/{name}.c"
    open(src, "w").write("".join(f"void {n}(void) {{}}\n" for n in names))
    subprocess.run(["cc", "-shared", "-fPIC", "-o", f"{lib}/stubs/{name}", f"-Wl,-soname,{soname}", src], check=True)
"""


class Cuda(Component):
    name = "cuda"
    summary = ("CUDA: the base image's (nvidia/cuda), NVIDIA's toolkit wheels (pypi, 13.x) or Debian's toolkit "
               "(distro, 12.4 on trixie, devel only) as /usr/local/cuda")
    order = 0
    provides = ("cuda",)
    sources = ("base", "pypi", "distro")
    distro_versions = {distro: version for distro, (version, _wheel) in DISTRO_TOOLKITS.items()}
    options = {
        "arch_list": Option(list, None, 'GPU architectures for CUDA code built in this stack, e.g. ["80", "90"] '
                                        "(default: per component)", item_type=str),
    }

    def configure(self) -> None:
        super().configure()
        if self.source == "pypi":
            self._configure_pypi()
        elif self.source == "distro":
            self._configure_distro()
        elif self.opts.get("version"):
            found = _TAG.search(self.stack.base.image)
            if found and not found.group(1).startswith(self.opts["version"]) \
                    and not self.opts["version"].startswith(found.group(1)):
                self.error("version", f"CUDA {self.opts['version']} does not match the base image "
                           f"{self.stack.base.image} (CUDA {found.group(1)})",
                           "drop `version:` (it is read from the base image) or change the base image")
        elif not _TAG.search(self.stack.base.image):
            self.error(None, f"cannot read the CUDA version from the base image {self.stack.base.image!r}",
                       'add `version: "12.4.1"` to cuda (the CUDA version inside the base image), or use '
                       '`source: pypi` with `version: "13.0.2"` for NVIDIA\'s toolkit wheels')
        for arch in self.opts.get("arch_list") or []:
            self.check_arch("arch_list", arch)

    def _configure_pypi(self) -> None:
        version = self.opts["version"]
        if version.split(".")[0].isdigit() and int(version.split(".")[0]) < 13:
            self.error("version", f"CUDA {version} has no compiler on PyPI: 12.x's nvidia-cuda-nvcc wheel "
                       "carries ptxas alone, not the nvcc driver",
                       f"use a 13.x version ({', '.join(PYPI_VERSIONS[:4])}, ...), `source: distro` on a "
                       "debian13 base (Debian's CUDA 12.4 toolkit, as the debian-cuda12 stack does), or an "
                       "nvidia/cuda base with `source: base`")
        if version not in PYPI_VERSIONS:
            self.error("version", f"PyPI's cuda-toolkit has no version {version}",
                       "published: " + ", ".join(PYPI_VERSIONS))
        if self.stack.base.family != "deb":
            self.error("source", "the wheels' layout step is written for Debian/Ubuntu bases",
                       "use a Debian or Ubuntu base, or `source: base`")

    def _configure_distro(self) -> None:
        distro = self.stack.base.distro
        if distro not in DISTRO_TOOLKITS:
            self.error("source", f"imagekit has no distro CUDA toolkit for {distro}",
                       "Debian's nvidia-cuda-toolkit is used on: " + ", ".join(
                           f"{d} (CUDA {v})" for d, (v, _) in DISTRO_TOOLKITS.items())
                       + "; or use `source: pypi` (13.x) or an nvidia/cuda base with `source: base`")
        wanted, shipped = self.opts.get("version"), DISTRO_TOOLKITS[distro][0]
        if wanted and not shipped.startswith(wanted):
            self.error("version", f"{distro}'s nvidia-cuda-toolkit is CUDA {shipped}, not {wanted}",
                       f'drop `version:` or write "{shipped}"')

    def check_arch(self, key: str, arch: str, owner: Component | None = None) -> None:
        """Refuse a GPU architecture this CUDA cannot compile, naming the ones it can."""
        archs = self.gpu_archs
        if arch not in archs:
            dropped = DROPPED.get(arch)
            why = (f": CUDA {dropped[0]} dropped {dropped[1]} GPUs" if dropped and
                   tuple(map(int, self.major_minor.split("."))) >= tuple(map(int, dropped[0].split("."))) else "")
            fix = f"CUDA {self.major_minor} compiles for: " + ", ".join(archs)
            if dropped and why:
                fix += (f"; for sm_{arch} use a CUDA release before {dropped[0]} (the nccl-tests-volta stack is "
                        "CUDA 12.9 with sm_70)")
            (owner or self).error(key, f"CUDA {self.version} cannot compile for sm_{arch}{why}", fix)

    @property
    def gpu_archs(self) -> tuple[str, ...]:
        return GPU_ARCHS.get(self.major_minor) or GPU_ARCHS.get(self.major) or _ARCHS_12

    @property
    def version(self) -> str:
        if self.source == "distro":
            return DISTRO_TOOLKITS[self.stack.base.distro][0]
        return self.opts.get("version") or _TAG.search(self.stack.base.image).group(1)

    @property
    def min_driver(self) -> str | None:
        """The oldest Linux driver that runs this CUDA (minor-version compatibility), or None if unknown."""
        return MIN_DRIVER.get(self.major)

    @property
    def major_minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @property
    def major(self) -> str:
        return self.version.split(".")[0]

    @property
    def prefix(self) -> str:
        return f"{HOME}-{self.major_minor}" if self.source in ("pypi", "distro") else HOME

    @property
    def target_dir(self) -> str:
        """NVIDIA's layout: the real files live in targets/<arch>-linux; include and lib64 link there."""
        return f"{self.prefix}/targets/{'sbsa' if self.stack.base.arch == 'aarch64' else 'x86_64'}-linux"

    @property
    def _target_rel(self) -> str:
        """target_dir relative to the prefix: what the include and lib64 links point at."""
        return self.target_dir.removeprefix(self.prefix + "/")

    def _lib_links(self) -> list[str]:
        """lib64 as every CUDA build expects it, and lib beside it: nvcc.profile's link line searches
        $(TOP)/lib (the wheels' nvcc.profile, as NVIDIA's own layout has it), so without the second
        link a plain `nvcc k.cu -o k` cannot find libcudart_static or libcudadevrt."""
        return [f"ln -s {self._target_rel}/lib {self.prefix}/lib64", f"ln -s {self._target_rel}/lib {self.prefix}/lib"]

    # -- stages (pypi) ----------------------------------------------------
    def devel(self) -> list:
        if self.source == "distro":
            return self._distro_devel()
        if self.source != "pypi":
            return []
        stage, whl, tgt = "/var/tmp/cuda-wheels", f"/var/tmp/cuda-wheels/nvidia/cu{self.major}", self.target_dir
        return _blocks.apt_install(self.stack, ["ca-certificates", "gcc", "g++", "make", "python3-minimal", "python3-pip"],
                                   "CUDA from wheels: pip to fetch them, gcc for nvcc and the driver stubs") + \
            _blocks.pip_run([
                f"python3 -m pip install --no-cache-dir --break-system-packages --target {stage} "
                f"'cuda-toolkit[{WHEEL_EXTRAS}]=={self.version}.*'",
                f"mkdir -p {tgt}/lib/stubs {self.prefix}/bin",
                f"cp -a {whl}/bin/. {self.prefix}/bin/",
                f"cp -a {whl}/nvvm {self.prefix}/",
                f"cp -a {whl}/include {tgt}/",
                f"cp -a {whl}/lib/. {tgt}/lib/",
                f"ln -s {self._target_rel}/include {self.prefix}/include",
                *self._lib_links(),
                f"cd {tgt}/lib && for f in lib*.so.*; do ln -sf $f ${{f%%.so.*}}.so; done",
                f"echo {base64.b64encode(_STUB_SCRIPT.encode()).decode()} | base64 -d | "
                f"python3 - {self.prefix}/include {tgt}/lib",
                f"ln -sfn {self.prefix} {HOME}",
                f"rm -rf {stage} {self.prefix}/lib64/cmake",
            ], f"CUDA {self.version} from NVIDIA's wheels, laid out as {HOME}") + \
            _blocks.ldconfig_dir("cuda", f"{self.prefix}/lib64") + \
            _blocks.env({**self._run_env(), "PATH": f"{HOME}/bin:$PATH", "CUDA_HOME": HOME})

    def _distro_devel(self) -> list:
        tgt, stage, wheel = self.target_dir, "/var/tmp/cudart-wheel", DISTRO_TOOLKITS[self.stack.base.distro][1]
        pkgs = "ca-certificates g++ gcc make nvidia-cuda-toolkit python3-minimal python3-pip"
        install = [
            "mkdir -p /var/tmp/no-driver/DEBIAN",
            f"printf '{_NO_DRIVER.format(mm=self.major_minor)}' > /var/tmp/no-driver/DEBIAN/control",
            "dpkg-deb --build /var/tmp/no-driver /var/tmp/no-driver.deb >/dev/null",
            "dpkg -i /var/tmp/no-driver.deb",
            "rm -rf /var/tmp/no-driver /var/tmp/no-driver.deb",
            "apt-get update -y",
            "if ! apt-cache show nvidia-cuda-toolkit >/dev/null 2>&1; then echo 'imagekit: no nvidia-cuda-toolkit: "
            "the base needs the non-free component (imagekit base debian:trixie --components main,contrib,non-free)'"
            " >&2; exit 1; fi",
            f"DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {pkgs}",
        ]
        note = (f"CUDA {self.version} from Debian's nvidia-cuda-toolkit (non-free; devel only, nvcc runs gcc-13); "
                "a placeholder package stands in for the driver the GPU runtime mounts")
        return _blocks.apt_run(self.stack, install, note) + _blocks.pip_run([
            f"python3 -m pip download --no-deps --only-binary=:all: --dest {stage} "
            f"nvidia-cuda-runtime-cu{self.major}=={wheel}",
            f"python3 -m zipfile -e {stage}/nvidia_cuda_runtime_cu{self.major}-*.whl {stage}/whl",
            f"mkdir -p {tgt}/lib/stubs {self.prefix}/bin",
            f"cp {stage}/whl/nvidia/cuda_runtime/lib/libcudart.so.{self.major} {tgt}/lib/",
            f"ln -s libcudart.so.{self.major} {tgt}/lib/libcudart.so",
            f"for t in {' '.join(_DISTRO_TOOLS)}; do ln -s /usr/bin/$t {self.prefix}/bin/$t; done",
            f"ln -s /usr/include {tgt}/include",
            f"ln -s {self._target_rel}/include {self.prefix}/include",
            *self._lib_links(),
            f"echo {base64.b64encode(_STUB_SCRIPT.encode()).decode()} | base64 -d | "
            f"python3 - /usr/include {tgt}/lib",
            f"ln -sfn {self.prefix} {HOME}",
            f"rm -rf {stage}",
        ], f"libcudart {wheel} from the nvidia-cuda-runtime-cu{self.major} wheel (what the runtime stage keeps), "
           f"laid out with Debian's nvcc and headers as {HOME}") + \
            _blocks.ldconfig_dir("cuda", f"{self.prefix}/lib64") + \
            _blocks.env({**self._run_env(), "PATH": f"{HOME}/bin:$PATH", "CUDA_HOME": HOME})

    def runtime(self) -> list:
        if self.source not in ("pypi", "distro"):
            return []
        lib = f"{self.target_dir}/lib"
        return _blocks.copy_from_devel(f"{lib}/libcudart.so.{self.major}") + \
            _blocks.shell_step([f"ln -s {self._target_rel}/lib {self.prefix}/lib64",
                                f"ln -sfn {self.prefix} {HOME}"]) + \
            _blocks.ldconfig_dir("cuda", f"{self.prefix}/lib64") + _blocks.env(self._run_env())

    def _run_env(self) -> dict[str, str]:
        # What nvidia/cuda images set: the NVIDIA container runtime (and Enroot's nvidia hook) injects
        # the driver only into containers that ask for it.
        # libnvidia-container refuses a driver whose CUDA version is below NVIDIA_REQUIRE_CUDA. Under
        # minor-version compatibility any driver of the same major runs this runtime (R525+ for 12.x,
        # which reports CUDA 12.0; R535 reports 12.2), so ask for the major's first minor: cuda>=12.4
        # would refuse R535/R550 hosts that run the image fine.
        return {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
                "NVIDIA_REQUIRE_CUDA": f"cuda>={self.major}.0"}

    @property
    def stack_archs(self) -> list[str]:
        """Every GPU architecture the stack compiles code for: arch_list and each component's own (nccl-tests'
        gencode), in order; preflight compares them with the host's GPUs."""
        archs = list(self.opts.get("arch_list") or [])
        for component in self.stack.components.values():
            if component is not self and isinstance(getattr(type(component), "archs", None), property):
                archs += [a for a in component.archs if a not in archs]
        return sorted(set(archs), key=lambda a: int(a) if a.isdigit() else 0)

    def labels(self) -> dict[str, str]:
        out = {"major": self.major, "prefix": self.prefix if self.source in ("pypi", "distro") else HOME}
        if self.stack_archs:
            out["archs"] = ",".join(self.stack_archs)
        if self.min_driver:
            out["min_driver"] = self.min_driver
            # One driver policy per image, the one preflight enforces (review 3 H13): the CUDA major's
            # minimum under minor-version compatibility. A base image's cuda-compat libraries may let a
            # data-center GPU on an older branch start it (forward compatibility); imagekit does not count
            # on that, and the wheel-based images carry none.
            out["driver_policy"] = "minor-version"
        return out

    def checks(self) -> list:
        out = [
            checks.run("cuda.runtime", f"the CUDA {self.major} runtime library is installed",
                       f"ls {HOME}/lib64/libcudart.so.{self.major}*"),
            checks.run("cuda.driver", "nvidia-smi sees a GPU", "nvidia-smi -L", expect="GPU 0", needs="gpu"),
        ]
        if self.source in ("pypi", "distro"):
            out.append(checks.run("cuda.nvcc", f"nvcc reports CUDA {self.major_minor}", f"{HOME}/bin/nvcc --version",
                                  expect=rf"release {re.escape(self.major_minor)}\b", target="devel"))
            out.append(checks.run("cuda.nvcc_link", "a plain `nvcc -gencode arch=compute_90,code=sm_90 k.cu -o k` "
                                  "compiles and links (libcudart_static and libcudadevrt found)", NVCC_LINK,
                                  expect=r"linked k", target="devel"))
        return out
