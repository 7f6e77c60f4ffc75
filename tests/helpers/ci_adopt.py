"""Running the CI templates' jobs here, as their runners would, for a made-up site (tests/test_ci_adoption.py).

A GitHub job: its env and ``if:`` evaluated with the site's inputs, variables and secrets
(tests/helpers/gha_expr.py), each ``run:`` step in ``bash --noprofile --norc -eo pipefail`` as GitHub's
runner starts it, ``$GITHUB_OUTPUT``/``$GITHUB_ENV`` read back between steps, the job's outputs evaluated.
A GitLab job: its script lines in one POSIX ``sh`` (dash here; the docker image's ash there), with the
template's variables expanded as GitLab expands them, the site's CI/CD variables winning, then its
after_script. Nothing of a template is changed: what a runner's image provides already here (actions
that check out and set up Python, the steps that install imagekit and host tools) is left out, and
named by the caller.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from helpers import gha_expr


class StepFailed(AssertionError):
    pass


def _base_env(extra: dict[str, str]) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "IMAGEKIT_STORE", "DOCKER_CONFIG", "PIP_CERT", "PIP_INDEX_URL", "TMPDIR")
    return {**{k: v for k, v in os.environ.items() if k in keep}, **extra}


@dataclass
class GithubRun:
    """One site's run of a workflow: its event, inputs, variables and secrets, and where it runs."""

    workflow: dict
    workdir: Path
    github: dict[str, Any]
    inputs: dict[str, str] = field(default_factory=dict)
    vars: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)      # the runner's own environment (PATH, ...)
    skip: Callable[[dict], bool] = lambda step: False       # steps a runner's image makes needless here
    log: list[str] = field(default_factory=list)

    def context(self, **more: Any) -> dict[str, Any]:
        return {"github": self.github, "inputs": self.inputs, "vars": self.vars, "secrets": self.secrets,
                "runner": {"os": "Linux", "temp": str(self.workdir / ".runner-temp")}, **more}

    def job_env(self, job: dict, ctx: dict) -> dict[str, str]:
        env = {k: gha_expr.text(gha_expr.interpolate(v, ctx)) for k, v in (self.workflow.get("env") or {}).items()}
        ctx = {**ctx, "env": env}
        env.update({k: gha_expr.text(gha_expr.interpolate(v, ctx)) for k, v in (job.get("env") or {}).items()})
        return env

    def run_job(self, name: str, needs: dict | None = None, matrix: dict | None = None) -> dict[str, Any]:
        """Run job ``name`` (one matrix row of it); returns its outputs. A failing step raises StepFailed."""
        job = self.workflow["jobs"][name]
        ctx = self.context(needs=needs or {}, matrix=matrix or {}, steps={})
        env = self.job_env(job, ctx)
        ctx["env"] = env
        temp = self.workdir / ".runner-temp"
        temp.mkdir(exist_ok=True)
        for step in job["steps"]:
            label = step.get("name") or step.get("uses") or step.get("run", "")[:40]
            if "uses" in step or self.skip(step):
                self.log.append(f"{name}: (here already) {label}")
                continue
            if not gha_expr.condition(step.get("if"), ctx):
                self.log.append(f"{name}: skipped by its if: {label}")
                continue
            step_env = {k: gha_expr.text(gha_expr.interpolate(v, ctx)) for k, v in (step.get("env") or {}).items()}
            outputs, env_file = temp / "output", temp / "env"
            outputs.write_text("")
            env_file.write_text("")
            script = gha_expr.interpolate(step["run"], ctx)
            full = _base_env({**self.env, **env, **step_env, "GITHUB_OUTPUT": str(outputs), "GITHUB_ENV": str(env_file),
                              "RUNNER_TEMP": str(temp), "GITHUB_WORKSPACE": str(self.workdir),
                              "GITHUB_SHA": self.github["sha"], "GITHUB_REF": self.github["ref"],
                              "GITHUB_EVENT_NAME": self.github["event_name"], "CI": "true"})
            proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=self.workdir,
                                  env=full, capture_output=True, text=True)
            self.log.append(f"{name}: ran {label} (exit {proc.returncode})\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
            if proc.returncode != 0 and not step.get("continue-on-error"):
                raise StepFailed(f"{name} / {label} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
            if "id" in step:
                ctx["steps"][step["id"]] = {"outputs": _read_pairs(outputs.read_text())}
            env.update(_read_pairs(env_file.read_text()))
        return {k: gha_expr.interpolate(v, ctx) for k, v in (job.get("outputs") or {}).items()}


def _read_pairs(text: str) -> dict[str, str]:
    """NAME=value lines of $GITHUB_OUTPUT / $GITHUB_ENV (the heredoc form is not used by the templates)."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


_GITLAB_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def gitlab_expand(value: str, variables: dict[str, str]) -> str:
    """GitLab's expansion of a variable's value: $NAME and ${NAME} from the variables known so far."""
    return _GITLAB_VAR.sub(lambda m: variables.get(m.group(1) or m.group(2), ""), value)


@dataclass
class GitlabRun:
    """One site's run of a GitLab pipeline: its predefined and CI/CD variables and where it runs."""

    workdir: Path
    predefined: dict[str, str]
    site_variables: dict[str, str]                          # the project's CI/CD variables: they win
    env: dict[str, str] = field(default_factory=dict)
    skip: Callable[[str], bool] = lambda line: False        # script lines a runner's image makes needless
    log: list[str] = field(default_factory=list)

    def variables(self, *layers: dict[str, str]) -> dict[str, str]:
        """Predefined, then each YAML layer (global, job) expanded in order, then the site's variables."""
        out = dict(self.predefined)
        for layer in layers:
            for key, value in (layer or {}).items():
                out[key] = gitlab_expand(str(value), out)
        out.update(self.site_variables)
        return out

    def run_job(self, name: str, job: dict, *layers: dict[str, str]) -> None:
        variables = self.variables(*layers, job.get("variables") or {})
        lines = [line for line in job["script"] if not self.skip(line)]
        self.log.append(f"{name}: left out (here already): " + "; ".join(l for l in job["script"] if self.skip(l)))
        for part, body, must in (("script", lines, True), ("after_script", job.get("after_script") or [], False)):
            script = "set -e\n" + "\n".join(body)
            proc = subprocess.run(["sh", "-c", script], cwd=self.workdir, env=_base_env({**self.env, **variables}),
                                  capture_output=True, text=True)
            self.log.append(f"{name} {part}: exit {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
            if must and proc.returncode != 0:
                raise StepFailed(f"{name} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
