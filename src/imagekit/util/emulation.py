"""Whether this machine can run another architecture's programs (binfmt_misc + QEMU user mode).

Building or bootstrapping an arm64 image on an x86 machine runs the image's own programs (apt's
maintainer scripts, a RUN step, a check) through ``qemu-aarch64``: the kernel hands arm64 ELF
files to the interpreter registered in ``/proc/sys/fs/binfmt_misc``. Debian's
``qemu-user-static`` registers it with the ``F`` (fix binary) flag, so the interpreter is opened
once at registration and works inside containers whose root filesystem has no QEMU.

This is checked before a build or bootstrap starts, so that a missing registration is one error
naming its fix rather than "exec format error" several minutes into a build.
"""

from __future__ import annotations

from pathlib import Path

from imagekit.util import platforms
from imagekit.util.errors import ImagekitError

BINFMT = Path("/proc/sys/fs/binfmt_misc")
# binfmt_misc entry names Debian's qemu-user-static registers, per architecture (stack spelling).
ENTRIES = {"aarch64": "qemu-aarch64", "x86_64": "qemu-x86_64"}
FIX = ("apt-get install qemu-user-static binfmt-support (scripts/setup-emulation.sh does it); where "
       f"{BINFMT} is empty, mount it first: mount -t binfmt_misc binfmt_misc {BINFMT} and run "
       "update-binfmts --enable")


class NoEmulation(ImagekitError):
    """Another architecture's programs cannot run here."""

    exit_code = 3


def problem(arch: str, root: Path = BINFMT) -> str | None:
    """None when programs of ``arch`` run here (natively, or through a registered, enabled QEMU
    interpreter with the fix-binary flag); else what is missing."""
    arch = platforms.stack_name(arch)
    if not emulated(arch):
        return None
    name = ENTRIES.get(arch)
    if name is None:
        return f"imagekit knows no QEMU interpreter for {arch}"
    entry = root / name
    if not (root / "status").exists():
        return f"binfmt_misc is not mounted at {root}"
    try:
        text = entry.read_text()
    except OSError:
        return f"no {name} interpreter is registered in {root}"
    lines = text.splitlines()
    if not lines or lines[0].strip() != "enabled":
        return f"the {name} interpreter in {root} is disabled"
    flags = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("flags:")), "")
    if "F" not in flags:
        # Without F the kernel opens the interpreter by its path inside the container, which an
        # image's root filesystem does not have.
        return f"the {name} interpreter in {root} lacks the F (fix binary) flag that containers need"
    return None


def emulated(arch: str) -> bool:
    """Whether programs of ``arch`` run here through an emulator rather than natively."""
    return platforms.stack_name(arch) != platforms.stack_name(platforms.host_machine())


def require(arch: str, what: str, root: Path = BINFMT) -> None:
    """Raise :class:`NoEmulation` naming ``what`` needs it and the fix, unless ``arch`` runs here."""
    found = problem(arch, root)
    if found is not None:
        raise NoEmulation(f"{what} runs {platforms.oci_name(arch)} programs on this "
                          f"{platforms.host_machine()} machine, but {found}", FIX)


# What an arm64 /proc/cpuinfo always has, one per CPU (Linux's arch/arm64/kernel/cpuinfo.c).
_ARM64_CPUINFO_KEY = "CPU implementer"
OLD_QEMU_FIX = ("QEMU 8.2 or later makes up an arm64 /proc/cpuinfo itself (then register it again: "
                "scripts/setup-emulation.sh); see docs/multi-arch.md for the QEMU 10.0 that breaks Open MPI's TCP")


# The CPU a check container is told it runs on where the emulator hides it: an Arm Neoverse N1
# (implementer 0x41, part 0xd0c), whose features QEMU's default ``max`` CPU all runs, so a program
# that picks its code paths from this file picks ones the emulator has.
_N1_FEATURES = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs"


def arm64_cpuinfo(cpus: int) -> str:
    """An arm64 ``/proc/cpuinfo`` of ``cpus`` Neoverse N1 cores, in the format of Linux's
    arch/arm64/kernel/cpuinfo.c: what QEMU 8.2+ makes up for its arm64 programs itself."""
    block = ("processor\t: {n}\nBogoMIPS\t: 50.00\nFeatures\t: " + _N1_FEATURES + "\n"
             "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\n"
             "CPU revision\t: 1\n\n")
    return "".join(block.format(n=n) for n in range(max(cpus, 1)))


def hidden_cpu(arch: str, cpuinfo: str) -> str | None:
    """None when an emulated ``arch`` program's ``/proc/cpuinfo`` (``cpuinfo``, as read inside its
    container) describes that architecture's CPU; else what is wrong with it.

    QEMU user mode before 8.2 does not emulate that file for arm64 programs: they read the host's
    x86 one. Programs that pick their code paths from it can crash there: PyTorch's aarch64 wheel
    dies with SIGSEGV in ``import torch`` under Debian 12's QEMU 7.2, and imports under QEMU 10."""
    if platforms.stack_name(arch) != "aarch64" or _ARM64_CPUINFO_KEY in cpuinfo:
        return None
    return (f"its programs read this {platforms.host_machine()} machine's /proc/cpuinfo, not an arm64 CPU's "
            f"(QEMU before 8.2 does not emulate that file), and programs that read it can crash: "
            f"`import torch` dies with SIGSEGV there")
