"""Security-4 H1: the importer's re-executions run only imagekit's own code.

Pyxis runs the importer in the job's working directory (slurmstepd's ``/tmp`` when that directory is
missing on the node) with the job's environment, stdin on /dev/null, as the job's user, root
included. Another user (BOB) controls that directory here and plants in it what a Python started
the plain way would run: an ``imagekit`` package, ``runpy.py`` (the isolated child's own first
import), ``sitecustomize.py``, ``usercustomize.py``, and the targets of every ``PYTHON*`` variable a
job sets (a warnings category module, a startup file, a user base with a ``.pth``, a pycache prefix,
a home). Each plant writes a marker named for itself and the uid that ran it.

The importer is started as Pyxis starts it (tests/helpers/pyxis_calls.py, with the job's directory
as cwd), in both forms a site installs (docs/security.md, "The importer runs only imagekit's code"):

- the console script, the red team's case: every ``PYTHON*`` variable that a non-isolated interpreter
  would not itself act on at start (the console script's own ``sys.path[0]`` is its ``bin/``);
- ``python -I -m imagekit.export.pyxis_importer``, the documented wrapper: every variable, including
  ``PYTHONPATH`` (with an empty entry, the job's directory) and ``PYTHONHOME``.

and through each re-execution: the hand-over to the signed importer (``IMAGEKIT_POLICY``), ``stage``,
and the fill program on a store miss (a real conversion from the engine). As root (the worktree's
venv) and as ALICE (Debian's python3 with this checkout installed: tests/helpers/users.py). No marker
may appear, and the child must have run imagekit's real code (its own error line, or a squashfs).
On the old code (``python -m``) every case leaves the ``imagekit`` marker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.arch_images import make
from helpers.pyxis_calls import EXE, is_squashfs, run
from helpers.users import ALICE, BOB, TEAM, home_for, setpriv

MARKER = "import os; open(os.path.join({marks!r}, {name!r} + '-' + str(os.getuid())), 'w').close()\n"
UNREACHABLE = "docker://127.0.0.1:9#h1/planted:1"      # nothing listens: the child's own error, exit 4


def plant(job_dir: Path, marks: Path) -> dict[str, str]:
    """BOB's plants in ``job_dir``; the PYTHON* variables (all of them) that point into it."""
    pyver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    code = {
        "imagekit/__init__.py": "imagekit", "imagekit/export/__init__.py": "imagekit.export",
        "runpy.py": "runpy", "sitecustomize.py": "sitecustomize", "usercustomize.py": "usercustomize",
        "evilwarn.py": "PYTHONWARNINGS", "startup.py": "PYTHONSTARTUP",
        f"userbase/lib/{pyver}/site-packages/zz.pth": "PYTHONUSERBASE",
        f"userbase/lib/python3.11/site-packages/zz.pth": "PYTHONUSERBASE",
        "home/lib/python3.11/encodings/__init__.py": "PYTHONHOME",
        f"home/lib/{pyver}/encodings/__init__.py": "PYTHONHOME",
    }
    for rel, name in code.items():
        path = job_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(MARKER.format(marks=str(marks), name=name) + ("class W(Warning):\n    pass\n"
                                                                        if rel == "evilwarn.py" else ""))
    (job_dir / "pycache").mkdir()
    shutil.chown(job_dir, BOB, BOB)
    for path in job_dir.rglob("*"):
        shutil.chown(path, BOB, BOB)
    return {"PYTHONPATH": f"{job_dir}:", "PYTHONHOME": str(job_dir / "home"),
            "PYTHONSTARTUP": str(job_dir / "startup.py"), "PYTHONINSPECT": "1",
            "PYTHONWARNINGS": "ignore::evilwarn.W", "PYTHONUSERBASE": str(job_dir / "userbase"),
            "PYTHONPYCACHEPREFIX": str(job_dir / "pycache")}


