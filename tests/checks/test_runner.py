"""`imagekit check` against real containers: green on the offline image, red on broken copies.

Each broken copy is the real image with one thing removed or added (``docker
commit`` keeps its labels, so the checks travel with it); every check kind
(run, file, absent, library, python_import, ldd_closure, login_env) is shown catching a breakage.
"""

import json
import os
import shlex
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from helpers.arch_images import make
from helpers.broken_images import committed_copy
from helpers.needs import need
from imagekit import checks, engines, stack
from imagekit.engines import docker as engine
from imagekit.checks import runner
from imagekit.util import emulation
from imagekit.cli import main

pytestmark = pytest.mark.engine


def test_offline_image_passes_every_check_that_can_run_here(mpi_image):
    report = runner.run(mpi_image, runner.checks_from_image(mpi_image))
    assert report.failed == [], [(o.id, o.detail) for o in report.failed]
    statuses = {o.id: o.status for o in report.outcomes}
    assert statuses["openmpi.pml_ucx"] == "passed"
    assert statuses["openmpi.pmix_external"] == "passed"
    assert statuses["nccl.lib"] == "passed"
    assert statuses["stack.mpi4py-ring"] == "passed"
    # Hardware checks are reported as not run, never as passed.
    assert statuses["ofed.devices"] == "not-run"
    assert statuses["ucx.verbs"] == "not-run"


BREAKAGES = {
    "no-mpirun": ("rm -f /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/orterun /usr/bin/mpirun.openmpi",
                  {"openmpi.version", "openmpi.runs", "stack.mpi4py-ring"}),
    "no-nccl": ("rm -f /usr/local/nccl/lib/libnccl.so* && ldconfig", {"nccl.lib", "nccl.version"}),
    "no-pml-ucx": ("rm -f /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_pml_ucx.so", {"openmpi.pml_ucx"}),
    "stale-nccl-cache": ("rm -f /usr/local/nccl/lib/libnccl.so.2", {"nccl.lib"}),
    "host-key-baked": ("ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key",
                       {"sshd.no_host_keys", "image.no_ssh_private_keys"}),
    "user-key-baked": ("mkdir -p /root/.ssh && ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519",
                       {"sshd.no_user_keys", "image.no_ssh_private_keys"}),
    "no-sshd": ("rm -f /usr/sbin/sshd", {"sshd.binary"}),
    "no-mpi4py": ("rm -rf /usr/lib/python3/dist-packages/mpi4py", {"python.mpi4py", "stack.mpi4py-ring"}),
    "secret-left": ("mkdir -p /root/.docker && echo '{\"auths\":{}}' > /root/.docker/config.json",
                    {"image.no_build_secrets"}),
    # Open MPI's UCX components (under the closure's prefix /usr/lib/x86_64-linux-gnu/openmpi) link it.
    "no-libucp": ("rm -f /usr/lib/x86_64-linux-gnu/libucp.so.0* && ldconfig", {"image.ldd_closure", "ucx.libucp"}),
    # Debian's /etc/profile then resets PATH in Enroot's login shell (a user's loses /usr/sbin).
    "no-login-env-script": ("rm -f /etc/profile.d/00-imagekit-environment.sh", {"image.login_env"}),
    "no-mpi-ring": ("rm -f /usr/local/bin/imagekit-mpi-ring", {"openmpi.ring"}),
    "no-ib-tools": ("rm -f /usr/bin/ib_write_bw", {"ofed.tools"}),
    "no-ibstat": ("rm -f /usr/sbin/ibstat", {"ofed.diags"}),
}


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_checks_catch_a_broken_image(mpi_image, name):
    script, expected = BREAKAGES[name]
    broken = committed_copy(mpi_image, f"imagekit-test/broken:{name}", script)
    try:
        report = runner.run(broken, runner.checks_from_image(broken))
        failed = {o.id for o in report.failed}
        assert expected <= failed, f"expected {expected} to fail, failed: {failed}"
        assert not report.ok
        assert all(o.detail for o in report.failed), "a failure must show what went wrong"
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", broken], capture_output=True)


def test_cli_check_names_component_and_output_and_writes_junit(mpi_image, tmp_path):
    broken = committed_copy(mpi_image, "imagekit-test/broken:cli", "rm -f /usr/bin/ucx_info")
    try:
        junit = tmp_path / "checks.xml"
        result = CliRunner().invoke(main, ["check", broken, "--junit", str(junit)])
        assert result.exit_code == 1
        assert "FAIL     ucx.version" in result.output
        assert "ucx_info -v" in result.output and "exited" in result.output
        assert "<testsuite" in junit.read_text() and "ucx.version" in junit.read_text()
        as_json = CliRunner().invoke(main, ["check", broken, "--json"])
        data = json.loads(as_json.stdout)   # stderr says how far the checks are
        assert data["ok"] is False and data["counts"]["failed"] >= 1
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", broken], capture_output=True)


