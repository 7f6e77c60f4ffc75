"""The binfmt_misc check before an emulated build (unit, against binfmt_misc directories made by the
test in the kernel's format), and this machine's own registration (CI installs it)."""

import os
from pathlib import Path

import pytest

from imagekit.util import emulation, platforms

ENTRY = ("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: {flags}\noffset 0\n"
         "magic 7f454c460201010000000000000000000200b700\n")


@pytest.fixture(autouse=True)
def x86_host(monkeypatch):
    monkeypatch.setattr(platforms, "host_machine", lambda: "x86_64")


def _binfmt(tmp_path, *, mounted=True, entry: str | None = ENTRY.format(flags="PF")):
    if mounted:
        (tmp_path / "status").write_text("enabled\n")
    if entry is not None:
        (tmp_path / "qemu-aarch64").write_text(entry)
    return tmp_path


def test_the_native_architecture_needs_nothing(tmp_path):
    assert emulation.problem("x86_64", tmp_path) is None


def test_a_registered_interpreter_with_the_fix_binary_flag_is_enough(tmp_path):
    assert emulation.problem("arm64", _binfmt(tmp_path)) is None


@pytest.mark.parametrize("kwargs, said", [
    ({"mounted": False, "entry": None}, "binfmt_misc is not mounted"),
    ({"entry": None}, "no qemu-aarch64 interpreter is registered"),
    ({"entry": ENTRY.format(flags="PF").replace("enabled", "disabled", 1)}, "interpreter in .* is disabled"),
    ({"entry": ENTRY.format(flags="P")}, "lacks the F \\(fix binary\\) flag"),
])
def test_what_is_missing_is_named_with_the_fix(tmp_path, kwargs, said):
    root = _binfmt(tmp_path, **kwargs)
    with pytest.raises(emulation.NoEmulation, match=said) as err:
        emulation.require("aarch64", "building debian-mpi for linux/arm64", root)
    assert str(err.value).startswith("building debian-mpi for linux/arm64 runs arm64 programs on this x86_64 "
                                     "machine, but ")
    assert "qemu-user-static" in err.value.hint


def test_this_machine_runs_arm64_programs():
    """scripts/setup-emulation.sh registers qemu-aarch64 (CI runs it): the arm64 tests need it."""
    if os.uname().machine != "x86_64":
        pytest.skip("an x86_64 machine's check")
    assert emulation.problem("aarch64") is None, "run scripts/setup-emulation.sh"


# An arm64 /proc/cpuinfo, in the format of Linux's arch/arm64/kernel/cpuinfo.c (one block per CPU;
# the values are a Neoverse V2's, Grace's core).
ARM64_CPUINFO = ("processor\t: 0\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 "
                 "atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve\n"
                 "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd4f\n"
                 "CPU revision\t: 0\n\n")


def test_an_arm64_program_that_sees_an_arm64_cpu_needs_no_note():
    assert emulation.hidden_cpu("arm64", ARM64_CPUINFO) is None
    assert emulation.hidden_cpu("x86_64", "anything") is None     # only arm64's is known to matter


def test_an_arm64_program_that_sees_the_x86_host_cpu_is_named_with_the_fix():
    """What QEMU before 8.2 hands an arm64 program is the host's own file: this machine's, when it is
    x86 (measured under Debian 12's QEMU 7.2; QEMU 10 emulates an arm64 one)."""
    host = Path("/proc/cpuinfo").read_text()
    if "vendor_id" not in host:
        pytest.skip("an x86 machine's /proc/cpuinfo is the case")
    said = emulation.hidden_cpu("aarch64", host)
    assert said is not None and "/proc/cpuinfo" in said and "import torch" in said
    assert "8.2" in emulation.OLD_QEMU_FIX and "setup-emulation.sh" in emulation.OLD_QEMU_FIX


def test_the_arm64_cpuinfo_given_in_its_place_is_one_the_check_accepts_with_a_block_per_cpu():
    text = emulation.arm64_cpuinfo(3)
    assert emulation.hidden_cpu("aarch64", text) is None
    assert text.count("CPU implementer\t: 0x41") == 3 and "processor\t: 2\n" in text
    assert emulation.arm64_cpuinfo(0).count("processor") == 1
