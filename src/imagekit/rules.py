"""Compatibility rules: refuse bad combinations before any build.

Rules are data. ``Needs`` covers "option X of A needs component B"; the few
rules that compare versions are small functions listed in ``CHECKS``. Each
failure names the file, line and key, and says what to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from imagekit.errors import StackError


@dataclass(frozen=True)
class Needs:
    component: str
    needs: tuple[str, ...]          # any one of these satisfies the rule
    option: str | None = None       # only when this option is true
    why: str = ""

    def check(self, stack) -> None:
        comp = stack.get(self.component)
        if comp is None or (self.option and not comp.enabled(self.option)):
            return
        if any(stack.has(n) for n in self.needs):
            return
        key = self.option
        what = f"`{self.component}.{self.option}: true`" if self.option else f"`{self.component}`"
        alternatives = " or ".join(f"`{n}`" for n in self.needs)
        fix = f"add {alternatives} to components"
        if self.option:
            fix += f", or set `{self.option}: false` on {self.component}"
        comp.error(key, f"{what} needs the {alternatives} component" + (f" ({self.why})" if self.why else ""), fix)


NEEDS = [
    Needs("openmpi", ("pmix",), option="pmix", why="an external PMIx matching the site's Slurm"),
    Needs("openmpi", ("ucx",), option="ucx"),
    Needs("openmpi", ("cuda",), option="cuda"),
    Needs("ucx", ("gdrcopy",), option="gdrcopy"),
    Needs("ucx", ("cuda",), option="cuda"),
    Needs("ucx", ("ofed",), option="ofed"),
    Needs("gdrcopy", ("cuda",)),
    Needs("nccl-tests", ("nccl",)),
    Needs("nccl-tests", ("cuda",), why="nccl-tests is CUDA code"),
    Needs("nccl-tests", ("openmpi",), option="mpi", why="built with MPI=1"),
    Needs("pytorch", ("python",)),
    Needs("pytorch", ("cuda",), why="imagekit builds CUDA-matched PyTorch"),
    Needs("horovod", ("pytorch",)),
    Needs("horovod", ("openmpi",)),
    Needs("horovod", ("nccl",)),
]


def _same_source_mpi_stack(stack) -> None:
    """Debian's OpenMPI links Debian's UCX and PMIx: an upstream UCX/PMIx would sit unused."""
    mpi = stack.get("openmpi")
    if mpi is None or mpi.source != "distro":
        return
    for name in ("ucx", "pmix"):
        dep = stack.get(name)
        if dep is not None and dep.source == "upstream" and mpi.enabled(name):
            dep.error("source", f"`source: upstream` {name} is not used by `source: distro` openmpi "
                      f"(the distro's OpenMPI links the distro's {name})",
                      f"use `source: distro` for {name}, or `source: upstream` for openmpi")


def _nccl_cuda_from_base(stack) -> None:
    nccl, cuda = stack.get("nccl"), stack.get("cuda")
    if nccl is None:
        return
    wanted = nccl.opts.get("cuda")
    if cuda is not None:
        if wanted and not cuda.version.startswith(wanted):
            nccl.error("cuda", f"NCCL's CUDA suffix {wanted!r} does not match the base image's CUDA "
                       f"{cuda.version}", "drop `cuda:` from nccl: it is derived from the base image")
    elif nccl.source != "pypi" or not wanted:
        nccl.error("source", "NCCL needs a CUDA version and this stack has no cuda component",
                   "add `cuda: {}` (version read from the base image), or use "
                   '`source: pypi` with `cuda: "12"` for the CUDA-major wheel')


def _pytorch_cuda(stack) -> None:
    torch, cuda = stack.get("pytorch"), stack.get("cuda")
    if torch is None or cuda is None:
        return
    from imagekit.components.pytorch import CUDA_BUILDS

    builds = CUDA_BUILDS.get(torch.version)
    if builds is None:
        torch.error("version", f"no CUDA build table for PyTorch {torch.version}",
                    "known versions: " + ", ".join(CUDA_BUILDS))
    tag = "cu" + "".join(cuda.version.split(".")[:2])
    if tag not in builds:
        torch.error("version", f"PyTorch {torch.version} has no build for CUDA {cuda.version} ({tag})",
                    f"PyTorch {torch.version} is built for: {', '.join(builds)}; change the base image "
                    "or the PyTorch version")


def _arch_repos(stack) -> None:
    ofed = stack.get("ofed")
    if ofed is not None and ofed.opts.get("flavor") == "mlnx" and stack.base.arch == "aarch64" \
            and stack.base.distro.startswith("ubuntu24"):
        ofed.error("flavor", "MLNX OFED has no ubuntu24 aarch64 build", "use `flavor: doca`")


CHECKS: list[Callable] = [_same_source_mpi_stack, _nccl_cuda_from_base, _pytorch_cuda, _arch_repos]


def enforce(stack, raw_components=None) -> None:
    """Raise StackError for the first rule the stack breaks."""
    for rule in NEEDS:
        rule.check(stack)
    for check in CHECKS:
        check(stack)


__all__ = ["Needs", "NEEDS", "CHECKS", "enforce", "StackError"]
