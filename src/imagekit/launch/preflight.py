"""Preflight: compare this host with what the image's labels record, before launching.

Each check returns ``ok``, ``warn``, ``fail`` or ``not checked`` with the fix.
Host facts are gathered once (``HostFacts.probe()``) and image facts come from
the labels ``imagekit build`` writes, read once as :class:`image_facts.ImageFacts`,
so every check is a pure function that tests can drive with recorded facts.
Checks ask for roles ("the image's MPI", "its RDMA stack"), never for component
names. File images (``.sqsh``/``.sif``) are read through the same facts; when
their labels cannot be read, the image-side checks say "not checked" instead of
guessing. The GPU runtime check reads the image's environment the same way
(``NVIDIA_VISIBLE_DEVICES``: see :mod:`imagekit.launch.gpu_env`).
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import stat
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from imagekit import image_facts
from imagekit.util import platforms, searchpath, settings
from imagekit.engines import docker as engine
from imagekit.util.errors import EngineError, ImagekitError, UsageError
from imagekit.image_facts import ImageFacts, is_file_image, reader
from imagekit.launch import gpu_env, preflight_fabric, require_cuda, runtimes
from imagekit.launch.common import MPIRUN
from imagekit.launch.finding import FAIL, OK, SKIP, WARN, Finding
from imagekit.launch.gpu_env import GpuLaunch
from imagekit.launch.schedulers import Slurm
from imagekit.launch.starters import LauncherNeeds

SHM_MIN = 1 << 30  # NCCL and shared-memory BTLs want far more than Docker's 64 MiB default
# Minimum Linux driver per CUDA major under minor-version compatibility, for images whose labels
# predate `cuda.min_driver` (NVIDIA "CUDA Compatibility", minor-version compatibility table:
# 11.x >= 450.80.02, 12.x >= 525.60.13, 13.x >= 580.65.06; components/cuda.py MIN_DRIVER).
CUDA_MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
# The shipped stack to suggest when the host's driver is too old for an image's CUDA major:
# (stack, its CUDA major) -- the suggestion is made only when the host's driver runs that one.
OLDER_CUDA_STACK = {13: ("debian-cuda12", 12)}
PROC_DRIVER_VERSION = Path("/proc/driver/nvidia/version")
# GPU generations by compute capability major (minor for the split ones), for messages.
GPU_GENERATIONS = {(3,): "Kepler", (5,): "Maxwell", (6,): "Pascal", (7, 0): "Volta", (7, 2): "Volta",
                   (7, 5): "Turing", (8, 9): "Ada", (8,): "Ampere", (9,): "Hopper", (10,): "Blackwell",
                   (11,): "Blackwell", (12,): "Blackwell"}
# The CUDA release that stopped compiling for (and shipping libraries with code for) GPUs below a compute
# capability: CUDA 13.0 removed Maxwell, Pascal and Volta (sm_50 .. sm_72), CUDA 12.0 removed Kepler
# (sm_35/37) (CUDA 13.0 and 12.0 release notes, "Deprecated or Dropped Architectures").
CUDA_DROPPED = ((13, (7, 5), "13.0", "Maxwell, Pascal and Volta"), (12, (5, 0), "12.0", "Kepler"))
# The stack to suggest for GPUs that a newer CUDA dropped: (stack, what it carries). Named only when a
# stack of that name is on the stack search path (shipped: nccl-tests-volta; a site may hide or replace it).
OLDER_GPU_STACK = {(7, 0): ("nccl-tests-volta", "CUDA 12.9 with sm_70 code")}
# Multi-node NVLink: the IMEX daemon (nvidia-imex) exports GPU memory between the trays of one NVLink
# domain, and a container reaches it through an IMEX channel device, which libnvidia-container creates and
# injects for the channels NVIDIA_IMEX_CHANNELS names (NVIDIA IMEX guide; nvidia-container-toolkit).
IMEX_CHANNEL_DIR = Path("/dev/nvidia-caps-imex-channels")
IMEX_DAEMON = "nvidia-imex"
MNNVL_GPUS = ("GB200", "GB300")


@dataclass
class HostFacts:
    """What preflight needs to know about the host; ``probe()`` reads the real one."""

    shm_bytes: int | None = None
    memlock: int | None = None          # None = unlimited
    infiniband: bool = False
    driver: str | None = None           # NVIDIA kernel driver version, None when absent
    nvidia_container_cli: str | None = None   # its path; Enroot's GPU hook and Docker --gpus run it
    srun_mpi: list[str] | None = None   # `srun --mpi=list` entries; None when srun is missing
    mpirun_version: str | None = None   # host `mpirun --version` (Open MPI), None when missing
    srun_error: str | None = None       # why `srun --mpi=list` failed, when it did
    machine: str | None = None          # `uname -m`: x86_64, aarch64
    gpus: list[tuple[str, str]] = field(default_factory=list)   # (name, compute capability) per GPU
    imex_channels: list[int] | None = None   # /dev/nvidia-caps-imex-channels/channelN; None: no such dir
    imex_daemon: bool | None = None          # an nvidia-imex process runs here; None: not looked for
    gpudirect: preflight_fabric.GpuDirectFacts | None = None   # peermem, DMA-BUF, gdrdrv; None: not probed

    @classmethod
    def probe(cls, *, want_srun: bool = False, want_mpirun: bool = False) -> "HostFacts":
        facts = cls()
        try:
            st = os.statvfs("/dev/shm")
            facts.shm_bytes = st.f_frsize * st.f_blocks
        except OSError:
            facts.shm_bytes = None
        soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        facts.memlock = None if soft == resource.RLIM_INFINITY else soft
        facts.infiniband = Path("/dev/infiniband").is_dir()
        facts.machine = platforms.host_machine()
        facts.driver = _driver_version()
        if facts.driver:
            facts.gpus = _gpus()
            facts.imex_channels = _imex_channels()
            facts.imex_daemon = _process_running(IMEX_DAEMON)
            facts.gpudirect = preflight_fabric.GpuDirectFacts.probe()
        # Enroot's 98-nvidia.sh appends /usr/sbin:/sbin to PATH before looking for it.
        facts.nvidia_container_cli = shutil.which("nvidia-container-cli",
                                                  path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        if want_srun and shutil.which("srun"):
            facts.srun_mpi, facts.srun_error = _srun_mpi_list()
        if want_mpirun and shutil.which(MPIRUN):
            facts.mpirun_version = _mpirun_version()
        return facts


def _driver_version(proc: Path | None = None) -> str | None:
    """The NVIDIA kernel driver's version: /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX
    x86_64 Kernel Module  550.54.15 ..."), else ``nvidia-smi --query-gpu=driver_version``; None without one."""
    proc = proc or PROC_DRIVER_VERSION
    if proc.is_file():
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", proc.read_text())
        if m:
            return m.group(1)
    if shutil.which("nvidia-smi"):
        out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        if out and out.strip():
            return out.strip().splitlines()[0].strip()
    return None


