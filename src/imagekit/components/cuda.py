"""CUDA: the base image's own (nvidia/cuda), or NVIDIA's CUDA toolkit wheels from PyPI.

``source: base`` records the base image's CUDA version so that NCCL, PyTorch
and preflight use the right one. ``source: pypi`` installs the ``cuda-toolkit``
metapackage's wheels (nvcc, crt, nvvm, cudart, cccl, nvml headers) and lays
them out as an ordinary toolkit: ``/usr/local/cuda-X.Y`` with ``bin/nvcc``,
``include``, ``lib64`` and ``lib64/stubs`` (link stubs for the driver's
libcuda and libnvidia-ml, generated from the headers: the wheels ship none),
so UCX, Open MPI and nccl-tests build against it unchanged. Only CUDA 13's
nvcc wheel carries the whole compiler driver (12.x's has ptxas alone), so the
wheels are a toolchain from 13.0 on. The runtime stage keeps libcudart only.

Debian's non-free ``nvidia-cuda-toolkit`` is not offered: it installs under
/usr rather than a toolkit prefix, and it depends on every CUDA library
(about 4.9 GB installed for trixie's 12.4, against about 0.4 GB here).
"""

from __future__ import annotations

import base64
import re

from imagekit import checks
from imagekit.components import Component, _blocks
from imagekit.schema import Option

_TAG = re.compile(r"cuda[^:]*:(\d+\.\d+(?:\.\d+)?)")
HOME = "/usr/local/cuda"
# cuda-toolkit metapackage versions on PyPI whose nvcc wheel is a whole compiler (13.x).
PYPI_VERSIONS = ("13.0.0", "13.0.1", "13.0.2", "13.0.3", "13.1.0", "13.1.1", "13.1.2", "13.2.0", "13.2.1",
                 "13.2.2", "13.3.0", "13.3.1", "13.4.1", "13.4.2", "13.4.3", "13.5.0")
# cuobjdump: the devel stage can show which SASS a build carries (nccl-tests.sm_code).
WHEEL_EXTRAS = "nvcc,crt,nvvm,cudart,cccl,nvml,cuobjdump"
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
    summary = "CUDA: the base image's (nvidia/cuda) or NVIDIA's toolkit wheels (pypi, 13.x) as /usr/local/cuda"
    order = 0
    provides = ("cuda",)
    sources = ("base", "pypi")
    options = {
        "arch_list": Option(list, None, 'GPU architectures for CUDA code built in this stack, e.g. ["80", "90"] '
                                        "(default: per component)", item_type=str),
    }

    def configure(self) -> None:
        super().configure()
        if self.source == "pypi":
            self._configure_pypi()
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
                       f"use a 13.x version ({', '.join(PYPI_VERSIONS[:4])}, ...), or an nvidia/cuda base "
                       "with `source: base`")
        if version not in PYPI_VERSIONS:
            self.error("version", f"PyPI's cuda-toolkit has no version {version}",
                       "published: " + ", ".join(PYPI_VERSIONS))
        if self.stack.base.family != "deb":
            self.error("source", "the wheels' layout step is written for Debian/Ubuntu bases",
                       "use a Debian or Ubuntu base, or `source: base`")

    def check_arch(self, key: str, arch: str, owner: Component | None = None) -> None:
        """Refuse a GPU architecture this CUDA cannot compile, naming the ones it can."""
        archs = self.gpu_archs
        if arch not in archs:
            (owner or self).error(key, f"CUDA {self.version} cannot compile for sm_{arch}",
                                  f"CUDA {self.major_minor} compiles for: " + ", ".join(archs))

    @property
    def gpu_archs(self) -> tuple[str, ...]:
        return GPU_ARCHS.get(self.major_minor) or GPU_ARCHS.get(self.major) or _ARCHS_12

    @property
    def version(self) -> str:
        return self.opts.get("version") or _TAG.search(self.stack.base.image).group(1)

    @property
    def major_minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @property
    def major(self) -> str:
        return self.version.split(".")[0]

    @property
    def prefix(self) -> str:
        return f"{HOME}-{self.major_minor}" if self.source == "pypi" else HOME

    @property
    def target_dir(self) -> str:
        """NVIDIA's layout: the real files live in targets/<arch>-linux; include and lib64 link there."""
        return f"{self.prefix}/targets/{'sbsa' if self.stack.base.arch == 'aarch64' else 'x86_64'}-linux"

    @property
    def _target_rel(self) -> str:
        """target_dir relative to the prefix: what the include and lib64 links point at."""
        return self.target_dir.removeprefix(self.prefix + "/")

    # -- stages (pypi) ----------------------------------------------------
    def devel(self) -> list:
        if self.source != "pypi":
            return []
        stage, whl, tgt = "/var/tmp/cuda-wheels", f"/var/tmp/cuda-wheels/nvidia/cu{self.major}", self.target_dir
        return _blocks.apt_install(["ca-certificates", "gcc", "g++", "make", "python3-minimal", "python3-pip"],
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
                f"ln -s {self._target_rel}/lib {self.prefix}/lib64",
                f"cd {tgt}/lib && for f in lib*.so.*; do ln -sf $f ${{f%%.so.*}}.so; done",
                f"echo {base64.b64encode(_STUB_SCRIPT.encode()).decode()} | base64 -d | "
                f"python3 - {self.prefix}/include {tgt}/lib",
                f"ln -sfn {self.prefix} {HOME}",
                f"rm -rf {stage} {self.prefix}/lib64/cmake",
            ], f"CUDA {self.version} from NVIDIA's wheels, laid out as {HOME}") + \
            _blocks.ldconfig_dir("cuda", f"{self.prefix}/lib64") + \
            _blocks.env({**self._run_env(), "PATH": f"{HOME}/bin:$PATH", "CUDA_HOME": HOME})

    def runtime(self) -> list:
        if self.source != "pypi":
            return []
        lib = f"{self.target_dir}/lib"
        return _blocks.copy_from_devel(f"{lib}/libcudart.so.{self.major}") + \
            _blocks.shell_step([f"ln -s {self._target_rel}/lib {self.prefix}/lib64",
                                f"ln -sfn {self.prefix} {HOME}"]) + \
            _blocks.ldconfig_dir("cuda", f"{self.prefix}/lib64") + _blocks.env(self._run_env())

    def _run_env(self) -> dict[str, str]:
        # What nvidia/cuda images set: the NVIDIA container runtime (and Enroot's nvidia hook) injects
        # the driver only into containers that ask for it.
        return {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
                "NVIDIA_REQUIRE_CUDA": f"cuda>={self.major_minor}"}

    def labels(self) -> dict[str, str]:
        return {"major": self.major, "prefix": self.prefix if self.source == "pypi" else HOME}

    def checks(self) -> list:
        out = [
            checks.run("cuda.runtime", f"the CUDA {self.major} runtime library is installed",
                       f"ls {HOME}/lib64/libcudart.so.{self.major}*"),
            checks.run("cuda.driver", "nvidia-smi sees a GPU", "nvidia-smi -L", expect="GPU 0", needs="gpu"),
        ]
        if self.source == "pypi":
            out.append(checks.run("cuda.nvcc", f"nvcc reports CUDA {self.major_minor}", f"{HOME}/bin/nvcc --version",
                                  expect=rf"release {re.escape(self.major_minor)}\b", target="devel"))
        return out
