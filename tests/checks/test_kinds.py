"""The check kinds: the label's JSON both ways (today's and the format older images carry),
validation, and values that reach a shell only as data.

``verify`` runs here against the test machine itself (testinfra's ``local://`` backend): a hostile
value, if it ever ran as code, would create the canary file the tests then look for. The engine
tests (tests/checks/test_runner.py, tests/components/) run the same kinds in containers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import testinfra
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.hostile import CANARY_VAR, words
from helpers.needs import need
from imagekit import checks
from imagekit.util.errors import UsageError

EVERY_KIND = [
    checks.run("a.run", "d", "true", expect="x"),
    checks.Run(id="a.run_all", describe="d", command="grep -c x /etc/passwd", expect=r"\d", exit_code=1,
               excluded="^0$", needs="fabric", target="devel"),
    checks.file("a.file", "/x y/it's $(x)"),
    checks.absent("a.absent", "/y* /root/.ssh/id_[a-z]*", "d"),
    checks.library("a.library", "libz.so.1", needs="gpu"),
    checks.python_import("a.python_import", "torch.distributed"),
    checks.ldd_closure("a.ldd_closure", ["/usr/local/ucx", "/opt/x"], target="devel"),
    checks.login_env("a.login_env", [0, 65534]),
]

# The library-closure check exactly as images built before the ldd_closure kind carry it in their
# io.imagekit.checks label (compact JSON): a run check with the script inlined.
OLD_LDD_CLOSURE = (
    r"""{"id":"image.ldd_closure","describe":"every ELF file under /usr/lib/x86_64-linux-gnu/pmix2, """
    r"""/usr/lib/x86_64-linux-gnu/openmpi, /usr/local/nccl resolves its libraries (libcuda.so.1 and """
    r"""libnvidia-ml.so.1 come from the host's driver)","kind":"run","run":"find """
    r"""/usr/lib/x86_64-linux-gnu/pmix2 /usr/lib/x86_64-linux-gnu/openmpi /usr/local/nccl -type f """
    r"""2>/dev/null | { n=0; bad=0; while IFS= read -r f; do [ \"$(od -An -N4 -tx1 \"$f\" | tr -d ' """
    r"""')\" = 7f454c46 ] || continue; n=$((n+1)); m=$(ldd \"$f\" 2>/dev/null | grep \"=> not """
    r"""found\" | grep -v -E \"^[[:space:]]*(libcuda[.]so[.]1|libnvidia-ml[.]so[.]1) \"); [ -z """
    r"""\"$m\" ] || { bad=1; echo \"$f:\"; echo \"$m\"; }; done; echo \"checked $n ELF files\"; [ """
    r"""\"$bad\" -eq 0 ]; }","expect":"checked [1-9]\\d* ELF files"}"""
)
OLD_LDD_PREFIXES = ["/usr/lib/x86_64-linux-gnu/pmix2", "/usr/lib/x86_64-linux-gnu/openmpi", "/usr/local/nccl"]


class RecordingHost:
    """Stands in for testinfra's host: records each ``run(template, *arguments)``, answers ``rc`` and ``stdout``."""

    def __init__(self, rc: int = 0, stdout: str = "") -> None:
        self.calls: list[tuple] = []
        self.rc, self.stdout = rc, stdout

    def run(self, command: str, *args: str) -> SimpleNamespace:
        self.calls.append((command, *args))
        return SimpleNamespace(rc=self.rc, stdout=self.stdout, stderr="")


@pytest.fixture
def local(tmp_path, monkeypatch):
    """The test machine as testinfra's host, with the canary a hostile value would create."""
    monkeypatch.setenv(CANARY_VAR, str(tmp_path / "canary"))
    return testinfra.get_host("local://")


# -- the label's JSON -----------------------------------------------------------------------------

def test_every_kind_is_covered_here():
    assert {c.kind for c in EVERY_KIND} == set(checks.KINDS)
    assert checks.KINDS == ("run", "file", "absent", "library", "python_import", "ldd_closure", "login_env")


