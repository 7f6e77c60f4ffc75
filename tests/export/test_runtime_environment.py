"""One environment rule across runtimes (issue 34): docs/runtime-environment.md's table, held against
`docker run`, `enroot start`, Pyxis's `srun --container-image` and `apptainer exec` for one image
and one job.

The image (the Debian base, whose /etc/profile resets PATH) declares ``IK_IMAGE``, ``IK_BOTH``,
``IK_OVERRIDE``, ``IK_SITE_IMAGE``, ``IK_PROFILED``, ``PATH`` and ``LD_LIBRARY_PATH``, and its own
/etc/profile.d script appends ``:profile`` to ``IK_PROFILED``. The job (the caller's environment)
has ``IK_JOB``, ``IK_BOTH`` and ``IK_OVERRIDE`` set to ``job``; the site (Enroot's
``/etc/enroot/environ.d``, a file of this test's for its run) sets ``IK_SITE`` and
``IK_SITE_IMAGE`` to ``site``; the user overrides ``IK_OVERRIDE`` with each runtime's own means
(``-e``, ``--env``, ``--container-env``). Docker runs the engine image, Enroot and Pyxis imagekit's
``.sqsh`` of it, Apptainer imagekit's ``.sif``: what each command sees must be the table's cell.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from imagekit.engines import docker as engine
from imagekit.export import ExportRequest, export_image

pytestmark = [pytest.mark.engine, pytest.mark.slurm]

DOC = Path(__file__).resolve().parents[2] / "docs" / "runtime-environment.md"
RUNTIMES = ("docker run", "enroot start", "Pyxis srun", "apptainer exec")
SYSTEM = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IMAGE_ENV = {"IK_IMAGE": "image", "IK_BOTH": "image", "IK_OVERRIDE": "image", "IK_SITE_IMAGE": "image",
             "IK_PROFILED": "image", "PATH": f"/opt/ik/bin:{SYSTEM}", "LD_LIBRARY_PATH": "/opt/ik/lib"}
JOB_ENV = {"IK_JOB": "job", "IK_BOTH": "job", "IK_OVERRIDE": "job"}
SITE_ENV = {"IK_SITE": "site", "IK_SITE_IMAGE": "site"}
NAMES = ("IK_IMAGE", "IK_JOB", "IK_BOTH", "IK_OVERRIDE", "IK_SITE", "IK_SITE_IMAGE", "IK_PROFILED", "PATH",
         "LD_LIBRARY_PATH")
ENVIRON_D = Path("/etc/enroot/environ.d")


def table() -> dict[str, dict[str, str | None]]:
    """``{variable: {runtime: expected value or None (unset)}}`` from the document's marked table."""
    text = DOC.read_text()
    m = re.search(r"<!-- env-rule:begin.*?-->\n(.*?)<!-- env-rule:end -->", text, re.S)
    assert m, f"{DOC} has no <!-- env-rule:begin --> ... <!-- env-rule:end --> table"
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in m.group(1).splitlines()
            if line.startswith("|")]
    header, body = rows[0], rows[2:]
    columns = [re.sub(r"[`*]", "", c) for c in header[2:]]
    assert columns == list(RUNTIMES), columns
    out = {}
    for row in body:
        name = row[0].strip("`")
        out[name] = {rt: cell_value(name, cell) for rt, cell in zip(RUNTIMES, row[2:])}
    return out


def cell_value(name: str, cell: str) -> str | None:
    """A cell's words as the value: ``image`` is what the image declares for the variable; ``job``,
    ``site``, ``override`` and ``profile`` are themselves; ``–`` is unset; ``:`` joins."""
    cell = cell.strip("` ")
    if cell in ("–", "-", "unset"):
        return None
    return ":".join(IMAGE_ENV[name] if part == "image" else part for part in cell.split(":"))


def parse_env(text: str) -> dict[str, str]:
    return dict(line.partition("=")[::2] for line in text.splitlines() if "=" in line)


@pytest.fixture(scope="module")
def image(base_image, tmp_path_factory) -> str:
    ctx = tmp_path_factory.mktemp("env-rule")
    (ctx / "50-ik.sh").write_text('export IK_PROFILED="$IK_PROFILED:profile"\n')
    env = " ".join(f"{k}={v}" for k, v in IMAGE_ENV.items())
    (ctx / "Dockerfile").write_text(f"FROM {base_image}\nCOPY 50-ik.sh /etc/profile.d/50-ik.sh\nENV {env}\n"
                                    'CMD ["/bin/sh"]\n')
    tag = "imagekit-test/env-rule:1"
    proc = subprocess.run([engine.docker_cli(), "build", "-q", "-t", tag, str(ctx)], capture_output=True, text=True,
                          env={**os.environ, "DOCKER_BUILDKIT": "1"})
    assert proc.returncode == 0, proc.stderr
    return tag


@pytest.fixture(scope="module")
def seen(image, cluster) -> dict[str, dict[str, str]]:
    """What ``env`` prints under each runtime, for the same image and job."""
    if shutil.which("apptainer") is None or shutil.which("enroot") is None:
        pytest.fail("Enroot and Apptainer are needed (bash scripts/setup-cluster.sh)")
    work = Path(tempfile.mkdtemp(prefix="imagekit-env-rule-", dir="/var/tmp"))
    os.chmod(work, 0o755)
    site = ENVIRON_D / f"zz-imagekit-test-{os.getpid()}.env"
    name = f"imagekit-env-rule-{os.getpid()}"
    job = {"PATH": SYSTEM, "HOME": "/root", "LANG": "C.UTF-8", "SLURM_CONF": str(cluster.conf), **JOB_ENV}
    try:
        sqsh, sif = work / "image.sqsh", work / "image.sif"
        export_image(image, ExportRequest("enroot"), sqsh, store=False)
        export_image(image, ExportRequest("sif"), sif, store=False)
        sqsh.chmod(0o644)
        site.write_text("".join(f"{k}={v}\n" for k, v in SITE_ENV.items()))

        def run(argv: list[str]) -> dict[str, str]:
            proc = subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in job.items()), *argv], cwd=work,
                                  capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, f"{argv}: {proc.stdout[-1000:]}{proc.stderr[-2000:]}"
            return parse_env(proc.stdout)

        out = {"docker run": run([engine.docker_cli(), "run", "--rm", "-e", "IK_OVERRIDE=override", image, "env"])}
        run(["enroot", "create", "--force", "--name", name, str(sqsh)])
        out["enroot start"] = run(["enroot", "start", "--env", "IK_OVERRIDE=override", name, "env"])
        out["Pyxis srun"] = run(["srun", f"--container-image={sqsh}", "--container-env=IK_OVERRIDE", "env"])
        out["apptainer exec"] = run(["apptainer", "exec", "--env", "IK_OVERRIDE=override", str(sif), "env"])
        return out
    finally:
        site.unlink(missing_ok=True)
        subprocess.run(["enroot", "remove", "--force", name], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def test_the_document_names_every_case_once():
    assert list(table()) == list(NAMES)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_each_runtime_gives_the_documented_value(seen, runtime):
    expected = {name: row[runtime] for name, row in table().items()}
    got = {name: seen[runtime].get(name) for name in NAMES}
    assert got == expected