# The console script is a plain interpreter: these two would take it over before imagekit runs
# (that is the wrapper's job to prevent: the isolated form below has them too).
TAKE_OVER_ANY_INTERPRETER = ("PYTHONPATH", "PYTHONHOME")


@pytest.fixture
def job(shared_dir):
    """(the job's directory, BOB's, holding the plants; the markers' directory; the PYTHON* variables)."""
    job_dir, marks = shared_dir / "job", shared_dir / "marks"
    job_dir.mkdir(mode=0o1777)
    marks.mkdir()
    os.chmod(job_dir, 0o1777)
    os.chmod(marks, 0o1777)
    return job_dir, marks, plant(job_dir, marks)


def importer(form: str, user: int | None, other_python) -> list[str]:
    """argv of the importer as a site installs it: its console script, or ``python -I -m``."""
    if user is None:
        python, script = Path(sys.executable), EXE
    else:
        python, script = other_python.python, other_python.script("imagekit-pyxis-importer")
    argv = [str(script)] if form == "console script" else [str(python), "-I", "-m", "imagekit.export.pyxis_importer"]
    return argv if user is None else setpriv(user, argv)


def job_env(python_vars: dict[str, str], form: str, home: Path, uid: int, **extra: str) -> dict[str, str]:
    """What Pyxis hands the importer (env -i plus the job's): the job's PYTHON* variables too."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(home),
           "IMAGEKIT_STORE": str(home / "store"), "PYXIS_RUNTIME_PATH": str(home / "run"), "PYXIS_VERSION": "0.24.0",
           "SLURM_JOB_ID": "4450", "SLURM_STEP_ID": "0", "SLURM_JOB_UID": str(uid), "SLURM_JOB_GID": str(uid),
           **extra}
    env.update({k: v for k, v in python_vars.items()
                if form != "console script" or k not in TAKE_OVER_ANY_INTERPRETER})
    return env


def ran(marks: Path) -> list[str]:
    return sorted(p.name for p in marks.iterdir())


FORMS = ("console script", "python -I")
USERS = {"root": None, "alice": ALICE}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("who", USERS)
@pytest.mark.parametrize("step", ["hand-over to the signed importer", "stage"])
def test_h1_no_reexecution_runs_what_another_user_planted_in_the_jobs_directory(step, who, form, job, shared_dir,
                                                                                other_python):
    job_dir, marks, python_vars = job
    uid = USERS[who]
    home = home_for(uid if uid is not None else 0, shared_dir)
    extra = {"IMAGEKIT_POLICY": "/nonexistent/policy.yaml"} if step.startswith("hand-over") else {}
    args = ["get", UNREACHABLE] if step.startswith("hand-over") else ["stage", UNREACHABLE]
    call = run(args, job_env(python_vars, form, home, uid or 0, **extra), importer(form, uid, other_python),
               cwd=job_dir)
    assert ran(marks) == [], call.log
    assert call.rc != 0 and call.path == "", call.log
    # The child ran imagekit's own code: its one error line, no traceback.
    assert "imagekit-pyxis-importer on " in call.log and "error:" in call.log, call.log
    assert "Traceback" not in call.log, call.log
    if step.startswith("hand-over"):
        assert "handing over to imagekit-pyxis-importer-signed" in call.log, call.log


@pytest.mark.engine
@pytest.mark.parametrize("form", FORMS)
def test_h1_the_fill_program_on_a_store_miss_runs_only_imagekit_and_serves_the_conversion(form, job, shared_dir,
                                                                                        tmp_path, other_python):
    """Root's job misses the store: the importer becomes the fill program, which converts the image
    (a one-layer one, from the engine) and prints its path."""
    from imagekit.engines import docker as engine

    job_dir, marks, python_vars = job
    tag = f"imagekit-test/h1-fill:{os.getpid()}"
    make(tag, "amd64", tmp_path, "h1")
    try:
        call = run(["get", f"dockerd://{tag}"], job_env(python_vars, form, home_for(0, shared_dir), 0),
                   importer(form, None, other_python), cwd=job_dir)
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", tag], capture_output=True)
    assert ran(marks) == [], call.log
    assert call.rc == 0, call.log
    assert "converted and stored" in call.log and is_squashfs(call.path), call.log


@pytest.mark.engine
@pytest.mark.slurm
@pytest.mark.parametrize("form", FORMS)
def test_h1_under_the_real_pyxis_jobs_started_from_another_users_directory_run_only_imagekit(
        form, job, cluster, registry, base_image, other_python, test_user, shared_dir):
    """The untried surface of security-4: ``srun --container-image`` of the session's Slurm and Pyxis
    0.24.0, started in BOB's directory of plants with the PYTHON* variables in the job's environment
    (slurmstepd gives Pyxis's importer that directory and that environment). Root's job misses the
    store (the fill program converts into the site's store); the test user's job sets IMAGEKIT_POLICY
    (the plain importer hands over to the signed one, which serves root's entry under an
    ``accept: unsigned`` policy). Both containers run; no plant runs, as root or as the user."""
    from imagekit.export.push import push_image
    from imagekit.cli import main
    from click.testing import CliRunner

    job_dir, marks, python_vars = job
    push_image(base_image, f"{registry}/imagekit-test/h1-pyxis:1")
    image = f"{registry}#imagekit-test/h1-pyxis:1"
    site = shared_dir / "site"
    site.mkdir(mode=0o755)
    shared = site / "shared"
    assert CliRunner().invoke(main, ["store", "--store", str(shared), "init", "--shared", "--group",
                                     str(TEAM)]).exit_code == 0
    policy = site / "policy.yaml"
    policy.write_text('version: 1\nkeys:\n  ci: {path: ci.pub}\nrepositories:\n  - match: "*"\n    accept: unsigned\n')
    from imagekit.attest import keys

    keys.write_pair(keys.generate(), site / "ci")
    (site / "ci.key").unlink()
    log = site / "importer.log"
    log.touch()
    log.chmod(0o666)
    if form == "console script":
        wrapper = site / "imagekit-importer"
        wrapper.write_text(f"#!/bin/bash\nexport IMAGEKIT_SHARED_STORE={shared}\nexec 2> >(tee -a {log} >&2)\n"
                           f'exec {other_python.script("imagekit-pyxis-importer")} "$@"\n')
        wrapper.chmod(0o755)
    else:
        wrapper = other_python.importer(site, {"IMAGEKIT_SHARED_STORE": str(shared)}, log)
    homes = {None: home_for(0, shared_dir), test_user: Path(test_user.home)}
    cluster.pyxis(importer=str(wrapper))
    try:
        for user, extra in ((None, {}), (test_user, {"IMAGEKIT_POLICY": str(policy)})):
            env = job_env(python_vars, form, homes[user], user.uid if user else 0, **extra)
            env = {k: v for k, v in env.items() if not k.startswith(("SLURM_JOB", "SLURM_STEP", "PYXIS_"))}
            own = home_for(user.uid if user else 0, shared_dir) / "store"
            env.update(SLURM_CONF=str(cluster.conf), IMAGEKIT_STORE=str(own))
            argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), "srun", f"--container-image={image}",
                    "cat", "/etc/debian_version"]
            before = len(log.read_text())
            if user is None:
                proc = subprocess.run(argv, cwd=job_dir, capture_output=True, text=True, timeout=600)
            else:
                proc = user.run(argv, cwd=job_dir, timeout=600, stderr=subprocess.PIPE)
            said = log.read_text()[before:]
            assert proc.returncode == 0 and proc.stdout.strip().startswith("12"), proc.stdout + proc.stderr + said
            assert ran(marks) == [], said
            if user is None:
                assert "converted and stored" in said, said
            else:
                assert "handing over to imagekit-pyxis-importer-signed" in said and "store hit" in said, said
                assert "may start unsigned" in said, said
    finally:
        cluster.pyxis()
