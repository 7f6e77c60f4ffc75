"""NCCL from NVIDIA's repo, built from source, or from the PyPI wheel.

The CUDA suffix always comes from the base image's CUDA (HPCCM's ``nccl()``
otherwise picks the newest CUDA). The PyPI wheel (``nvidia-nccl-cuXX``) is
unpacked into a normal prefix, registered with the loader, and its headers kept
in the devel stage only.
"""

from __future__ import annotations

import re

from imagekit import checks
from imagekit.components import Component, _blocks
from imagekit.schema import Option

PREFIX = "/usr/local/nccl"


class Nccl(Component):
    name = "nccl"
    summary = "NCCL: repo package, source build, or PyPI wheel"
    order = 60
    sources = ("repo", "upstream", "pypi")
    options = {
        "cuda": Option(str, None, 'CUDA major for the PyPI wheel (e.g. "12"); derived from the cuda '
                                  "component otherwise"),
    }

    @property
    def cuda(self) -> str:
        cuda = self.stack.get("cuda")
        if self.source == "pypi":
            return cuda.major if cuda else self.opts["cuda"].split(".")[0]
        return cuda.major_minor

    @property
    def prefix(self) -> str:
        return PREFIX if self.source != "repo" else "/usr"

    @property
    def wheel(self) -> str:
        return f"nvidia-nccl-cu{self.cuda}=={self.version}"

    def building_blocks(self) -> list:
        from hpccm.building_blocks import nccl

        if self.source == "repo":
            return [nccl(version=self.version, cuda=self.cuda)]
        # NCCL's release tags (and so the archive URL and its top directory) carry the
        # package revision: v2.23.4-1 -> nccl-2.23.4-1; there is no v2.23.4 tag.
        tag = self.version if "-" in self.version else f"{self.version}-1"
        return [nccl(build=True, version=tag, prefix=PREFIX,
                     make_variables={"CUDA_HOME": "/usr/local/cuda"})]

    def devel(self) -> list:
        if self.source != "pypi":
            return super().devel()
        stage = "/var/tmp/nccl-wheel"
        return _blocks.apt_install(["python3-minimal", "python3-pip"], "pip, to fetch the NCCL wheel") + \
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
        if self.source != "pypi":
            return super().runtime()
        return _blocks.copy_from_devel(f"{PREFIX}/lib") + _blocks.ldconfig_dir("nccl", f"{PREFIX}/lib")

    def labels(self) -> dict[str, str]:
        return {"cuda": self.cuda, "prefix": self.prefix}

    def checks(self) -> list:
        major, minor, patch = (self.version.split("-")[0].split(".") + ["0", "0"])[:3]
        code = int(major) * 10000 + int(minor) * 100 + int(patch)
        probe = ("if command -v python3 >/dev/null; then python3 -c 'import ctypes; v = ctypes.c_int(); "
                 "ctypes.CDLL(\"libnccl.so.2\").ncclGetVersion(ctypes.byref(v)); print(v.value)'; "
                 "else readlink -f \"$(ldconfig -p | awk \"/libnccl.so.2 /{print \\$NF; exit}\")\"; fi")
        return [
            checks.library("nccl.lib", "libnccl.so.2"),
            checks.run("nccl.version", f"libnccl.so.2 is NCCL {self.version.split('-')[0]}", probe,
                       expect=rf"({code}|libnccl\.so\.{re.escape(self.version.split('-')[0])})"),
        ]