@pytest.mark.parametrize("check", EVERY_KIND, ids=[c.id for c in EVERY_KIND])
def test_every_kind_round_trips_through_the_label(check):
    spec = json.loads(json.dumps(check.as_dict()))
    assert spec["kind"] == check.kind and spec[check.kind] == getattr(check, check.kind)
    assert checks.from_dict(spec) == check
    assert checks.from_dict(spec).as_dict() == check.as_dict()


def test_the_factories_return_the_kinds_and_write_todays_json():
    assert type(checks.run("x.r", "d", "true")) is checks.Run
    assert type(checks.ldd_closure("x.l", ["/opt"])) is checks.LddClosure
    # The keys and their order as images carry them.
    assert list(checks.run("x.r", "d", "true", expect="y", needs="gpu").as_dict()) == [
        "id", "describe", "kind", "run", "expect", "needs"]
    assert checks.library("x.l", "libz.so.1").as_dict() == {
        "id": "x.l", "describe": "libz.so.1 resolves through the dynamic loader cache", "kind": "library",
        "library": "libz.so.1"}
    assert checks.absent("x.a", "/a /b*", "none").as_dict()["absent"] == "/a /b*"
    assert checks.python_import("x.p", "json").describe == "python3 imports json"
    assert checks.file("x.f", "/etc").describe == "/etc exists"


def test_a_label_from_before_the_ldd_closure_kind_still_reads_as_the_run_check_it_was():
    spec = json.loads(OLD_LDD_CLOSURE)
    old = checks.from_dict(spec)
    assert type(old) is checks.Run and old.as_dict() == spec
    # The kind that replaced it says the same sentence; its script has since grown `ldd -r`.
    new = checks.ldd_closure("image.ldd_closure", OLD_LDD_PREFIXES)
    assert new.describe == spec["describe"]
    script, _ = new.command()
    assert "ldd -r" in script and "ldd -r" not in spec["run"]


def test_a_label_from_before_the_ldd_closure_kind_is_checked_like_then():
    old = checks.from_dict(json.loads(OLD_LDD_CLOSURE))
    old.verify(RecordingHost(stdout="checked 12 ELF files\n"))
    with pytest.raises(AssertionError, match="does not match"):
        old.verify(RecordingHost(stdout="checked 0 ELF files\n"))


@pytest.mark.parametrize("spec, fragments", [
    ({"id": "x.y", "kind": "shell", "shell": "true"}, ["check x.y (kind shell): unknown kind", "known kinds: run"]),
    ({"id": "x.y", "run": "true"}, ["check x.y: has no kind"]),
    ({"id": "x.y", "kind": "file"}, ["check x.y (kind file): has no 'file' value"]),
    ({"id": "x.y", "kind": "run", "run": "true", "timeout": 5}, ["check x.y (kind run): unknown keys 'timeout'"]),
    ({"id": "x.y", "kind": "run", "run": "true", "expect": "(("},
     ["check x.y (kind run): expect '((' is not a valid regex"]),
    ({"id": "x.y", "kind": "run", "run": "true", "exit_code": "1"}, ["exit_code '1' is not an exit status"]),
    ({"id": "x.y", "kind": "file", "file": 7}, ["check x.y (kind file): path must be a string, not int"]),
    ({"id": "x.y", "kind": "file", "file": "/x", "needs": "gpus"}, ["needs 'gpus' is not one of gpu, fabric"]),
    ({"kind": "file", "file": "/x"}, ["a check (kind file): has no id"]),
    ({"id": "x\n\x1b[31m", "kind": "nope", "nope": 1}, ["check 'x\\n\\x1b[31m' (kind nope)"]),
    (["not", "a", "check"], ["a check: is list, not a mapping"]),
])
def test_a_label_check_no_kind_reads_is_refused_naming_it(spec, fragments):
    with pytest.raises(UsageError) as info:
        checks.from_dict(spec)
    assert isinstance(info.value, checks.InvalidCheck)
    for fragment in fragments:
        assert fragment in str(info.value)
    assert "\x1b" not in str(info.value) and "\n" not in str(info.value).split("\n  fix:")[0]


