"""The build and check commands' text summaries name every file they wrote (no engine needed: the
results are made from the same classes the pipeline fills; tests/test_pipeline.py builds for real)."""

from imagekit.build import BuildResult
from imagekit.checks.runner import Outcome, Report
from imagekit.cli import build_cmds
from imagekit.export.output import ExportResult

SHA = "ab" * 32


def _built(**extra) -> dict:
    build = BuildResult(stack="debian-mpi", target="runtime", image_id="sha256:" + "c" * 64,
                        tags=["imagekit/debian-mpi:latest", "site/mpi:1"], seconds=63.25,
                        log="build/logs/debian-mpi-runtime.log", recipe_sha256=SHA, size_bytes=812_000_000,
                        cached_steps=26, steps=30).as_dict()
    build.pop("labels")   # as pipeline.build_all hands it over
    return {"stack": "debian-mpi", "build": build, **extra}


def test_the_summary_names_the_tags_the_log_and_each_export_with_its_size_and_digest():
    sqsh = ExportResult(path="out/debian-mpi.sqsh", format="enroot", image="imagekit/debian-mpi:latest",
                        bytes=812_345_678, sha256=SHA, seconds=40.0).as_dict()
    report = Report("imagekit/debian-mpi:latest", [Outcome("stack.mpi", "mpirun runs", "passed")])
    lines = build_cmds.summary_lines(_built(check=report.as_dict(), exports=[sqsh]))
    assert lines == [
        "imagekit/debian-mpi:latest  sha256:cccccccccccc  812 MB  63.2 s  (26/30 steps cached)",
        "  tag     site/mpi:1",
        "  log     build/logs/debian-mpi-runtime.log",
        "  checks  1 passed, 0 failed, 0 not run",
        f"  export  out/debian-mpi.sqsh  812,345,678 bytes  sha256:{SHA}",
    ]


def test_signed_builds_name_the_bundles_signing_wrote():
    sif = ExportResult(path="out/debian-mpi.sif", format="sif", image="sha256:c", bytes=10, sha256=SHA,
                       seconds=1.0).as_dict()
    sif["signed"] = {"bundle": "out/debian-mpi.sif.bundle",
                     "files": ["out/debian-mpi.sif", "out/debian-mpi.sif.bundle"]}
    lines = build_cmds.summary_lines(_built(signed={"bundle": "/att/sha256-c.bundle"}, exports=[sif]))
    assert "  signed  /att/sha256-c.bundle  (SBOM, provenance)" in lines
    assert lines[-2:] == [f"  export  out/debian-mpi.sif  10 bytes  sha256:{SHA}",
                          "  signed  out/debian-mpi.sif.bundle"]


def test_check_names_its_junit_file_only_when_it_wrote_one(capsys):
    report = Report("imagekit/debian-mpi:latest", [Outcome("stack.mpi", "mpirun runs", "passed")])
    build_cmds._print_report(report)
    assert "junit" not in capsys.readouterr().out
    report.junit = "checks.xml"
    build_cmds._print_report(report)
    assert capsys.readouterr().out.splitlines()[-1] == "  junit   checks.xml"
