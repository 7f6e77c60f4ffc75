"""The binfmt_misc check before an emulated build (unit, against binfmt_misc directories made by the
test in the kernel's format), and this machine's own registration (CI installs it)."""

import os

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