# -- hostile values ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, value", [
    ("python_import", "os; import sys"),
    ("python_import", "os\nimport sys"),
    ("python_import", "__import__('os').system('touch /x')"),
    ("absent", "/tmp/$(touch /x)"),
    ("absent", "/tmp/x;touch /x"),
    ("absent", "/tmp/`touch /x`"),
    ("absent", "/tmp/{a,b}"),
    ("absent", "/tmp/x  /y"),
    ("absent", "tmp/relative"),
    ("library", "lib z.so.1"),
    ("library", "libz.so.1; touch /x"),
    ("ldd_closure", "/opt/$(touch /x)"),
    ("ldd_closure", "/opt/x;y"),
    ("ldd_closure", "/opt/*"),
    ("ldd_closure", "opt"),
    ("file", "/x\x00y"),
])
def test_values_a_kind_cannot_check_safely_are_refused(kind, value):
    with pytest.raises(checks.InvalidCheck, match=rf"^check a\.b \(kind {kind}\): "):
        checks.from_dict({"id": "a.b", "kind": kind, kind: value})


def test_a_file_path_is_data_quotes_and_expansions_included(local, tmp_path):
    odd = tmp_path / "it's $(touch $IK_CANARY) `x` \"q\""
    with pytest.raises(AssertionError, match="does not exist"):
        checks.file("a.missing", str(odd)).verify(local)
    odd.write_text("")
    checks.file("a.present", str(odd)).verify(local)
    assert not (tmp_path / "canary").exists()


def test_a_module_name_reaches_python_as_an_argument_not_as_source(local):
    host = RecordingHost()
    checks.python_import("a.p", "torch.distributed").verify(host)
    ((template, *arguments),) = host.calls
    assert "torch" not in template and arguments[-1] == "torch.distributed"
    if shutil.which("python3"):
        checks.python_import("a.json", "json").verify(local)
        with pytest.raises(AssertionError, match="python3 cannot import no_such_module"):
            checks.python_import("a.none", "no_such_module").verify(local)


def test_ldd_closure_prefixes_are_arguments(tmp_path, local):
    host = RecordingHost(stdout="checked 3 ELF files\n")
    checks.ldd_closure("a.l", ["/opt/a", "/opt/b"]).verify(host)
    ((template, *arguments),) = host.calls
    assert "/opt/a" not in template and arguments[2:] == ["/opt/a", "/opt/b"]
    assert template.replace("%%", "").count("%s") == len(arguments)


def test_ldd_closure_fails_when_it_checks_no_elf_file_and_passes_on_a_real_one(tmp_path, local):
    need(None if shutil.which("ldd") and shutil.which("od") else "ldd and od (libc-bin, coreutils)")
    (tmp_path / "empty").mkdir()
    with pytest.raises(AssertionError, match="no ELF file under"):
        checks.ldd_closure("a.l", [str(tmp_path / "empty")]).verify(local)
    (tmp_path / "bin").mkdir()
    shutil.copy(shutil.which("true") or "/bin/true", tmp_path / "bin" / "true")
    checks.ldd_closure("a.l", [str(tmp_path / "bin"), str(tmp_path / "empty")]).verify(local)


def test_ldd_closure_names_the_missing_library_and_excepts_the_drivers(tmp_path):
    missing = "/opt/x/lib/libucp_plugin.so:\n\tlibucp.so.0 => not found\nchecked 4 ELF files"
    with pytest.raises(AssertionError, match="(?s)ELF files under /opt/x miss libraries:.*libucp.so.0 => not found"):
        checks.ldd_closure("a.l", ["/opt/x"]).verify(RecordingHost(rc=1, stdout=missing))
    script, arguments = checks.ldd_closure("a.l", ["/opt/x"]).command()
    assert arguments[0] == "^[[:space:]]*(libcuda[.]so[.]1|libnvidia-ml[.]so[.]1) "


@pytest.fixture
def gcc() -> None:
    """These tests compile small libraries: CI has gcc (scripts/setup-test.sh installs it)."""
    need(None if shutil.which("gcc") else "gcc (scripts/setup-test.sh installs it)")


def _cc(tmp_path, name: str, source: str, *args: str) -> Path:
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    out = tmp_path / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *args], check=True)
    return out


