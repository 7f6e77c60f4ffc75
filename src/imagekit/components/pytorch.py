"""PyTorch wheels matched to the stack's CUDA and NCCL, installed into the python venv.

Two wheel indexes publish torch with CUDA, and they pick the CUDA build differently:

``index: pytorch`` (PyTorch's own index, ``index_url``): one index per CUDA build
(``.../whl/cu124``); imagekit picks the one matching the stack's CUDA.

``index: pypi`` (pip's configured index: PyPI or a site's mirror of it): one Linux
torch wheel per release and CPU architecture, whose CUDA and NCCL are fixed by that
wheel's own requirements (``cuda-toolkit[...]==X``, ``nvidia-nccl-cuNN==Y``). The
stack's CUDA and NCCL must then be exactly those, or the image carries two of each.
torch 2.15.0's ``manylinux_2_28_aarch64`` wheel is a CUDA build as well (it carries
``libtorch_cuda.so`` and requires the same CUDA and NCCL wheels, which all exist for
aarch64): the Grace (GH200, GB200, GB300) image comes from the same index.

One NCCL: torch loads ``libnccl.so.2`` from its nvidia-nccl wheel through its
RUNPATH, ahead of the loader's cache. Where the stack has its own NCCL (the same
wheel version, which ``check_stack`` demands), the wheel's copy is replaced by a
link to the stack's, so torch, nccl-tests and every other program load one file.

The runtime stage carries a C compiler and the Python headers: ``torch.compile``
(Inductor, Triton) compiles a C launcher against ``Python.h`` on first use, and
fails without them ("Failed to find C compiler").
"""

from __future__ import annotations

import re

from imagekit import checks
from imagekit.util import quoting
from imagekit.components import _blocks
from imagekit.components._base import Component, Requires
from imagekit.components.python import VENV, check_requirements
from imagekit.util.schema import Option

INDEXES = ("pytorch", "pypi")
# PyTorch version -> index -> the CUDA builds it publishes there (check_stack refuses others).
# "pypi": the one CUDA build PyPI's wheel requires (`pip install --dry-run --report torch==X`).
# These are the x86_64 wheels; AARCH64_BUILDS holds what is known for aarch64.
CUDA_BUILDS = {
    "2.4.1": {"pytorch": ("cu118", "cu121", "cu124")},
    "2.5.1": {"pytorch": ("cu118", "cu121", "cu124")},
    "2.6.0": {"pytorch": ("cu118", "cu124", "cu126")},
    "2.7.1": {"pytorch": ("cu118", "cu126", "cu128")},
    "2.8.0": {"pytorch": ("cu126", "cu128", "cu129")},
    "2.9.1": {"pytorch": ("cu126", "cu128", "cu130")},
    # cuda-toolkit[cublas,cudart,...]==13.2.2 and nvidia-nccl-cu13==2.30.7 (PyPI, read November 2026).
    "2.15.0": {"pypi": ("cu132",)},
}
# aarch64 (Grace): read from the manylinux_2_28_aarch64 wheel's metadata (`pip install --dry-run
# --no-deps --only-binary=:all: --platform manylinux_2_28_aarch64 --report - torch==2.15.0`, November
# 2026): the same cuda-toolkit[...]==13.2.2 and nvidia-nccl-cu13==2.30.7 as x86_64, no
# platform_machine marker, and torch/lib/libtorch_cuda.so in the wheel. PyTorch's own index is not
# listed: imagekit has not read its aarch64 wheels.
AARCH64_BUILDS = {
    "2.15.0": {"pypi": ("cu132",)},
}
BUILDS = {"x86_64": CUDA_BUILDS, "aarch64": AARCH64_BUILDS}
DEFAULT_INDEX = "https://download.pytorch.org/whl/{cuda}"
# The nvidia-nccl-cuNN version each PyTorch release requires (`pip install --dry-run --report`):
# torch loads it from site-packages through its RUNPATH, ahead of any system NCCL.
TORCH_NCCL = {"2.5.1": "2.21.5", "2.15.0": "2.30.7"}
# Where torch's wheels put NCCL in the venv (nvidia-nccl-cu12/-cu13 both: nvidia/nccl/lib).
WHEEL_NCCL = f"{VENV}/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2"
# CUDA 13 wheels torch's requirements leave free within the major: held to the stack's CUDA minor.
CUDA_MINOR_WHEELS = ("nvidia-nvjitlink", "nvidia-cuda-cccl")
# What torch.compile needs at run time (Triton's launcher build): a C compiler and Python.h.
COMPILE_PACKAGES = ["gcc", "libc6-dev", "python3-dev"]


