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
        if wanted and nccl.source == "pypi" and wanted.split(".")[0] != cuda.major:
            nccl.error("cuda", f"the nvidia-nccl-cu{wanted.split('.')[0]} wheel is for CUDA {wanted.split('.')[0]}, "
                       f"and this stack's CUDA is {cuda.version}",
                       f"drop `cuda:` from nccl (the wheel follows the cuda component: nvidia-nccl-cu{cuda.major})")
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


def _cuda_aware_mpi_needs_cuda_ucx(stack) -> None:
    """CUDA-aware MPI over pml ucx moves GPU buffers through UCX: a UCX without CUDA cannot."""
    mpi, ucx = stack.get("openmpi"), stack.get("ucx")
    if mpi is not None and ucx is not None and mpi.enabled("cuda") and mpi.enabled("ucx") \
            and not ucx.enabled("cuda"):
        ucx.error("cuda", "`openmpi.cuda: true` over pml ucx needs a CUDA-enabled UCX",
                  "set `cuda: true` on ucx (source: upstream), or `cuda: false` on openmpi")


def _nccl_repo_needs_cuda_image(stack) -> None:
    """NCCL's repo packages come from the CUDA apt repo that nvidia/cuda images configure."""
    nccl, cuda = stack.get("nccl"), stack.get("cuda")
    if nccl is not None and nccl.source == "repo" and cuda is not None and cuda.source != "base":
        nccl.error("source", f"`source: repo` needs an nvidia/cuda base (its CUDA apt repo); this stack's "
                   f"CUDA comes from {cuda.source}", "use `source: pypi` for nccl (the wheel for CUDA "
                   f"{cuda.major})")


def _horovod_pytorch(stack) -> None:
    """Horovod 0.28.1 (the last release) compiles as C++14; PyTorch >= 2.1 headers need C++17
    (horovod#3996, #4014; the fix 3a31d933 is in no release)."""
    hvd, torch = stack.get("horovod"), stack.get("pytorch")
    if hvd is None or torch is None:
        return
    def major_minor(v: str) -> tuple[int, int]:
        parts = [int(x) for x in v.split(".")[:2] if x.isdigit()]
        return (parts + [0, 0])[0], (parts + [0, 0])[1]
    if major_minor(torch.version) >= (2, 1) and major_minor(hvd.version) <= (0, 28):
        hvd.error("version", f"Horovod {hvd.version} does not compile against PyTorch {torch.version}: it "
                  "builds as C++14 and PyTorch >= 2.1 needs C++17 (horovod#3996); no Horovod release has the fix",
                  "drop horovod and use torch.distributed, or use PyTorch 2.0.x with Horovod 0.28.1")


def _pytorch_arch(stack) -> None:
    torch = stack.get("pytorch")
    if torch is not None and stack.base.arch != "x86_64":
        torch.error("version", f"imagekit knows PyTorch's CUDA builds for x86_64 only; PyPI's aarch64 torch "
                    f"{torch.version} wheel is CPU-only (its nvidia-* requirements are x86_64-only)",
                    "build the pytorch stack for `arch: x86_64`")


CHECKS: list[Callable] = [_same_source_mpi_stack, _nccl_cuda_from_base, _pytorch_cuda, _arch_repos,
                          _cuda_aware_mpi_needs_cuda_ucx, _nccl_repo_needs_cuda_image, _horovod_pytorch,
                          _pytorch_arch]


def enforce(stack, raw_components=None) -> None:
    """Raise StackError for the first rule the stack breaks."""
    for rule in NEEDS:
        rule.check(stack)
    for check in CHECKS:
        check(stack)


__all__ = ["Needs", "NEEDS", "CHECKS", "enforce", "StackError"]
