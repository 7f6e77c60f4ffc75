"""CUDA, as provided by the base image (nvidia/cuda devel and runtime images).

imagekit does not install CUDA; it records the base image's CUDA version so
that NCCL, PyTorch and the label-driven preflight use the right one.
"""

from __future__ import annotations

import re

from imagekit import checks
from imagekit.components import Component

_TAG = re.compile(r"cuda[^:]*:(\d+\.\d+(?:\.\d+)?)")


class Cuda(Component):
    name = "cuda"
    summary = "CUDA toolkit from the base image; records its version"
    order = 0
    sources = ("base",)

    def configure(self) -> None:
        super().configure()
        if self.opts.get("version"):
            found = _TAG.search(self.stack.base.image)
            if found and not found.group(1).startswith(self.opts["version"]) \
                    and not self.opts["version"].startswith(found.group(1)):
                self.error("version", f"CUDA {self.opts['version']} does not match the base image "
                           f"{self.stack.base.image} (CUDA {found.group(1)})",
                           "drop `version:` (it is read from the base image) or change the base image")
            return
        if not _TAG.search(self.stack.base.image):
            self.error(None, f"cannot read the CUDA version from the base image {self.stack.base.image!r}",
                       'add `version: "12.4.1"` to cuda (the CUDA version inside the base image)')

    @property
    def version(self) -> str:
        return self.opts.get("version") or _TAG.search(self.stack.base.image).group(1)

    @property
    def major_minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @property
    def major(self) -> str:
        return self.version.split(".")[0]

    def labels(self) -> dict[str, str]:
        return {"major": self.major}

    def checks(self) -> list:
        return [
            checks.run("cuda.runtime", f"the CUDA {self.major} runtime library is installed",
                       f"ls /usr/local/cuda/lib64/libcudart.so.{self.major}*"),
            checks.run("cuda.driver", "nvidia-smi sees a GPU", "nvidia-smi -L", expect="GPU 0", needs="gpu"),
        ]