def test_stack_file_checks_run_against_a_named_image(mpi_image, base_image, tmp_path):
    """`imagekit check STACK --image TAG`: the stack's checks against another image fail clearly."""
    result = CliRunner().invoke(main, ["check", "debian-mpi", "--image", base_image])
    assert result.exit_code == 1
    assert "FAIL     openmpi.version" in result.output


def test_an_image_without_checks_is_refused_with_the_fix(base_image):
    result = CliRunner().invoke(main, ["check", base_image])
    assert result.exit_code == 2
    assert "carries no imagekit checks" in result.output and "--image" in result.output


def test_check_kinds_round_trip_through_the_label():
    for c in [checks.run("a.b", "d", "true", expect="x"), checks.file("a.f", "/x"),
              checks.absent("a.n", "/y*", "d"), checks.library("a.l", "libz.so.1"),
              checks.python_import("a.p", "json")]:
        d = json.loads(json.dumps(c.as_dict()))
        assert d["kind"] == c.kind and d[c.kind] == getattr(c, c.kind)


def test_the_library_closure_names_what_is_missing_in_its_old_and_new_label_form(mpi_image):
    """Images built before the ldd_closure kind carry the closure as a run check: both forms pass on
    the real image and fail on a copy without libucp, naming the library."""
    from test_kinds import OLD_LDD_CLOSURE

    new = [c for c in checks.stack_checks(stack.load("debian-mpi")) if c.id == "image.ldd_closure"]
    assert [c.kind for c in new] == ["ldd_closure"]
    both = [new[0], {**json.loads(OLD_LDD_CLOSURE), "id": "image.ldd_closure_old"}]
    assert [o.status for o in runner.run(mpi_image, both).outcomes] == ["passed", "passed"]
    broken = committed_copy(mpi_image, "imagekit-test/broken:ldd",
                            "rm -f /usr/lib/x86_64-linux-gnu/libucp.so.0* && ldconfig")
    try:
        outcomes = runner.run(broken, both).outcomes
        assert [o.status for o in outcomes] == ["failed", "failed"]
        assert all("libucp.so.0 => not found" in o.detail for o in outcomes)
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", broken], capture_output=True)


def test_hostile_check_values_are_data_in_the_container(base_image):
    """A file path with quotes and ``$(...)`` names a file, whether it exists or not; the command that
    would create the canary never runs (the last check looks for it in the same container)."""
    # One file name (no "/" after /tmp/); the canary is relative: every check runs in the same working directory.
    odd = "/tmp/it's \"$(touch canary)\" `touch canary`"
    specs = [checks.run("h.make", "make the odd file", "touch " + shlex.quote(odd)).as_dict(),
             checks.file("h.present", odd).as_dict(),
             checks.file("h.missing", odd + "x").as_dict(),
             checks.run("h.no_canary", "the canary was never made", "test ! -e canary").as_dict()]
    outcomes = {o.id: o.status for o in runner.run(base_image, specs).outcomes}
    assert outcomes == {"h.make": "passed", "h.present": "passed", "h.missing": "failed", "h.no_canary": "passed"}


@pytest.mark.parametrize("spec, says", [
    ({"id": "x.shell", "describe": "d", "kind": "shell", "shell": "true"}, "check x.shell (kind shell): unknown kind"),
    ({"id": "x.imp", "describe": "d", "kind": "python_import", "python_import": "os; import sys"},
     "check x.imp (kind python_import): module 'os; import sys' is not a dotted module name"),
])
def test_a_label_check_no_kind_reads_is_refused_naming_image_and_check(base_image, tmp_path, spec, says):
    tag = "imagekit-test/check-label:refused"
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image}\n")
    subprocess.run([engine.docker_cli(), "build", "-q", "--label", f"io.imagekit.checks={json.dumps([spec])}",
                    "-t", tag, str(tmp_path)], check=True, capture_output=True)
    try:
        result = CliRunner().invoke(main, ["check", tag])
        assert result.exit_code == 2, result.output
        assert f"image {tag}: label io.imagekit.checks: {says}" in result.output
        assert "Traceback" not in result.output
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", tag], capture_output=True)


CAT_C = r"""#include <stdio.h>
int main(int argc, char **argv) {
    FILE *f = argc > 1 ? fopen(argv[1], "r") : NULL;
    int c;
    if (!f) return 1;
    while ((c = fgetc(f)) != EOF) putchar(c);
    return 0;
}
"""