def test_ldd_closure_catches_an_undefined_symbol_and_lets_a_plugin_take_its_hosts(tmp_path, local, gcc):
    """`ldd -r`: a library that names a symbol no loaded library defines (built against a newer
    sibling than the image has) fails; a plugin whose symbols come from a library the prefix's own
    programs load (as Open MPI's mca_*.so take libmpi's) passes."""
    lib = tmp_path / "prefix" / "lib"
    (lib / "plugins").mkdir(parents=True)
    host_lib = _cc(tmp_path, "libhost.so.1", "int host_api(void) { return 1; }\n", "-Wl,-soname,libhost.so.1")
    shutil.copy(host_lib, lib / "libhost.so.1")
    # A program in the prefix that links the host library, as ompi_info links libmpi.
    main = tmp_path / "main.c"
    main.write_text("int host_api(void); int main(void) { return host_api() - 1; }\n")
    (tmp_path / "prefix" / "bin").mkdir()
    subprocess.run(["gcc", "-o", str(tmp_path / "prefix" / "bin" / "tool"), str(main), f"-L{lib}", "-l:libhost.so.1",
                    f"-Wl,-rpath,{lib}"], check=True)
    plugin = _cc(tmp_path, "mca_plugin.so", "int host_api(void); int plugin(void) { return host_api(); }\n")
    shutil.copy(plugin, lib / "plugins" / "mca_plugin.so")
    check = checks.ldd_closure("a.l", [str(tmp_path / "prefix")])
    check.verify(local)
    broken = _cc(tmp_path, "libnewer.so.2", "int only_in_newer(void); int f(void) { return only_in_newer(); }\n")
    shutil.copy(broken, lib / "libnewer.so.2")
    with pytest.raises(AssertionError, match="(?s)libnewer.so.2:.*undefined symbol: only_in_newer"):
        check.verify(local)


def test_ldd_closure_lets_ucx_perftest_modules_take_the_perftest_drivers_symbols(tmp_path, local, gcc):
    """UCX 1.20's perftest modules (lib/ucx/libucx_perftest_cuda.so) take ucx_perf_* from the ucx_perftest
    executable that dlopens them, which no preloaded library can supply; the same symbol missing from
    any other file still fails."""
    lib = tmp_path / "ucx" / "lib"
    modules = lib / "ucx"
    modules.mkdir(parents=True)
    source = "extern int ucx_perf_mem_type_allocators[]; int f(void) { return ucx_perf_mem_type_allocators[0]; }\n"
    shutil.copy(_cc(tmp_path, "libucx_perftest_cuda.so.0", source), modules / "libucx_perftest_cuda.so.0")
    # Beside it, a transport module that takes its symbols from libucs (which ucx_info links), as
    # libuct_cuda does: it passes only if the retry preloads libucs and not the perftest module, which
    # would stop the retry's own shell.
    shutil.copy(_cc(tmp_path, "libucs.so.0", "int ucs_api(void) { return 0; }\n", "-Wl,-soname,libucs.so.0"),
                lib / "libucs.so.0")
    (tmp_path / "main.c").write_text("int ucs_api(void); int main(void) { return ucs_api(); }\n")
    (tmp_path / "ucx" / "bin").mkdir()
    subprocess.run(["gcc", "-o", str(tmp_path / "ucx" / "bin" / "ucx_info"), str(tmp_path / "main.c"), f"-L{lib}",
                    "-l:libucs.so.0", f"-Wl,-rpath,{lib}"], check=True)
    shutil.copy(_cc(tmp_path, "libuct_cuda.so.0", "int ucs_api(void); int g(void) { return ucs_api(); }\n"),
                modules / "libuct_cuda.so.0")
    check = checks.ldd_closure("u.l", [str(tmp_path / "ucx")])
    check.verify(local)
    shutil.copy(_cc(tmp_path, "libuct_other.so.0", source), modules / "libuct_other.so.0")
    with pytest.raises(AssertionError, match="(?s)libuct_other.so.0:.*undefined symbol: ucx_perf_mem_type_allocators"):
        check.verify(local)