class Pytorch(Component):
    name = "pytorch"
    summary = "PyTorch (pip), CUDA- and NCCL-matched to the stack, with a C compiler for torch.compile"
    order = 90
    provides = ("pytorch",)
    requires = (Requires("python-env"), Requires("cuda", why="imagekit builds CUDA-matched PyTorch"))
    sources = ("pypi",)
    options = {
        "index": Option(str, "pytorch", "where torch comes from: pytorch (PyTorch's per-CUDA index, index_url) "
                                        "or pypi (pip's configured index; the CUDA build torch requires)",
                        choices=INDEXES),
        "index_url": Option(str, DEFAULT_INDEX, "wheel index for `index: pytorch`; {cuda} becomes e.g. cu124",
                            pattern=r"(https?|file)://[^\s'\"\\$`;&|<>()]+",
                            pattern_help="an http(s):// or file:// URL (no spaces, quotes or shell characters)"),
        "extras": Option(list, [], 'companion packages, e.g. ["torchvision==0.20.1"]', item_type=str),
    }

    def configure(self) -> None:
        super().configure()
        check_requirements(self, "extras")

    def arch_problem(self, arch: str) -> tuple[str, str] | None:
        table = BUILDS.get(arch)
        if table is None:
            return super().arch_problem(arch)
        if table is CUDA_BUILDS:
            return None         # x86_64: check_stack says what is wrong with a version or an index
        if self.version in CUDA_BUILDS and self.version not in table:
            known = ", ".join(f"{v} ({', '.join(f'index: {i}' for i in idx)})" for v, idx in table.items())
            return (f"imagekit knows no {arch} CUDA build of PyTorch {self.version}",
                    f"{arch} CUDA builds imagekit knows: {known}")
        if self.version in table and self.opts["index"] not in table[self.version]:
            return (f"imagekit knows PyTorch {self.version}'s {arch} CUDA wheels from "
                    f"{', '.join(f'index: {i}' for i in table[self.version])} only, not index: {self.opts['index']}",
                    f"use `index: {next(iter(table[self.version]))}` for {arch}")
        return None

    def check_stack(self) -> None:
        cuda = self.stack.provider("cuda")
        indexes = BUILDS[self.stack.base.arch].get(self.version)
        if indexes is None:
            self.error("version", f"no CUDA build table for PyTorch {self.version}",
                       "known versions: " + ", ".join(CUDA_BUILDS))
        index = self.opts["index"]
        builds = indexes.get(index)
        if builds is None:
            other = ", ".join(f"`index: {i}` ({', '.join(b)})" for i, b in indexes.items())
            self.error("index", f"imagekit knows no PyTorch {self.version} build on the {index} index",
                       f"PyTorch {self.version} is known from {other}")
        if self.cuda_tag not in builds:
            if index == "pypi":
                self.error("version", f"PyPI's torch {self.version} is built for CUDA {_cuda_of(builds[0])} "
                           f"({builds[0]}; its wheel requires that CUDA's libraries), and this stack's CUDA is "
                           f"{cuda.version}: the image would carry two CUDAs",
                           f"use CUDA {_cuda_of(builds[0])} in the stack, or another PyTorch version")
            self.error("version", f"PyTorch {self.version} has no build for CUDA {cuda.version} ({self.cuda_tag})",
                       f"PyTorch {self.version} is built for: {', '.join(builds)}; change the base image "
                       "or the PyTorch version")
        nccl, wanted = self.stack.provider("nccl"), TORCH_NCCL.get(self.version)
        if nccl is not None and wanted is not None and (nccl.source != "pypi" or nccl.version != wanted):
            where = f"NCCL {nccl.version} ({nccl.source})"
            nccl.error("version", f"PyTorch {self.version} loads the NCCL {wanted} its nvidia-nccl-cu{cuda.major} "
                       f"wheel requires, and this stack's NCCL is {where}: the image would carry two NCCLs",
                       f'use `nccl: {{source: pypi, version: "{wanted}"}}`, or `nccl: false` (torch\'s own)')

    @property
    def cuda_tag(self) -> str:
        return "cu" + "".join(self.stack.provider("cuda").major_minor.split("."))

    def devel(self) -> list:
        reqs = [f"torch=={self.version}", *self.opts["extras"]]
        if self.opts["index"] == "pypi":
            where = ""
            cuda = self.stack.provider("cuda")
            if int(cuda.major) >= 13:
                # cuda-toolkit[nvjitlink]==13.2.2 asks for nvidia-nvjitlink>=13.2.86,<14 and nvshmem for any
                # nvidia-cuda-cccl, which pip resolves to the newest 13.x: a newer CUDA's JIT linker (whose
                # output an older driver may not load) and headers beside the stack's. Both are held to the
                # stack's CUDA, as every other CUDA wheel torch pins.
                reqs += [f"{wheel}=={cuda.major_minor}.*" for wheel in CUDA_MINOR_WHEELS]
        else:
            where = "--index-url " + quoting.sh_arg(self.opts["index_url"].replace("{cuda}", self.cuda_tag)) + " "
        pkgs = " ".join(quoting.sh_arg(p) for p in reqs)
        commands = [f"{VENV}/bin/python -m pip install {where}{pkgs}"]
        nccl = self.stack.provider("nccl")
        if nccl is not None:
            # check_stack made the stack's NCCL the very version the wheel holds: link it, keep one copy.
            commands += [f"for f in {WHEEL_NCCL}; do [ -f \"$f\" ] || {{ echo \"imagekit: torch's NCCL wheel is not "
                         f"at {WHEEL_NCCL}\" >&2; exit 1; }}; ln -sf {nccl.prefix}/lib/libnccl.so.2 \"$f\"; done"]
        return _blocks.pip_run(commands, f"PyTorch {self.version} ({self.cuda_tag}, {self.opts['index']} index)")

    def runtime(self) -> list:
        return _blocks.apt_install(self.stack, COMPILE_PACKAGES, "torch.compile (Triton) builds C launchers against Python.h")

    def labels(self) -> dict[str, str]:
        return {"cuda": self.cuda_tag, "index": self.opts["index"],
                **({"nccl": TORCH_NCCL[self.version]} if self.version in TORCH_NCCL else {})}

    @property
    def torch_dir(self) -> str:
        python = self.stack.provider("python-env")
        return f"{VENV}/lib/python{python.version}/site-packages/torch"

    def checks(self) -> list:
        cuda = self.stack.provider("cuda")
        out = [
            checks.run("pytorch.version", f"python imports torch {self.version}",
                       "python3 -c 'import torch; print(torch.__version__)'",
                       expect=rf"(?m)^{re.escape(self.version)}(\+{self.cuda_tag})?$"),
            checks.run("pytorch.cuda_build", f"torch is built for the stack's CUDA {cuda.major_minor}",
                       "python3 -c 'import torch; print(torch.version.cuda)'",
                       expect=rf"(?m)^{re.escape(cuda.major_minor)}$"),
            checks.run("pytorch.nccl", "torch.distributed has NCCL",
                       "python3 -c 'import torch.distributed as d; print(d.is_nccl_available())'", expect="True"),
            checks.ldd_closure("pytorch.ldd_closure", [self.torch_dir]),
            checks.run("pytorch.compiler", "torch.compile can build C: cc compiles against the venv's Python.h",
                       "d=$(mktemp -d) && printf '#include <Python.h>\\nint f(void){return Py_IsInitialized();}\\n'"
                       " > $d/t.c && cc -c -fPIC -I\"$(python3 -c 'import sysconfig; "
                       "print(sysconfig.get_paths()[\"include\"])')\" $d/t.c -o $d/t.o && echo compiled-ok",
                       expect=r"(?m)^compiled-ok$"),
            checks.run("pytorch.cuda", "torch sees a GPU",
                       "python3 -c 'import torch; assert torch.cuda.is_available()'", needs="gpu"),
        ]
        if self.version in TORCH_NCCL:
            wanted = TORCH_NCCL[self.version]
            # torch.cuda.nccl.version() is the NCCL torch was built against (compiled in), not the library
            # it loaded: ask the loaded libnccl.so.2 as well (dlopen of a loaded soname returns that one).
            probe = ("import ctypes, torch; v = ctypes.c_int(); "
                     "ctypes.CDLL(\"libnccl.so.2\").ncclGetVersion(ctypes.byref(v)); "
                     "print(\"built\", \".\".join(map(str, torch.cuda.nccl.version()))); "
                     "print(\"loaded\", \"%d.%d.%d\" % (v.value // 10000, v.value // 100 % 100, v.value % 100))")
            mine = re.escape(wanted)
            out.append(checks.run("pytorch.nccl_version", f"torch is built for and loads NCCL {wanted} (the version "
                                  "its wheel requires)", f"python3 -c '{probe}'",
                                  expect=rf"(?ms)\A(?=.*^built {mine}$)(?=.*^loaded {mine}$)"))
            # One NCCL in the image: every libnccl.so* file, links resolved, is one file.
            out.append(checks.run("pytorch.one_nccl", "the image holds exactly one NCCL library file",
                                  "find / -xdev \\( -path /proc -o -path /sys \\) -prune -o -name 'libnccl.so*' "
                                  "-print | xargs -r readlink -f | sort -u",
                                  expect=r"\A[^\n]*/libnccl\.so[.0-9]*\n?\Z"))
        return out


def _cuda_of(tag: str) -> str:
    """cu132 -> 13.2"""
    digits = tag.removeprefix("cu")
    return f"{digits[:-1]}.{digits[-1]}"