def _gpus() -> list[tuple[str, str]]:
    """(name, compute capability) of each GPU nvidia-smi lists (compute_cap: R510 and later)."""
    out = _run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"]) if shutil.which(
        "nvidia-smi") else None
    gpus = []
    for line in (out or "").splitlines():
        name, _, cap = line.rpartition(",")
        if name.strip() and re.fullmatch(r"\d+\.\d+", cap.strip()):
            gpus.append((name.strip(), cap.strip()))
    return gpus


def _imex_channels(root: Path | None = None) -> list[int] | None:
    root = root or IMEX_CHANNEL_DIR
    if not root.is_dir():
        return None
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := re.fullmatch(r"channel(\d+)", p.name)))


def _process_running(name: str, proc: Path = Path("/proc")) -> bool:
    for comm in proc.glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == name:
                return True
        except OSError:
            continue
    return False


def _run(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _srun_mpi_list() -> tuple[list[str], str | None]:
    try:
        proc = subprocess.run(["srun", "--mpi=list"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], str(exc)
    if proc.returncode != 0:
        lines = proc.stdout.strip().splitlines()
        return [], lines[-1] if lines else f"exit {proc.returncode}"
    return parse_srun_mpi_list(proc.stdout), None


def parse_srun_mpi_list(text: str) -> list[str]:
    """Plugin names from ``srun --mpi=list`` (Slurm 20-24 formats: 'srun: pmix', tab lists, 'pmix_v4')."""
    names: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        line = re.sub(r"^srun:\s*", "", line)
        if not line or "types are" in line.lower():  # the header line, in every Slurm version
            continue
        if line.lower().startswith("specific pmix"):
            # Slurm 22+: "specific pmix plugin versions available: pmix_v4"
            line = line.split(":", 1)[-1]
        for token in re.split(r"[,\s]+", line):
            if re.fullmatch(r"[a-z][a-z0-9_]*", token) and token not in names:
                names.append(token)
    return names


def _mpirun_version() -> str | None:
    out = _run([MPIRUN, "--version"]) or ""
    m = re.search(r"Open MPI\)?\s+(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else None


def probe_image(ref: str) -> dict[str, str] | None:
    """Look inside an engine image without labels: MPI launcher path, Open MPI version, sshd."""
    if is_file_image(ref):
        return None
    script = ('m=$(command -v mpirun || true); echo "mpirun=$m"; '
              'if [ -n "$m" ]; then echo "mpi_version=$(mpirun --version 2>/dev/null | head -n1)"; fi; '
              'if [ -x /usr/sbin/sshd ]; then echo sshd=yes; fi')
    try:
        proc = engine.run_once(ref, ["/bin/sh", "-c", script], timeout=60)
    except (OSError, EngineError):
        return None
    if proc.returncode != 0:
        return None
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def check_mpi_probe(ref: str, found: dict[str, str] | None) -> Finding:
    if found is None:
        return Finding("image MPI", SKIP, "no component labels and the image could not be probed")
    if not found.get(MPIRUN):
        return Finding("image MPI", FAIL, f"{ref} has no MPI (no mpirun on the image's PATH)",
                     "build from a stack with an MPI component (e.g. openmpi), or pick an MPI image")
    return Finding("image MPI", OK, f"{found['mpirun']}: {found.get('mpi_version') or 'version unknown'} (probed)")


def _major(version: str | None) -> int | None:
    m = re.match(r"\D*(\d+)", version or "")
    return int(m.group(1)) if m else None


def _tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= (1 << 30) else f"{n / (1 << 20):.0f} MiB"


# --- individual checks: each is pure (facts in, Finding out) -----------------------------------

def check_labels(img: ImageFacts) -> Finding:
    if img.labels is None:
        return Finding("image labels", SKIP, f"{img.reason}; image-side checks skipped")
    if not img.known:
        return Finding("image labels", SKIP, "the image has no io.imagekit.component.* labels "
                     "(not built by imagekit); image-side checks skipped")
    return Finding("image labels", OK, f"stack {img.stack or '?'}: {', '.join(img.components)}")


def check_mpi(img: ImageFacts) -> Finding:
    if not img.known:
        return Finding("image MPI", SKIP, "no component labels")
    mpi = img.provider("mpi")
    if mpi is not None:
        return Finding("image MPI", OK, f"{mpi.name} {img.role_version('mpi') or mpi.version or '?'}")
    return Finding("image MPI", FAIL, "the image records no MPI component",
                 "build from a stack with an MPI component (e.g. openmpi) or launch without MPI")


def check_slurm_pmix(img: ImageFacts, host: HostFacts) -> Finding:
    name = "slurm pmix"
    if host.srun_mpi is None:
        return Finding(name, FAIL, "srun is not on PATH", "run on a Slurm login node, or use `imagekit launch mpirun`")
    if host.srun_error:
        return Finding(name, FAIL, f"`srun --mpi=list` failed: {host.srun_error}",
                     "check SLURM_CONF / the cluster's slurm.conf and that slurmctld answers (`sinfo`)")
    if "pmix" not in host.srun_mpi and not any(p.startswith("pmix") for p in host.srun_mpi):
        mpi = img.provider("mpi") if img.known else None
        if "pmi2" in host.srun_mpi and mpi is not None and mpi.fact("pmi2") == "true":
            return Finding(name, OK, "Slurm has no pmix plugin, and the image's MPI speaks Slurm's PMI-2: launch with "
                         "`srun --mpi=pmi2`")
        fix = "install Slurm's pmix plugin (Debian: libpmix-dev + libpmix2 before slurmd starts) or ask the admins"
        if "pmi2" in host.srun_mpi:
            # Review 3 H14: Open MPI 5 has no PMI-2; the way out is an Open MPI 4.1 image built against libpmi2.
            fix += ("; or use an image whose Open MPI 4.1 is built against Slurm's PMI-2 and launch with "
                    "`srun --mpi=pmi2`: the debian-cuda12-pmi2 stack (src/imagekit/stacks/pmi2/, "
                    "`openmpi: {version: \"4.1.8\", pmi2: true}`)")
        return Finding(name, FAIL, f"Slurm has no pmix MPI plugin (srun --mpi=list: {', '.join(host.srun_mpi) or 'nothing'})",
                     fix)
    host_majors = sorted({int(m) for p in host.srun_mpi for m in re.findall(r"pmix_v(\d+)", p)})
    if not img.known:
        return Finding(name, SKIP, f"Slurm offers {', '.join(p for p in host.srun_mpi if p.startswith('pmix'))}; "
                     "image PMIx unknown")
    img_pmix = img.role_version("pmix")
    mpi = img.provider("mpi")
    if mpi is not None and mpi.fact("pmix") == "false":
        return Finding(name, WARN, f"the image's MPI ({mpi.name}) was built without PMIx support",
                     f"rebuild with {mpi.name} pmix: true, or use `srun --mpi=pmi2`")
    mpi_version = img.role_version("mpi")
    if mpi is not None and mpi.name == "openmpi" and mpi.fact("slurm") == "false" and _major(mpi_version) == 4:
        # Open MPI 4.x recognises srun direct launch through its Slurm support only.
        return Finding(name, FAIL, f"the image's Open MPI {mpi_version} was built --without-slurm: under srun every "
                     "rank stops in MPI_Init ('OMPI was not built with SLURM support')",
                     "rebuild with openmpi `slurm: true` (the default), or start ranks with mpirun inside the job")
    if not img_pmix:
        return Finding(name, WARN, "the image records no PMIx version",
                     "add a pmix component to the stack so Slurm and the image can be matched")
    img_major = _major(img_pmix)
    if host_majors and img_major not in host_majors:
        both_modern = img_major is not None and img_major >= 3 and min(host_majors) >= 3
        return Finding(name, WARN if both_modern else FAIL,
                     f"image PMIx {img_pmix} (v{img_major}) vs Slurm pmix_v{'/v'.join(map(str, host_majors))}",
                     f"build the image with a PMIx {host_majors[-1]}.x to match Slurm "
                     "(cross-major PMIx is only supported from v3 on, and not for every feature)")
    return Finding(name, OK, f"image PMIx {img_pmix} matches Slurm's pmix plugin")


def check_shm(host: HostFacts) -> Finding:
    if host.shm_bytes is None:
        return Finding("/dev/shm", WARN, "no /dev/shm on this host",
                     "mount a tmpfs on /dev/shm (shared-memory transports and NCCL need it)")
    if host.shm_bytes < SHM_MIN:
        return Finding("/dev/shm", WARN, f"/dev/shm is {_gib(host.shm_bytes)}",
                     "enlarge it: `mount -o remount,size=16G /dev/shm`; in Docker use --ipc=host or --shm-size=16g")
    return Finding("/dev/shm", OK, _gib(host.shm_bytes))


def check_memlock(img: ImageFacts, host: HostFacts) -> Finding:
    if host.memlock is None:
        return Finding("memlock", OK, "unlimited")
    detail = f"memlock ulimit is {host.memlock // 1024} KiB"
    fix = ("`ulimit -l unlimited` (limits.conf: `* - memlock unlimited`); under Slurm make slurmd run with "
           "LimitMEMLOCK=infinity and keep MEMLOCK in PropagateResourceLimits; Docker: --ulimit memlock=-1")
    if img.has_role("rdma", "ucx"):
        return Finding("memlock", WARN, detail + "; RDMA (verbs/UCX) must pin memory", fix)
    return Finding("memlock", OK, detail + " (enough for TCP/shared memory; RDMA would need unlimited)")


def check_infiniband(img: ImageFacts, host: HostFacts) -> Finding:
    if not img.known:
        return Finding("/dev/infiniband", SKIP, "image OFED unknown"
                     + ("; this host has /dev/infiniband" if host.infiniband else ""))
    if not img.has_role("rdma"):
        return Finding("/dev/infiniband", OK, "the image has no OFED/rdma-core; TCP/shared memory only")
    if host.infiniband:
        return Finding("/dev/infiniband", OK, "present")
    return Finding("/dev/infiniband", WARN, "the image has OFED but this host has no /dev/infiniband; "
                 "UCX/verbs will fall back to TCP",
                 "run on InfiniBand/RoCE nodes (Docker: --device=/dev/infiniband --cap-add=IPC_LOCK)")


def _min_driver(img: ImageFacts, cuda: str) -> str | None:
    """The image's minimum driver: its cuda.min_driver label, else the table for its CUDA major."""
    provider = img.provider("cuda")
    label = provider.fact("min_driver") if provider is not None else None
    if label and re.fullmatch(r"\d+(\.\d+){0,2}", label):
        return label
    return CUDA_MIN_DRIVER.get(_major(cuda) or 0)


def check_driver(img: ImageFacts, host: HostFacts) -> Finding:
    if host.driver is None:
        return Finding("GPU driver", SKIP, "no NVIDIA driver on this host")
    cuda = img.role_version("cuda") if img.known else None
    if not cuda:
        return Finding("GPU driver", SKIP if not img.known else OK,
                     f"driver {host.driver}; " + ("image CUDA unknown" if not img.known else "image has no CUDA"))
    need = _min_driver(img, cuda)
    if need is None:
        return Finding("GPU driver", WARN, f"driver {host.driver}; no driver table entry for CUDA {cuda}",
                     "check NVIDIA's CUDA compatibility table")
    if not re.match(r"\d+", host.driver):
        return Finding("GPU driver", WARN, f"cannot read the host driver version {host.driver!r}",
                     "check `nvidia-smi --query-gpu=driver_version --format=csv,noheader`")
    if _tuple(host.driver) < _tuple(need):
        needs = need
        fix = f"upgrade the host driver to >= {needs} (R{_major(need)})"
        older = OLDER_CUDA_STACK.get(_major(cuda) or 0)
        if older is not None and CUDA_MIN_DRIVER.get(older[1]) \
                and _tuple(host.driver) >= _tuple(CUDA_MIN_DRIVER[older[1]]):
            fix = (f"use a CUDA {older[1]} image, which this driver runs: the {older[0]} stack "
                   f"(`imagekit build {older[0]}`), or " + fix)
        else:
            fix += " (or add NVIDIA's cuda-compat forward-compatibility package, data-center GPUs only)"
        return Finding("GPU driver", FAIL, f"the image's CUDA {cuda} needs driver >= {needs}; this host has "
                     f"{host.driver}", fix)
    return Finding("GPU driver", OK, f"driver {host.driver} runs CUDA {cuda} (needs >= {need})")


def _stack_exists(name: str, site: settings.Site | None) -> bool:
    """Is a stack of this name on the site's stack search path (--stacks-dir, $IMAGEKIT_STACKS_PATH,
    shipped)? Looked up by file name: the run side reads no stack file."""
    return name in searchpath.files([d for d in settings.site_or_env(site).stack_search_path() if d.is_dir()])


def _cc(cap: str) -> tuple[int, int]:
    major, _, minor = cap.partition(".")
    return int(major), int(minor or 0)


def gpu_generation(cap: tuple[int, int]) -> str:
    return GPU_GENERATIONS.get(cap) or GPU_GENERATIONS.get(cap[:1]) or f"compute capability {cap[0]}.{cap[1]}"


def runs_on(archs: list[str], cap: tuple[int, int]) -> bool:
    """Can code built for ``archs`` (SASS for each, PTX of the newest) run on a GPU of compute capability
    ``cap``? SASS runs on the same major at an equal or later minor; PTX is JIT-compiled for later GPUs only."""
    codes = [_cc(f"{a[:-1]}.{a[-1]}") for a in archs if a.isdigit() and len(a) >= 2]
    if not codes:
        return True
    return any(c[0] == cap[0] and c[1] <= cap[1] for c in codes) or cap >= max(codes)


def check_gpu_arch(img: ImageFacts, host: HostFacts, site: settings.Site | None = None) -> Finding:
    """The host's GPUs against the image's CUDA release and the GPU code it carries: a CUDA 13 image on a
    V100 fails at its first kernel ('no kernel image is available'), so say so before the job starts.
    The fix names an older-GPU stack where ``site``'s search path has one."""
    name = "GPU architecture"
    if not host.gpus:
        return Finding(name, SKIP, "no GPU listed by nvidia-smi on this host")
    cuda = img.role_version("cuda") if img.known else None
    if not cuda:
        return Finding(name, SKIP, "image CUDA unknown" if not img.known else "the image has no CUDA")
    major = _major(cuda) or 0
    for gpu, cap in host.gpus:
        cc = _cc(cap)
        for dropped_in, first_kept, release, generations in CUDA_DROPPED:
            if major >= dropped_in and cc < first_kept:
                older = OLDER_GPU_STACK.get(cc)
                if older and not _stack_exists(older[0], site):
                    older = None
                fix = (f"use a CUDA {dropped_in - 1} image with sm_{cc[0]}{cc[1]} code"
                       + (f": the {older[0]} stack ({older[1]}; `imagekit build {older[0]}`)" if older else ""))
                return Finding(name, FAIL, f"the image's CUDA {cuda} cannot run on {gpu} (sm_{cc[0]}{cc[1]}, "
                             f"{gpu_generation(cc)}): CUDA {release} dropped {generations} GPUs, so neither the "
                             "image's code nor its CUDA libraries have kernels for it", fix)
    # Each binary's own GPU code (J4): a union of every component's architectures would pass a V100 that
    # nccl-tests runs on and nvbandwidth does not.
    per_binary = preflight_fabric.binary_archs(img)
    ptx_cuda = preflight_fabric.driver_cuda(host.driver)
    for component, archs in per_binary.items():
        for gpu, cap in host.gpus:
            cc = _cc(cap)
            if not runs_on(archs, cc):
                return Finding(name, FAIL, f"{component} carries GPU code for sm_{', sm_'.join(archs)} and this host's "
                             f"{gpu} is sm_{cc[0]}{cc[1]} ({gpu_generation(cc)}): no kernel image for it",
                             f"rebuild with \"{cc[0]}{cc[1]}\" in {component}'s GPU architectures (cuda arch_list, "
                             "nccl-tests gencode, nvbandwidth archs)")
            sass = any(c[0] == cc[0] and c[1] <= cc[1] for c in (_cc(f"{a[:-1]}.{a[-1]}") for a in archs
                                                                 if a.isdigit() and len(a) >= 2))
            if not sass and ptx_cuda and _tuple(ptx_cuda) < _tuple(".".join(cuda.split(".")[:2])):
                # J11: PTX is compiled at start by the driver, which knows PTX up to its own CUDA version.
                return Finding(name, FAIL, f"{component} runs on {gpu} (sm_{cc[0]}{cc[1]}) only as PTX from CUDA "
                             f"{cuda}, and driver {host.driver} JIT-compiles PTX up to CUDA {ptx_cuda}",
                             f"a driver of CUDA {'.'.join(cuda.split('.')[:2])} or later, or rebuild with "
                             f"\"{cc[0]}{cc[1]}\" SASS")
    archs = sorted({a for arch_list in per_binary.values() for a in arch_list}, key=lambda a: int(a) if a.isdigit() else 0)
    gpus = sorted({f"{g} (sm_{_cc(c)[0]}{_cc(c)[1]})" for g, c in host.gpus})
    return Finding(name, OK, f"CUDA {cuda}" + (f", code for sm_{', sm_'.join(archs)}" if archs else "")
                 + f" runs on {', '.join(gpus)}")


def check_imex(img: ImageFacts, host: HostFacts, launch: GpuLaunch | None = None) -> Finding:
    """Multi-node NVLink (GB200/GB300 NVL72): the IMEX daemon on the host and a channel for the container.

    Judged when the host has NVL72 GPUs or the job asks for multi-node NVLink (NCCL_MNNVL_ENABLE=1, or
    NVIDIA_IMEX_CHANNELS set by the launch or the image)."""
    name = "IMEX (multi-node NVLink)"
    launch = launch or GpuLaunch()
    env = {**(img.env or {}), **launch.env}
    channels = env.get("NVIDIA_IMEX_CHANNELS")
    mnnvl = env.get("NCCL_MNNVL_ENABLE") == "1"
    nvl = sorted({g for g, _ in host.gpus if any(k in g for k in MNNVL_GPUS)})
    if not nvl and not mnnvl and not channels:
        return Finding(name, OK, "not needed: no GB200/GB300 GPUs here and the job asks for no multi-node NVLink")
    bad = FAIL if (launch.here or mnnvl) else WARN
    elsewhere = "" if launch.here else " (checked on this host; the job's nodes must have them too)"
    where = f"{', '.join(nvl)} here" if nvl else "the job asks for multi-node NVLink"
    if host.imex_daemon is False:
        return Finding(name, bad, f"{where}, and no {IMEX_DAEMON} daemon runs: GPUs in other trays cannot import "
                     f"this tray's memory{elsewhere}",
                     f"start the IMEX service on every node of the NVLink domain (`systemctl start {IMEX_DAEMON}`; "
                     "/etc/nvidia-imex/nodes_config.cfg lists the domain's node addresses)")
    if host.imex_channels is not None and not host.imex_channels:
        return Finding(name, bad, f"{where}, and {IMEX_CHANNEL_DIR} has no channel device{elsewhere}",
                     "create channel 0 (driver parameter NVreg_CreateImexChannel0=1, or `mknod` with the major of "
                     "nvidia-caps-imex-channels in /proc/devices)")
    if not channels:
        return Finding(name, WARN if nvl else OK, f"{where}, but the containers get no IMEX channel "
                     "(NVIDIA_IMEX_CHANNELS unset): NCCL falls back to InfiniBand between trays",
                     "launch with `--profile nvl72` (NVIDIA_IMEX_CHANNELS=0, NCCL_MNNVL_ENABLE=1)")
    wanted = [c for c in re.split(r"[,\s]+", channels) if c.isdigit()]
    have = host.imex_channels or []
    missing = [c for c in wanted if host.imex_channels is not None and int(c) not in have]
    if missing:
        return Finding(name, bad, f"NVIDIA_IMEX_CHANNELS={channels}, and this host has no channel "
                     f"{', '.join(missing)} (it has: {', '.join(map(str, have)) or 'none'}){elsewhere}",
                     f"ask for a channel the host has (NVIDIA_IMEX_CHANNELS={have[0] if have else 0})")
    daemon = f", {IMEX_DAEMON} running" if host.imex_daemon else ""
    return Finding(name, OK, f"NVIDIA_IMEX_CHANNELS={channels}"
                 + (f", channel device(s) {', '.join(map(str, have))}" if have else "")
                 + (", MNNVL required (NCCL_MNNVL_ENABLE=1)" if mnnvl else "") + daemon)


def check_gpu_runtime(img: ImageFacts, host: HostFacts, launch: GpuLaunch | None = None) -> Finding:
    """Will the containers start here? An image asking for GPUs (``NVIDIA_VISIBLE_DEVICES``) makes
    Enroot/Pyxis run nvidia-container-cli before the container starts, and that fails on a host
    without it or without a driver; Docker and Apptainer inject GPUs only when asked (--gpus/--nv).
    A failure is certain only where the containers start on this host (``launch.here``); elsewhere
    (a Slurm login node) the nodes that run them may have what this host lacks, hence a warning."""
    name = "GPU runtime"
    launch = launch or GpuLaunch()
    # Not named: a .sif means Apptainer; a squashfs goes to Enroot or Pyxis, an engine image to Docker or
    # Pyxis, and the fix names each.
    rt = launch.runtime if launch.runtime is not None else runtimes.implied_by(img.ref)
    bad = FAIL if launch.here else WARN
    elsewhere = "" if launch.here else "; fine if the nodes that run it have GPUs (this may be a login node)"
    missing = [what for what, have in (("nvidia-container-cli", host.nvidia_container_cli),
                                       ("NVIDIA driver", host.driver)) if not have]
    lacks = "this host has " + " and ".join(f"no {m}" for m in missing) if missing else None
    # Runtimes that inject GPUs only when asked (--nv, --gpus) judge themselves.
    own = rt.gpu_verdict(launch.gpus, host.driver, lacks) if rt is not None else None
    if own is not None:
        return (Finding(name, OK, own.detail) if own.fine else
                Finding(name, bad, own.detail + elsewhere, own.fix))
    if lacks is None:
        return Finding(name, OK, f"{host.nvidia_container_cli} and driver {host.driver}")
    # Enroot, Pyxis, or not known (an engine image may go to either Docker or Pyxis).
    if gpu_env.VAR in launch.env:  # the launcher's value wins over the image's, as in Enroot's hook
        value, source = launch.env[gpu_env.VAR], "the launch sets"
    elif img.env is not None:
        value, source = img.env.get(gpu_env.VAR), "the image sets"
    else:
        return Finding(name, SKIP, f"the image's environment was not read ({img.reason or 'it records none'}); "
                     f"{lacks}, so an image that sets {gpu_env.VAR} would not start here under Enroot/Pyxis")
    if not gpu_env.asks_for_gpus(value):
        said = f"{source} {gpu_env.VAR}={value}" if value else f"the image does not set {gpu_env.VAR}"
        return Finding(name, OK, f"{said}: no GPU runtime needed ({lacks})")
    stops = ("'Command not found: nvidia-container-cli'" if host.nvidia_container_cli is None
             else "nvidia-container-cli's driver error")
    none = " (driver libraries without devices)" if value == "none" else ""
    return Finding(name, bad, f"{source} {gpu_env.VAR}={value}{none} and {lacks}: Enroot's 98-nvidia.sh hook "
                 f"(Pyxis too) stops the start with {stops}{elsewhere}",
                 runtimes.gpu_fixes(rt, launch.fix))


def image_arch(img: ImageFacts) -> str | None:
    """The image's architecture in the stack's spelling: the engine's config, else the arch label."""
    found = img.config_arch or img.arch
    return platforms.stack_name(found) if found else None


def check_arch(img: ImageFacts, host: HostFacts, here: bool = True, sibling: str | None = None) -> Finding:
    """The image's architecture against this host's. Containers that start here (``here``) must
    match, or every rank dies with "exec format error"; on a login node launching elsewhere the
    compute nodes decide, so a difference is a warning naming what they must be."""
    arch, machine = image_arch(img), platforms.stack_name(host.machine) if host.machine else None
    if arch is None or machine is None:
        return Finding("architecture", SKIP, "the image's architecture is unknown" if machine else
                     "this host's architecture is unknown")
    if arch == machine:
        return Finding("architecture", OK, f"{platforms.of_arch(arch)} image on this {machine} host")
    detail = f"the image is {platforms.of_arch(arch)} ({arch}) and this host is {platforms.of_arch(machine)} ({machine})"
    if not here:
        return Finding("architecture", WARN, detail + f": the compute nodes must be {arch}",
                     f"run it on {arch} nodes (a {arch} partition), or push both platforms under one reference "
                     "(imagekit push IMAGE --platform linux/amd64,linux/arm64 --to REF) and launch that")
    fix = (f"use --image {sibling}, its {platforms.of_arch(machine)} build" if sibling else
           f"build it for this host (imagekit build STACK --platform {platforms.of_arch(machine)}), or run it on "
           f"{arch} hosts")
    return Finding("architecture", FAIL, detail + ": its programs would fail with \"exec format error\"", fix)


def host_build(image: str, machine: str | None) -> str | None:
    """The local tag of ``image``'s build for ``machine`` (imagekit/x:latest <-> imagekit/x:latest-arm64),
    when the engine has it: what to launch here instead."""
    if not machine or is_file_image(image) or "#" in image or "://" in image:
        return None
    stem = image
    for arch in platforms.ARCHES:
        suffix = platforms.tag_suffix(arch)
        if suffix and stem.endswith(suffix):
            stem = stem[:-len(suffix)]
    other = platforms.local_tag(stem, platforms.stack_name(machine))
    if other == image:
        return None
    try:
        return other if engine.image_exists(other) else None
    except EngineError:
        return None


def check_sshd(img: ImageFacts) -> Finding:
    if not img.known:
        return Finding("image sshd", SKIP, "no component labels; the launcher checks /usr/sbin/sshd when workers start")
    if img.has_role("sshd"):
        return Finding("image sshd", OK, f"{img.provider('sshd').name} component present")
    return Finding("image sshd", FAIL, "inside-out needs sshd in the image and none is recorded",
                 "add the sshd component to the stack, or use an outside-in launcher (slurm / mpirun)")


def check_ssh_keys(key_dir: Path) -> Finding:
    key_dir = Path(key_dir)
    if not key_dir.is_dir():
        return Finding("ssh keys", FAIL, f"{key_dir} does not exist", "let the launcher create the job's keys")
    problems = []
    if stat.S_IMODE(key_dir.stat().st_mode) & 0o077:
        problems.append(f"{key_dir} is {oct(stat.S_IMODE(key_dir.stat().st_mode))}")
    for key in sorted(key_dir.iterdir()):
        private = key.name.startswith("id_") or key.name.endswith("_key")
        if key.is_file() and private and not key.name.endswith(".pub"):
            mode = stat.S_IMODE(key.stat().st_mode)
            if mode & 0o077:
                problems.append(f"{key.name} is {oct(mode)}")
    if problems:
        return Finding("ssh keys", FAIL, "private keys readable by others: " + "; ".join(problems),
                     f"chmod 700 {key_dir} && chmod 600 {key_dir}/id_* {key_dir}/*_key (ssh refuses such keys)")
    return Finding("ssh keys", OK, f"{key_dir} private (0700/0600)")


def check_host_mpirun(img: ImageFacts, host: HostFacts) -> Finding:
    if host.mpirun_version is None:
        return Finding("host mpirun", FAIL, "no Open MPI `mpirun` on this host",
                     "install the same Open MPI the image has (Debian: apt-get install openmpi-bin)")
    img_v = img.role_version("mpi") if img.known else None
    if not img_v:
        return Finding("host mpirun", SKIP if not img.known else WARN,
                     f"host Open MPI {host.mpirun_version}; image Open MPI unknown")
    h, i = _tuple(host.mpirun_version)[:2], _tuple(img_v)[:2]
    if h[0] != i[0]:
        return Finding("host mpirun", FAIL, f"host Open MPI {host.mpirun_version} vs image {img_v}: "
                     "ORTE/PRRTE wire protocols differ across majors",
                     f"install Open MPI {img_v} on the hosts, or use inside-out")
    if h != i:
        return Finding("host mpirun", WARN, f"host Open MPI {host.mpirun_version} vs image {img_v}",
                     f"use the same {i[0]}.{i[1]}.x on the hosts")
    return Finding("host mpirun", OK, f"host and image Open MPI {img_v}")


# --- the whole run ------------------------------------------------------------------------

@dataclass(frozen=True)
class PreflightPlan:
    """How the image is to be launched, as far as preflight's checks depend on it."""

    slurm: bool = False                # the job is submitted from here: the host's srun and its PMIx plugin
    needs: LauncherNeeds = LauncherNeeds()   # what the rank starter declares
    ssh_key_dir: Path | None = None    # inside-out: the job's keys
    probe: bool = False                # run one short container of an unlabelled engine image to find its MPI
    gpu: GpuLaunch | None = None       # how the containers start: runtime, GPUs, environment, on this host?
    site: settings.Site | None = None  # whose stacks a fix may name (None: the environment's)
    mounts: tuple[tuple[str, str], ...] = ()  # (host path, container path) binds: a host libfabric is checked


def plan_for(scheduler: str | None, needs: LauncherNeeds | None, ssh_key_dir: Path | None, *,
             site: settings.Site | None = None, mounts: tuple[tuple[str, str], ...] = ()) -> PreflightPlan:
    """``imagekit preflight``'s plan: ``scheduler`` (None, or Slurm's name: its PMIx plugin is checked),
    what a launcher ``needs`` (None: preflight alone) and the job's binds (a host libfabric is checked)."""
    if scheduler not in (None, Slurm.name):
        raise UsageError(f"unknown scheduler {scheduler!r}", f"use --scheduler {Slurm.name}, or leave it out")
    needs = needs or LauncherNeeds()
    return PreflightPlan(slurm=scheduler is not None, needs=needs, ssh_key_dir=ssh_key_dir,
                         gpu=GpuLaunch(fix=needs.gpu_fix), site=site, mounts=mounts)


def run(image: str, plan: PreflightPlan = PreflightPlan(), *, host: HostFacts | None = None,
        labels: dict[str, str] | None = None, facts: ImageFacts | None = None) -> list[Finding]:
    """All checks that apply to ``image`` launched as ``plan`` says.

    The image's facts are read here unless the caller already has them (``facts``, or raw ``labels``);
    ``host`` is probed unless given.
    """
    needs, gpu = plan.needs, plan.gpu
    if facts is not None:
        img = facts
    elif labels is not None:
        img = image_facts.from_labels(labels, ref=image)
    else:
        img = reader.read_or_reason(image)
    if host is None:
        host = HostFacts.probe(want_srun=plan.slurm, want_mpirun=needs.host_mpirun)
    checks = [check_labels(img), check_mpi(img)]
    if plan.probe and not img.known and labels is None and not is_file_image(image):
        found = probe_image(image)
        checks[1] = check_mpi_probe(image, found)
        if found and found.get("mpi_version") and "Open MPI" in found["mpi_version"]:
            m = re.search(r"(\d+\.\d+\.\d+)", found["mpi_version"])
            if m:  # lets the host-mpirun check compare versions for unlabelled images
                img = image_facts.probed_mpi(img, "openmpi", m.group(1))
    if plan.slurm:
        checks.append(check_slurm_pmix(img, host))
    if needs.host_mpirun:
        checks.append(check_host_mpirun(img, host))
    here = gpu.here if gpu is not None else needs.here
    arch = check_arch(img, host, here)
    if arch.status == FAIL:
        arch = check_arch(img, host, here, host_build(image, host.machine))
    checks += [arch, check_shm(host), check_memlock(img, host), check_infiniband(img, host),
               check_driver(img, host), check_gpu_arch(img, host, plan.site), check_imex(img, host, gpu),
               check_gpu_runtime(img, host, gpu)]
    # GPUDirect RDMA's prerequisites and host library binds (launch/preflight_fabric.py).
    checks += preflight_fabric.checks(img, host.driver, list(plan.mounts), host.gpudirect)
    required = require_cuda.check(img, host.driver)     # what the GPU runtime itself will say (J9)
    if required.status != SKIP:
        checks.append(required)
    if needs.sshd:
        checks.append(check_sshd(img))
        if plan.ssh_key_dir is not None:
            checks.append(check_ssh_keys(plan.ssh_key_dir))
    return checks


def failed(checks: list[Finding]) -> list[Finding]:
    return [c for c in checks if c.status == FAIL]


def format_checks(checks: list[Finding]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status.upper():>11}  {c.name:<{width}}  {c.detail}")
        if c.fix and c.status in (WARN, FAIL):
            lines.append(f"{'':>11}  {'':<{width}}  fix: {c.fix}")
    return "\n".join(lines)


def as_json(checks: list[Finding]) -> list[dict]:
    return [asdict(c) for c in checks]


def enforce(image: str, plan: PreflightPlan = PreflightPlan(), *, log: Callable[[str], None],
            host: HostFacts | None = None, labels: dict[str, str] | None = None,
            facts: ImageFacts | None = None) -> list[Finding]:
    """Run preflight for a launcher: print warnings, refuse on failures (``--no-preflight`` skips)."""
    checks = run(image, plan, host=host, labels=labels, facts=facts)
    for c in checks:
        if c.status in (WARN, FAIL):
            log(f"preflight {c.status}: {c.name}: {c.detail}" + (f" (fix: {c.fix})" if c.fix else ""))
    bad = failed(checks)
    if bad:
        first = bad[0]
        raise ImagekitError(f"preflight refused: {first.name}: {first.detail}",
                            (first.fix or "") + " — or pass --no-preflight to launch anyway")
    return checks
