"""PyTorch wheels matched to the base image's CUDA, installed into the python venv."""

from __future__ import annotations

import re

from imagekit import checks, quoting
from imagekit.components import Component, Requires, _blocks
from imagekit.components.python import VENV, check_requirements
from imagekit.schema import Option

# PyTorch version -> the CUDA builds published for it (rules.py refuses others).
CUDA_BUILDS = {
    "2.4.1": ("cu118", "cu121", "cu124"),
    "2.5.1": ("cu118", "cu121", "cu124"),
    "2.6.0": ("cu118", "cu124", "cu126"),
    "2.7.1": ("cu118", "cu126", "cu128"),
    "2.8.0": ("cu126", "cu128", "cu129"),
    "2.9.1": ("cu126", "cu128", "cu130"),
}
DEFAULT_INDEX = "https://download.pytorch.org/whl/{cuda}"
# The nvidia-nccl-cu12 version each PyTorch release requires (`pip install --dry-run --report`):
# torch loads it from site-packages through its RUNPATH, ahead of any system NCCL.
TORCH_NCCL = {"2.5.1": "2.21.5"}


class Pytorch(Component):
    name = "pytorch"
    summary = "PyTorch (pip), CUDA-matched to the base image"
    order = 90
    provides = ("pytorch",)
    requires = (Requires("python-env"), Requires("cuda", why="imagekit builds CUDA-matched PyTorch"))
    sources = ("pypi",)
    options = {
        "index_url": Option(str, DEFAULT_INDEX, "wheel index; {cuda} becomes e.g. cu124",
                            pattern=r"(https?|file)://[^\s'\"\\$`;&|<>()]+",
                            pattern_help="an http(s):// or file:// URL (no spaces, quotes or shell characters)"),
        "extras": Option(list, [], 'companion packages, e.g. ["torchvision==0.20.1"]', item_type=str),
    }

    def configure(self) -> None:
        super().configure()
        check_requirements(self, "extras")

    def check_stack(self) -> None:
        if self.stack.base.arch != "x86_64":
            self.error("version", f"imagekit knows PyTorch's CUDA builds for x86_64 only; PyPI's aarch64 torch "
                       f"{self.version} wheel is CPU-only (its nvidia-* requirements are x86_64-only)",
                       "build the pytorch stack for `arch: x86_64`")
        cuda = self.stack.provider("cuda")
        builds = CUDA_BUILDS.get(self.version)
        if builds is None:
            self.error("version", f"no CUDA build table for PyTorch {self.version}",
                       "known versions: " + ", ".join(CUDA_BUILDS))
        if self.cuda_tag not in builds:
            self.error("version", f"PyTorch {self.version} has no build for CUDA {cuda.version} ({self.cuda_tag})",
                       f"PyTorch {self.version} is built for: {', '.join(builds)}; change the base image "
                       "or the PyTorch version")

    @property
    def cuda_tag(self) -> str:
        return "cu" + "".join(self.stack.provider("cuda").major_minor.split("."))

    def devel(self) -> list:
        index = self.opts["index_url"].replace("{cuda}", self.cuda_tag)
        pkgs = " ".join(quoting.sh_arg(p) for p in [f"torch=={self.version}", *self.opts["extras"]])
        return _blocks.pip_run([f"{VENV}/bin/python -m pip install --index-url {quoting.sh_arg(index)} {pkgs}"],
                               f"PyTorch {self.version} ({self.cuda_tag})")

    def labels(self) -> dict[str, str]:
        return {"cuda": self.cuda_tag, **({"nccl": TORCH_NCCL[self.version]} if self.version in TORCH_NCCL else {})}

    def checks(self) -> list:
        return [
            checks.run("pytorch.version", f"python imports torch {self.version}",
                       "python3 -c 'import torch; print(torch.__version__)'",
                       expect=rf"{re.escape(self.version)}\+{self.cuda_tag}"),
            checks.run("pytorch.nccl", "torch.distributed has NCCL",
                       "python3 -c 'import torch.distributed as d; print(d.is_nccl_available())'", expect="True"),
            *([checks.run("pytorch.nccl_version", f"torch loads NCCL {TORCH_NCCL[self.version]} (its wheel's)",
                          "python3 -c 'import torch; print(\".\".join(map(str, torch.cuda.nccl.version())))'",
                          expect=rf"^{re.escape(TORCH_NCCL[self.version])}$")] if self.version in TORCH_NCCL else []),
            checks.run("pytorch.cuda", "torch sees a GPU",
                       "python3 -c 'import torch; assert torch.cuda.is_available()'", needs="gpu"),
        ]