def test_absent_globs_glob_and_find_what_is_there(tmp_path, local):
    check = checks.absent("a.n", f"{tmp_path}/*.key {tmp_path}/id_[a-z]*", "no keys")
    check.verify(local)
    (tmp_path / "host.key").write_text("")
    with pytest.raises(AssertionError, match="host.key"):
        check.verify(local)


def test_run_exit_code_and_excluded(local):
    checks.Run(id="a.r", command="echo fine; exit 3", exit_code=3, excluded="error").verify(local)
    with pytest.raises(AssertionError, match="exited 0, not 3"):
        checks.Run(id="a.r", command="true", exit_code=3).verify(local)
    with pytest.raises(AssertionError, match="matches /error/, which it must not"):
        checks.Run(id="a.r", command="echo an error", excluded="error").verify(local)
    with pytest.raises(AssertionError, match="exited 1"):
        checks.run("a.r", "d", "false").verify(local)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["file", "absent", "library", "python_import"]), value=words)
def test_hostile_values_are_refused_or_run_no_code(local, tmp_path, kind, value):
    """Any text as a file, absent, library or python_import value: refused by its kind, or verified
    without the canary appearing (a verdict either way; only the canary matters)."""
    try:
        check = checks.from_dict({"id": "h.x", "kind": kind, kind: value})
    except checks.InvalidCheck:
        return
    # Globs like /*/*/*/* are safe but would walk the whole machine: those only show their command.
    host = RecordingHost() if kind == "absent" and value.count("*") > 2 else local
    try:
        check.verify(host)
    except AssertionError:
        pass
    assert not os.path.exists(os.environ[CANARY_VAR])
    if host is not local:
        assert host.calls[0][0].startswith(f"for f in {value}; do ")


@settings(max_examples=150, deadline=None)
@given(value=words)
def test_hostile_ldd_closure_prefixes_are_refused_or_passed_as_arguments(value):
    """Not run here: a valid prefix such as "/" would search the whole machine."""
    try:
        check = checks.from_dict({"id": "h.x", "kind": "ldd_closure", "ldd_closure": value})
    except checks.InvalidCheck:
        return
    host = RecordingHost(stdout="checked 1 ELF files")
    check.verify(host)
    ((template, *arguments),) = host.calls
    # The two regexes (driver libraries, host-provided symbols) come first, then the prefixes.
    assert arguments[2:] == value.split(" ")
    assert template == checks.ldd_closure("h.y", ["/a"] * len(arguments[2:])).command()[0]


def test_ldd_closure_never_preloads_a_library_that_leaves_symbols_to_its_host(tmp_path, local, gcc):
    """torch's libtorch_python.so takes the Python C API from the interpreter, and other torch libraries
    link it: preloaded into the retry's own shell it stops the shell (debian-pytorch's check failed so,
    naming a plugin that was fine). It is checked, and let through for its Py* symbols, but never preloaded."""
    lib = tmp_path / "torch" / "lib"
    lib.mkdir(parents=True)
    shutil.copy(_cc(tmp_path, "libpy.so", "extern int PyInstanceMethod_Type; int py(void) { return PyInstanceMethod_Type; }\n",
                    "-Wl,-soname,libpy.so"), lib / "libpy.so")
    shutil.copy(_cc(tmp_path, "libcore.so", "int core(void) { return 0; }\n", "-Wl,-soname,libcore.so"), lib / "libcore.so")
    # A library that links both, as libtorch_cuda links libtorch_python's neighbours.
    shutil.copy(_cc(tmp_path, "libuser.so", "int py(void); int core(void); int u(void) { return py() + core(); }\n",
                    f"-L{lib}", "-l:libpy.so", "-l:libcore.so", f"-Wl,-rpath,{lib}"), lib / "libuser.so")
    # A plugin that needs libcore's symbol without naming it: retried with the libraries preloaded.
    shutil.copy(_cc(tmp_path, "plugin.so", "int core(void); int p(void) { return core(); }\n"), lib / "plugin.so")
    checks.ldd_closure("t.l", [str(tmp_path / "torch")]).verify(local)
