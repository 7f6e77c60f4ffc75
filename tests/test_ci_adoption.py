"""A made-up site adopts each CI template by its inputs alone, and its first run goes green here, for real.

The site has a stack directory (``site/``: a tiny base stack on the offline Debian base, and the stack it
builds, which extends it), a registry (a real local one) and a signing key (`imagekit keygen`). The
templates are copied into the site's checkout unchanged; the site sets only inputs: its stack directory,
the stack it builds, its platform, its registry, its runner labels and its key secret. Then the jobs run
as their runners would (tests/helpers/ci_adopt.py): GitHub's matrix and build jobs, GitLab's matrix job
and the child pipeline's build job. The run must build, check, export, sign and push, and what lands in
the registry must verify against the site's public key. Only what a runner's image provides already
here (checkout, Python, `pip install`, apt) is left out.

The time each run takes is the time from a clone to a first green run (docs/ci.md quotes it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from helpers.ci_adopt import GithubRun, GitlabRun, StepFailed
from helpers.gha_expr import evaluate, interpolate

REPO = Path(__file__).resolve().parents[1]
SHA = "0123456789abcdef0123456789abcdef01234567"
SITE_BASE = """\
name: ux-site-base
description: the site's base, on the offline Debian base image
base: {image: imagekit/debian:bookworm, distro: debian12}
checks:
  - name: site-shell
    describe: a shell starts
    run: echo site-shell
    expect: site-shell
"""
SITE_STACK = """\
name: ux-site-hello
description: what the site builds and ships
extends: ux-site-base
checks:
  - name: site-hello
    describe: the site's own check
    run: echo hello from the site
    expect: hello from the site
