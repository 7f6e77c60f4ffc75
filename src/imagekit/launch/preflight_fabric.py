"""Preflight's fabric checks: GPUDirect RDMA's prerequisites on the host, a host libfabric bound into an
image, and which GPU code each binary of an image carries.

Kept apart from :mod:`imagekit.launch.preflight` (which calls :func:`checks` and :func:`binary_archs`),
so each check is a pure function of recorded facts, as there.

- **GPUDirect RDMA** (fourth CUDA review, J6): a NIC reads and writes GPU memory only through
  ``nvidia_peermem`` (the proprietary and open kernel modules) or DMA-BUF, which needs NVIDIA's open
  kernel modules (Turing and later GPUs: never a V100) and Linux 5.12 or later (NVIDIA driver README,
  "kernel_open"; GPUDirect RDMA documentation). Without either, NCCL prints "GPU Direct RDMA Disabled"
  at INFO level and stages every network transfer through host memory. gdrcopy (UCX's and libfabric's
  small device copies) needs the ``gdrdrv`` module's ``/dev/gdrdrv``.
- **Host binds** (J3): a site binding HPE's libfabric over an image's ``host_bind`` prefix
  (``--mounts /opt/cray/libfabric/2.2.0:/opt/libfabric``) needs ``libfabric.so.1`` where HPE installs it
  (``lib64``) and every library it links either in the image (the label ``host_libs`` lists what the
  image carries for it) or bound too. The host's file is read (DT_NEEDED, :mod:`imagekit.util.elf`),
  never run.
- **Per-binary GPU code** (J4): each component that compiles GPU code records its own architectures
  (``archs``; nccl-tests ``gencode``); a host GPU must run every one of them, not their union. PTX is
  JIT-compiled for later GPUs only by a driver at least as new as the CUDA that wrote it (J11).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from imagekit.image_facts import ImageFacts
from imagekit.launch.finding import FAIL, OK, SKIP, WARN, Finding
from imagekit.util import elf

# DMA-BUF of CUDA memory: NVIDIA's open kernel modules on Linux 5.12 or later.
DMABUF_KERNEL = (5, 12)
# The newest CUDA each driver branch JIT-compiles PTX of (the CUDA release that shipped with it: NVIDIA's
# CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions"). A driver compiles PTX of
# its own CUDA version or older only; minor-version compatibility does not cover PTX.
DRIVER_CUDA = ((580, "13.0"), (575, "12.9"), (570, "12.8"), (560, "12.6"), (555, "12.5"), (550, "12.4"),
               (545, "12.3"), (535, "12.2"), (530, "12.1"), (525, "12.0"))
# Libraries any glibc-based image has: a bound library may link them without the image listing them.
BASE_LIBS = frozenset({"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libresolv.so.2",
                       "libutil.so.1", "libgcc_s.so.1", "libstdc++.so.6", "ld-linux-x86-64.so.2",
                       "ld-linux-aarch64.so.1"})
# The label a component writes when it carries GPU code: "archs" (nccl-tests: "gencode").
ARCH_FACTS = ("archs", "gencode")


@dataclass
class GpuDirectFacts:
    """What GPUDirect RDMA needs from the host; ``probe()`` reads the real one (``root``: for tests)."""

    peermem: bool = False            # /sys/module/nvidia_peermem: the module is loaded
    open_modules: bool = False       # /proc/driver/nvidia/version names the Open Kernel Module
    kernel: tuple[int, int] | None = None
    gdrdrv: bool = False             # /dev/gdrdrv exists (gdrcopy's kernel module)

    @classmethod
    def probe(cls, root: Path = Path("/")) -> "GpuDirectFacts":
        version = root / "proc/driver/nvidia/version"
        text = version.read_text(errors="replace") if version.is_file() else ""
        release = (root / "proc/sys/kernel/osrelease")
        kernel = release.read_text().strip() if release.is_file() else os.uname().release
        m = re.match(r"(\d+)\.(\d+)", kernel)
        return cls(peermem=(root / "sys/module/nvidia_peermem").is_dir(), open_modules="Open Kernel Module" in text,
                   kernel=(int(m.group(1)), int(m.group(2))) if m else None,
                   gdrdrv=(root / "dev/gdrdrv").exists())

    @property
    def dmabuf(self) -> bool:
        return self.open_modules and self.kernel is not None and self.kernel >= DMABUF_KERNEL


def check_gpudirect(img: ImageFacts, driver: str | None, facts: GpuDirectFacts) -> Finding:
    """nvidia_peermem or DMA-BUF, for an image that moves GPU memory over a network (RDMA, a net plugin,
    libfabric) on a host with an NVIDIA driver."""
    name = "GPUDirect RDMA"
    if not img.known or not img.has_role("rdma", "nccl-net-plugin", "libfabric"):
        return Finding(name, SKIP, "the image has no RDMA network stack" if img.known else "image unknown")
    if not driver:
        return Finding(name, SKIP, "no NVIDIA driver on this host")
    if facts.peermem:
        return Finding(name, OK, "nvidia_peermem is loaded: the NICs reach GPU memory")
    if facts.dmabuf:
        kernel = ".".join(map(str, facts.kernel or ()))
        return Finding(name, OK, f"DMA-BUF: NVIDIA's open kernel modules on Linux {kernel}")
    why = ("the proprietary kernel modules (DMA-BUF needs the open ones)" if not facts.open_modules else
           f"Linux {'.'.join(map(str, facts.kernel or ()))} (DMA-BUF needs {'.'.join(map(str, DMABUF_KERNEL))}+)")
    return Finding(name, WARN, f"neither nvidia_peermem nor DMA-BUF ({why}): NCCL and MPI stage every network "
                   "transfer through host memory, about half the bus bandwidth",
                   "modprobe nvidia_peermem (V100 and proprietary modules: the only way), or run NVIDIA's open "
                   f"kernel modules on Linux {'.'.join(map(str, DMABUF_KERNEL))}+ (Turing and later GPUs)")


def check_gdrdrv(img: ImageFacts, driver: str | None, facts: GpuDirectFacts) -> Finding:
    """/dev/gdrdrv, for an image carrying gdrcopy."""
    name = "gdrcopy (gdrdrv)"
    if not img.known or not img.has_role("gdrcopy"):
        return Finding(name, SKIP, "the image has no gdrcopy" if img.known else "image unknown")
    if not driver:
        return Finding(name, SKIP, "no NVIDIA driver on this host")
    if facts.gdrdrv:
        return Finding(name, OK, "/dev/gdrdrv is there")
    return Finding(name, WARN, "no /dev/gdrdrv: UCX, libfabric and NCCL copy small messages to and from GPU "
                   "memory with cudaMemcpy instead of gdrcopy, several microseconds more each",
                   "load gdrcopy's gdrdrv module (gdrcopy's insmod.sh, or the gdrdrv-dkms package)")


def check_host_bind(img: ImageFacts, mounts: list[tuple[str, str]]) -> list[Finding]:
    """Each mount over an image's host-bind prefix holds libfabric.so.1 in HPE's layout, with every
    library it links in the image, in the bound tree, or bound too."""
    target = img.fact("libfabric", "host_bind") if img.known else None
    if not target:
        return []
    name = "host libfabric bind"
    libdir = img.fact("libfabric", "libdir") or f"{target}/lib64"
    binds = [(src, dst) for src, dst in mounts if dst.rstrip("/") == target.rstrip("/")]
    if not binds:
        return [Finding(name, OK, f"nothing bound over {target}: the image's own libfabric (cxi built in) is used")]
    out = []
    for src, _dst in binds:
        tried = [Path(src) / sub / "libfabric.so.1" for sub in ("lib64", "lib")]
        found = next((p for p in tried if p.exists()), None)
        if found is None:
            out.append(Finding(name, FAIL, f"{src} has no libfabric.so.1: looked for "
                               + " and ".join(str(p) for p in tried),
                               f"bind the libfabric install prefix (the directory holding lib64/), e.g. "
                               f"/opt/cray/libfabric/<version>:{target}"))
            continue
        where = f"{target}/{found.parent.name}"
        if where != libdir:
            out.append(Finding(name, WARN, f"{src} keeps libfabric.so.1 in {found.parent.name}/ and the image's "
                               f"loader cache names {libdir}: it loads only where the runtime runs ldconfig at start "
                               "(the NVIDIA container toolkit, Enroot's GPU hook)",
                               f"bind a tree with lib64/ (HPE's layout), or the {found.parent.name} directory over "
                               f"{libdir}"))
        out.append(_needed(name, found, img, mounts))
    return out


def _needed(name: str, library: Path, img: ImageFacts, mounts: list[tuple[str, str]]) -> Finding:
    try:
        wanted = elf.needed(library)
    except (OSError, elf.NotElf) as exc:
        return Finding(name, FAIL, f"cannot read {library}: {exc}", "bind a libfabric shared library")
    carried = set(filter(None, (img.fact("libfabric", "host_libs") or "").split(",")))
    bound = {Path(dst).name for _src, dst in mounts} | {p.name for p in library.parent.glob("*.so*")}
    missing = [n for n in wanted if n not in carried | bound | BASE_LIBS]
    if missing:
        return Finding(name, FAIL, f"{library} links {', '.join(missing)}, which neither the image nor the binds "
                       f"carry (the image carries {', '.join(sorted(carried)) or 'none of its own'})",
                       "bind each from the host too, e.g. --mounts /usr/lib64/" + missing[0] + ":"
                       + (img.fact("libcxi", "libdir") or "/opt/cxi/lib64") + "/" + missing[0])
    return Finding(name, OK, f"{library} and the {len(wanted)} libraries it links resolve in the image")


def driver_cuda(driver: str | None) -> str | None:
    """The newest CUDA whose PTX ``driver`` JIT-compiles, or None when unknown."""
    m = re.match(r"(\d+)", driver or "")
    if not m:
        return None
    branch = int(m.group(1))
    return next((cuda for first, cuda in DRIVER_CUDA if branch >= first), None)


def binary_archs(img: ImageFacts) -> dict[str, list[str]]:
    """The GPU architectures each component's binaries were compiled for (its own label), cuda's union
    label only when no component records its own (images built before the per-binary labels)."""
    out = {}
    for comp in img.components.values():
        if comp.name == "cuda":
            continue
        for key in ARCH_FACTS:
            archs = [a for a in (comp.fact(key) or "").split(",") if a]
            if archs:
                out[comp.name] = archs
                break
    if not out:
        union = [a for a in (img.fact("cuda", "archs") or "").split(",") if a] if img.known else []
        if union:
            out["cuda"] = union
    return out


def checks(img: ImageFacts, driver: str | None, mounts: list[tuple[str, str]],
           facts: GpuDirectFacts | None) -> list[Finding]:
    """The fabric checks that apply to ``img`` on this host: GPUDirect RDMA's when ``facts`` were probed
    (a host with a driver), the host binds' when the image has a host-bind prefix. A check that does not
    apply is left out rather than listed as not checked."""
    found = [check_gpudirect(img, driver, facts), check_gdrdrv(img, driver, facts)] if facts is not None else []
    return [f for f in found if f.status != SKIP] + check_host_bind(img, mounts)
