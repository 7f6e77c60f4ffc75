"""An image file's checks run with no engine: under the real Enroot (a .sqsh) and the real Apptainer (a .sif
or a .sqsh), as ``imagekit check FILE`` does where site staff have only the file (imagekit.checks.runtimes).

The files are exported from the Debian base image; each runtime must pass what holds in it and fail what
does not, so a runner that ran nothing, or ran on the host, is caught.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from helpers.needs import need

from imagekit import checks
from imagekit.checks import runner, runtimes
from imagekit.util.errors import UsageError
from imagekit.export import ExportRequest, export_image

pytestmark = pytest.mark.engine

# A file the test puts on the host, and never in the image: a runner that ran on the host fails.
HOST_ONLY = Path(f"/opt/imagekit-host-only-{os.getpid()}")
# What holds in the Debian image, and what holds in no image.
GOOD = [checks.file("debian.version", "/etc/debian_version"),
        checks.run("debian.os-release", "the image's os-release says Debian", "cat /etc/os-release",
                   expect="Debian GNU/Linux"),
        checks.run("not.the.host", "the checks run inside the image", f"test ! -e {HOST_ONLY}")]
BAD = [checks.file("nothing.there", "/imagekit-no-such-file"),
       checks.run("nothing.runs", "a command that fails", "test -e /imagekit-no-such-file")]


@pytest.fixture(scope="module")
def files(base_image) -> dict[str, Path]:
    need(None if shutil.which("enroot") and shutil.which("apptainer") else
         "Enroot and Apptainer (bash scripts/setup-cluster.sh)")
    work = Path(tempfile.mkdtemp(prefix="imagekit-check-files-", dir="/var/tmp"))
    os.chmod(work, 0o755)
    out = {"sqsh": work / "base.sqsh", "sif": work / "base.sif"}
    export_image(base_image, ExportRequest("enroot"), out["sqsh"], store=False)
    export_image(base_image, ExportRequest("sif"), out["sif"], store=False)
    HOST_ONLY.touch()
    yield out
    HOST_ONLY.unlink()
    shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize("runtime, kind", [("enroot", "sqsh"), ("apptainer", "sif"), ("apptainer", "sqsh")])
def test_checks_run_inside_the_image_file_and_fail_where_the_image_falls_short(files, runtime, kind):
    report = runner.run_file(files[kind], GOOD + BAD, runtime=runtime)
    by_id = {o.id: o.status for o in report.outcomes}
    assert by_id == {"debian.version": "passed", "debian.os-release": "passed", "not.the.host": "passed",
                     "nothing.there": "failed", "nothing.runs": "failed"}, report.outcomes


def test_the_runtime_is_picked_by_the_file(files):
    assert runtimes.pick(Path("x.sif"), None) == "apptainer"
    assert runtimes.pick(Path("x.sqsh"), None) == "enroot"


def test_enroot_is_refused_a_sif_before_anything_runs():
    with pytest.raises(UsageError, match="Enroot cannot run a SIF"):
        runtimes.pick(Path("x.sif"), "enroot")
    with pytest.raises(UsageError, match="use one of: enroot, apptainer"):
        runtimes.pick(Path("x.sqsh"), "docker")