"""


def _checkout(tmp_path: Path) -> Path:
    """A site's clone: the templates as shipped, and the site's stack directory."""
    work = tmp_path / "checkout"
    for part in (".github", "ci", "scripts"):
        shutil.copytree(REPO / part, work / part, ignore=shutil.ignore_patterns("__pycache__"))
    (work / "site").mkdir()
    (work / "site" / "ux-site-base.yaml").write_text(SITE_BASE)
    (work / "site" / "ux-site-hello.yaml").write_text(SITE_STACK)
    return work


def _runner_env(tmp_path: Path) -> dict[str, str]:
    """What a runner has: imagekit and Python on PATH (set up by the skipped steps), Debian's docker
    client, sudo (root here: a shim), a docker config of its own."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    (shim / "sudo").chmod(0o755)
    (shim / "python").symlink_to(sys.executable)
    (shim / "python3").symlink_to(sys.executable)
    path = os.pathsep.join([str(shim), str(Path(sys.executable).parent), "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
    docker_config = tmp_path / "docker-config"
    docker_config.mkdir()
    return {"PATH": path, "DOCKER_CONFIG": str(docker_config), "HOME": str(tmp_path)}


@pytest.fixture(scope="module")
def site_key(tmp_path_factory) -> tuple[Path, Path]:
    where = tmp_path_factory.mktemp("keys")
    subprocess.run([sys.executable, "-m", "imagekit", "keygen", str(where / "site")], check=True, capture_output=True)
    return where / "site.key", where / "site.pub"


def _verify(reference: str, pub: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "imagekit", "verify", reference, "--key", str(pub), "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _registry_tags(registry: str, repo: str) -> list[str]:
    import requests

    return requests.get(f"http://{registry}/v2/{repo}/tags/list", timeout=10).json().get("tags") or []


@contextlib.contextmanager
def first_run(run, what: str):
    """A site's first run of a template: its log shown if a step fails, its time printed if it goes green."""
    started = time.monotonic()
    try:
        yield
    except StepFailed:
        print("\n".join(run.log))
        raise
    print(f"\n{what}, site adoption: first green run in {time.monotonic() - started:.0f} s, 0 template edits")


def assert_signed_and_pushed(work: Path, registry: str, pub: Path) -> None:
    """What a green run leaves: signed exports beside the job, a signed image with both exports pushed."""
    for name in ("ux-site-hello.sqsh", "ux-site-hello.sif"):
        _verify(str(work / "out" / name), pub)
    assert (work / "out" / "ux-site-hello.sqsh.intoto.jsonl").is_file()
    _verify(f"docker://{registry}/site/ux-site-hello:{SHA[:12]}", pub)


@pytest.fixture
def cleanup_images():
    yield
    for tag in ("imagekit/ux-site-hello:latest",):
        subprocess.run(["/usr/bin/docker", "rmi", "-f", tag], capture_output=True)


@pytest.mark.engine
def test_a_site_adopts_the_github_workflow_by_its_inputs_and_goes_green(tmp_path, registry, site_key, base_image,
                                                                        cleanup_images):
    work = _checkout(tmp_path)
    workflow = yaml.safe_load((work / ".github/workflows/build.yml").read_text())
    assert workflow == yaml.safe_load((REPO / ".github/workflows/build.yml").read_text())   # unedited
    key, pub = site_key
    run = GithubRun(
        workflow=workflow, workdir=work,
        github={"event_name": "push", "ref": "refs/heads/main", "sha": SHA, "actor": "site-ci", "repository": "site/ci"},
        vars={"IMAGEKIT_STACKS_DIR": "site", "IMAGEKIT_BUILD_STACKS": "ux-site-hello",
              "IMAGEKIT_PLATFORMS": "linux/amd64", "IMAGEKIT_REGISTRY": f"{registry}/site",
              "IMAGEKIT_RUNNERS": "x86_64=self-hosted,linux,x64"},
        secrets={"IMAGEKIT_SIGNING_KEY": key.read_text(), "GITHUB_TOKEN": "not-used-by-this-registry"},
        env=_runner_env(tmp_path),
        # Provided by the runner's image here: imagekit installed; a report-only step (continue-on-error).
        skip=lambda step: step.get("name", "").startswith("Install") or bool(step.get("continue-on-error")))
    with first_run(run, "GitHub workflow"):
        outputs = run.run_job("matrix")
        rows = json.loads(outputs["include"])
        # The matrix holds only the stack the site named: not its base, not a shipped CUDA stack.
        assert [(r["stack"], r["arch"], r["file"]) for r in rows] == [("ux-site-hello", "x86_64", "site/ux-site-hello.yaml")]
        assert json.loads(outputs["validate"]) == []
        build = workflow["jobs"]["build"]
        ctx = run.context(needs={"matrix": {"outputs": outputs, "result": "success"}})
        (row,) = interpolate(build["strategy"]["matrix"]["include"], ctx)
        assert interpolate(build["runs-on"], {**ctx, "matrix": row}) == ["self-hosted", "linux", "x64"]
        run.run_job("build", needs={"matrix": {"outputs": outputs}}, matrix=row)
    assert_signed_and_pushed(work, registry, pub)
    assert "cache" in _registry_tags(registry, "site/ux-site-hello")
    assert not (work / ".runner-temp" / "imagekit-signing.key").exists(), "the key outlived the job"
    # The validate job is not run for a site that named no row to validate.
    assert not evaluate(workflow["jobs"]["validate"]["if"].replace("needs.matrix.result", "'success'"),
                        run.context(needs={"matrix": {"outputs": outputs}}))


@pytest.mark.engine
def test_a_site_adopts_the_gitlab_pipeline_by_its_variables_and_goes_green(tmp_path, registry, site_key, base_image,
                                                                           cleanup_images):
    work = _checkout(tmp_path)
    template = yaml.safe_load((work / "ci/gitlab-ci.yml").read_text())
    key, pub = site_key
    run = GitlabRun(
        workdir=work,
        predefined={"CI_COMMIT_BRANCH": "main", "CI_DEFAULT_BRANCH": "main", "CI_COMMIT_SHA": SHA, "CI_JOB_ID": "7",
                    "CI_PIPELINE_SOURCE": "push", "CI_REGISTRY_IMAGE": "", "CI_REGISTRY_USER": "gitlab-ci-token",
                    "CI_REGISTRY_PASSWORD": "not-used-by-this-registry", "CI_PROJECT_DIR": str(work)},
        # The site's CI/CD variables (a File variable gives the key's path).
        site_variables={"IMAGEKIT_STACKS_DIR": "site", "IMAGEKIT_BUILD_STACKS": "ux-site-hello",
                        "IMAGEKIT_PLATFORMS": "linux/amd64", "IMAGEKIT_REGISTRY": f"{registry}/site",
                        "IMAGEKIT_RUNNERS": "x86_64=hpc,docker", "IMAGEKIT_SIGNING_KEY": str(key)},
        env=_runner_env(tmp_path),
        skip=lambda line: line.startswith(("apk add", "python -m pip install", "python3 -m pip install")))
    with first_run(run, "GitLab pipeline"):
        run.run_job("matrix", template["matrix"], template["variables"])
        child = yaml.safe_load((work / "child-pipeline.yml").read_text())
        assert sorted(k for k in child if k != "stages") == ["build:ux-site-hello"]
        job = child["build:ux-site-hello"]
        assert job["tags"] == ["hpc", "docker"] and job["variables"]["STACK_FILE"] == "site/ux-site-hello.yaml"
        trigger_variables = {k: v for k, v in template["build"]["variables"].items()}
        run.run_job("build:ux-site-hello", job, template["variables"], trigger_variables)
    assert_signed_and_pushed(work, registry, pub)
    assert not Path("/tmp/imagekit-signing-7.key").exists()