def test_an_emulated_image_whose_programs_see_the_host_cpu_is_checked_with_an_arm64_one(tmp_path, monkeypatch):
    """QEMU before 8.2 hands arm64 programs the x86 host's /proc/cpuinfo, and `import torch` dies
    there with SIGSEGV. The check container of such an image gets an arm64 /proc/cpuinfo instead,
    and the report says so once.

    How the old QEMU is simulated, whichever QEMU this machine registers: an arm64 image (its config
    says arm64; tests/helpers/arch_images.py) whose ``cat`` is a static x86 program, which the kernel
    runs natively, so it reads this machine's own /proc/cpuinfo, as QEMU 7.2 shows it to an arm64
    program (its ``sh`` is a static one that only waits, for the idle container). testinfra needs a
    real shell, so the testinfra run is replaced by reading the file in the real check container
    with that ``cat``. An amd64 image is not emulated: no file, no note."""
    need(None if shutil.which("gcc") else "gcc (scripts/setup-test.sh installs it)")
    if os.uname().machine != "x86_64":
        pytest.skip("an x86_64 machine's case")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (tmp_path / "cat.c").write_text(CAT_C)
    built = subprocess.run(["gcc", "-static", "-O2", "-o", str(ctx / "cat"), str(tmp_path / "cat.c")],
                           capture_output=True, text=True)
    need(None if built.returncode == 0 else f"a static libc (libc6-dev): {built.stderr[-300:]}")
    base, tag = "ik-emulation-test/bare:arm64", "ik-emulation-test/old-qemu-view:arm64"
    make(base, "arm64", tmp_path, "emulation")
    # The idle check container's shell: one that waits, as the engine's idle command does.
    (tmp_path / "sh.c").write_text("#include <unistd.h>\nint main(void) { for (;;) pause(); }\n")
    subprocess.run(["gcc", "-static", "-O2", "-o", str(ctx / "sh"), str(tmp_path / "sh.c")], check=True)
    (ctx / "Dockerfile").write_text(f"FROM {base}\nCOPY cat sh /bin/\n")
    docker = engine.docker_cli()
    seen = []

    def read_cpuinfo(container, image, specs, cli, **_kw):
        done = subprocess.run([docker, "exec", container, "/bin/cat", "/proc/cpuinfo"], capture_output=True, text=True)
        seen.append(done.stdout)
        return runner.Report(image, [runner.Outcome("a.cpu", "reads /proc/cpuinfo", "passed")])

    try:
        subprocess.run([docker, "build", "-q", "--platform", "linux/arm64", "-t", tag, str(ctx)],
                       check=True, capture_output=True)
        monkeypatch.setattr(runner, "_run_in", read_cpuinfo)
        report = runner.run(tag, [{"kind": "run", "id": "a.cpu", "describe": "reads /proc/cpuinfo", "run": "true"}])
        assert seen == [emulation.arm64_cpuinfo(os.cpu_count() or 1)]
        assert "CPU implementer\t: 0x41" in seen[0] and "vendor_id" not in seen[0]
        assert len(report.notes) == 1, report.notes
        assert report.notes[0].startswith(f"{tag} runs here under emulation, but its programs read this x86_64 "
                                          "machine's /proc/cpuinfo, not an arm64 CPU's")
        assert "reads an Arm Neoverse N1's /proc/cpuinfo instead" in report.notes[0]
        assert "QEMU 8.2 or later" in report.notes[0]
        assert runner._emulated_cpu(engines.of("docker"), tag, "amd64") == (None, [])
    finally:
        subprocess.run([docker, "rmi", "-f", tag, base], capture_output=True)


def test_a_report_carries_its_notes_to_json_and_to_the_terminal(capsys):
    report = runner.Report("img", [runner.Outcome("a.b", "a thing", "passed")], notes=["img runs here under emulation"])
    assert report.as_dict()["notes"] == ["img runs here under emulation"]
    from imagekit.cli.build_cmds import _print_report
    _print_report(report)
    assert "note: img runs here under emulation" in capsys.readouterr().err


def test_a_long_check_run_says_how_far_it_is_while_it_runs(base_image, monkeypatch):
    """Review 4: the checks printed nothing for about a minute. While they run, a line at least every
    5 s (shortened here) says how many are done and which one runs."""
    monkeypatch.setattr(runner._Pace, "EVERY", 0.5)
    said: list[str] = []
    specs = [checks.run("quick", "quick", "true"), checks.run("slow", "takes a while", "sleep 4; echo done", expect="done")]
    report = runner.run(base_image, specs, progress=said.append)
    assert [o.status for o in report.outcomes] == ["passed", "passed"]
    assert any(line.startswith("checks: 1 of 2 done, 0 failed; running slow (") for line in said), said


def test_pace_counts_what_pytest_reports_and_names_the_next():
    said: list[str] = []
    pace = runner._Pace(["a", "b", "c"], said.append)
    pace.finished("test_imagekit_checks.py::test_check[a] PASSED                                 [ 33%]\n")
    pace.finished("test_imagekit_checks.py::test_check[b] FAILED                                 [ 66%]\n")
    pace.finished("collected 3 items\n")
    pace.tick(pace.since + 7)
    pace.tick(pace.since + 8)         # a second later: quiet
    assert said == ["checks: 2 of 3 done, 1 failed; running c (7 s)"]
