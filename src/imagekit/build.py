"""Build a stack's image with the Docker engine's BuildKit, or with (rootless) Podman.

The recipe is rendered in-process and fed to Debian's docker CLI (BuildKit
built in) with ``--progress=plain``: each step is shown as it starts, the
full log goes to a file, and a failed step is reported with its command and
its last lines. The image is tagged only after the build succeeded (the build
itself writes an ID file, not a tag), so an interrupted build leaves no
half-tagged image.

``engine="podman"`` runs ``podman build`` (Buildah) as the calling user instead
(:mod:`imagekit.podman`): the same recipe, labels, secret and tags; its ``STEP n/m:``
lines are parsed for progress and the failed step. What differs is in the README.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from imagekit import base_pins, engine, engines, podman, procs, render, sources
from imagekit.errors import ImagekitError, UsageError
from imagekit.image_facts import writer

TARGETS = ("runtime", "devel")
ENGINES = ("docker", "podman")
# The stack's arch decides the platform: a build on another arch's host must not silently take
# the host's manifest of a multi-arch base image.
PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}
SYSTEM_CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
_STEP = re.compile(r"^#(\d+) \[(?P<stage>[\w-]+) +(?P<n>\d+)/(?P<total>\d+)\] (?P<cmd>.*)$")
_MOUNT = re.compile(r"--mount=\S+ ")
_ERROR = re.compile(r"^#(\d+) ERROR: (.*)$")
# Podman (Buildah): "[1/2] STEP 3/13: RUN ..." (the stage prefix only in multi-stage builds),
# "--> Using cache ID" for a cached step, "Error: building at STEP \"...\": ..." at the end.
_PODMAN_STEP = re.compile(r"^(?:\[(?P<stage>\d+)/(?P<stages>\d+)\] )?STEP (?P<n>\d+)/(?P<total>\d+): (?P<cmd>.*)$")
_PODMAN_FROM = re.compile(r"^FROM \S+(?: (?i:AS) (?P<name>\S+))?")


@dataclass
class BuildResult:
    stack: str
    target: str
    image_id: str
    tags: list[str]
    seconds: float
    log: str
    recipe_sha256: str
    size_bytes: int = 0
    cached_steps: int = 0
    steps: int = 0
    labels: dict = field(default_factory=dict)
    engine: str = "docker"

    def as_dict(self) -> dict:
        return asdict(self)


class BuildError(ImagekitError):
    def __init__(self, message: str, step: str | None, tail: list[str], log: str) -> None:
        detail = f"\n  step: {step}" if step else ""
        detail += "".join(f"\n  | {line}" for line in tail)
        super().__init__(message + detail + f"\n  full log: {log}")
        self.step, self.tail, self.log = step, tail, log


def resolve_ca_bundle(value: str | None) -> str | None:
    """``auto`` (default): the host's system bundle if there is one; ``none``: no bundle."""
    if value in (None, "auto"):
        return next((p for p in SYSTEM_CA_BUNDLES if Path(p).is_file()), None)
    if value == "none":
        return None
    if not Path(value).is_file():
        raise UsageError(f"CA bundle {value!r} not found", "give a PEM file, `auto` or `none`")
    return value


def image_name(stack, target: str) -> str:
    return stack.image if target == "runtime" else stack.image.replace(":latest", ":devel")


def check_bases(stack, engine_name: str = "docker") -> None:
    """Refuse early when a local-only base image is missing, naming the command that makes it."""
    images = engines.of(engine_name)
    for ref in {stack.base.image, stack.base.runtime}:
        if images.image_exists(ref):
            continue
        if ref.startswith("imagekit/"):
            distro_suite = ref.split("/", 1)[1]
            if engine_name == "podman":
                raise ImagekitError(f"base image {ref} is not in Podman's image store",
                                    f"make it with `imagekit base {distro_suite} --engine podman`, or copy "
                                    f"Docker's: `docker save {ref} | podman load` (as the user who builds)")
            raise ImagekitError(f"base image {ref} is not in the local engine",
                                f"make it with `imagekit base {distro_suite}`")


@dataclass(frozen=True)
class BuildRequest:
    """How to build a stack's image: what ``imagekit build``'s options say, checked when made.

    The CLI builds one from its options and Python callers build one directly; ``build`` and
    ``pipeline.build_all`` read it and pass it on whole, so a new build option touches this class
    and the CLI only. A bad target, engine or CA bundle is refused here, before anything is rendered.
    """

    target: str = "runtime"
    tags: tuple[str, ...] = ()                 # extra tags, after the image name and the stack's tags
    no_cache: bool = False
    ca_bundle: str | None = "auto"             # a PEM file, ``auto`` (the host's) or ``none``
    log_dir: Path = Path("build/logs")
    single_stage: bool = False                 # one (devel) stage: the target becomes devel
    cache_from: tuple[str, ...] = ()
    inline_cache: bool = False
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    engine_name: str = "docker"                # docker (BuildKit) or podman (Buildah, as the calling user)

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise UsageError(f"unknown target {self.target!r}", f"use one of: {', '.join(TARGETS)}")
        if self.engine_name not in ENGINES:
            raise UsageError(f"unknown engine {self.engine_name!r}", f"use one of: {', '.join(ENGINES)}")
        if self.engine_name == "podman" and (self.cache_from or self.inline_cache):
            raise UsageError("--cache-from and --inline-cache are BuildKit's registry cache",
                             "drop them with --engine podman: its layer cache is the local store")
        if self.ca_bundle not in (None, "auto", "none"):
            resolve_ca_bundle(self.ca_bundle)      # a missing file fails now, not after the base checks
        # Click and Python callers hand lists and strings; the request holds one spelling.
        object.__setattr__(self, "tags", tuple(self.tags))
        object.__setattr__(self, "cache_from", tuple(self.cache_from))
        object.__setattr__(self, "log_dir", Path(self.log_dir))
        object.__setattr__(self, "extra_labels", dict(self.extra_labels))
        if self.single_stage and self.target == "runtime":
            object.__setattr__(self, "target", "devel")


def build(stack, request: BuildRequest | None = None, *,
          progress: Callable[[str], None] | None = None) -> BuildResult:
    """Render and build ``stack`` as ``request`` says (default: the runtime image, with Docker);
    tag the result with its image name, the stack's tags and the request's tags."""
    request = request or BuildRequest()
    target, engine_name = request.target, request.engine_name
    images = engines.of(engine_name)
    progress = progress or (lambda _line: None)
    if engine_name == "podman":
        podman.preflight()   # subordinate ids and the tools, before anything is rendered or staged
    else:
        engine.client()
    check_bases(stack, engine_name)
    # A digest-pinned base whose tag names another image stops here (the Docker engine's copy, else the
    # registry; Podman's store is not asked).
    for note in base_pins.verify(stack, **({} if engine_name == "docker" else {"engine_digests": lambda _r: None})):
        progress(note)
    bundle = resolve_ca_bundle(request.ca_bundle)
    text = render.render(stack, "docker", single_stage=request.single_stage)
    digest = render.recipe_hash(text)
    labels = {**writer.build_labels(stack, target, digest), **request.extra_labels}

    log_dir = request.log_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{stack.name}-{target}.log"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="imagekit-build-") as ctx:
        staged = sources.stage(stack, ctx)  # a missing or altered mirror file stops here, before building
        if staged:
            progress(f"sources: {len(staged)} upstream files from the mirror {stack.mirror}, sha256 verified")
        (Path(ctx) / "Dockerfile").write_text(podman.dockerfile(text) if engine_name == "podman" else text)
        iidfile = Path(ctx) / "iid"
        if engine_name == "podman":
            cmd = podman.build_argv(ctx, str(Path(ctx) / "Dockerfile"), target=target,
                                    platform=PLATFORMS[stack.base.arch], iidfile=str(iidfile), labels=labels,
                                    no_cache=request.no_cache, secrets={render.CA_SECRET_ID: bundle} if bundle else {})
            steps, cached = _run_podman_build(cmd, log_path, progress)
        else:
            steps, cached = _docker_build(ctx, stack, request, iidfile, labels, bundle, log_path, progress)
        image_id = iidfile.read_text().strip()

    all_tags = [image_name(stack, target)]
    if target == "runtime":
        all_tags += list(stack.tags)
    all_tags += [t for t in request.tags if t not in all_tags]
    image = images.inspect(image_id)
    for tag in all_tags:
        images.tag(image.id, tag)
    return BuildResult(stack=stack.name, target=target, image_id=image.id, tags=all_tags,
                       seconds=round(time.monotonic() - started, 2), log=str(log_path),
                       recipe_sha256=digest, size_bytes=image.size,
                       steps=steps, cached_steps=cached, labels=labels, engine=engine_name)


def _docker_build(ctx: str, stack, request: BuildRequest, iidfile: Path, labels: dict[str, str],
                  bundle: str | None, log_path: Path, progress: Callable[[str], None]) -> tuple[int, int]:
    cmd = [engine.docker_cli(), "build", "--progress=plain", "--target", request.target,
           "--platform", PLATFORMS[stack.base.arch],
           "--iidfile", str(iidfile), "-f", str(Path(ctx) / "Dockerfile")]
    cmd += [a for k, v in sorted(labels.items()) for a in ("--label", f"{k}={v}")]
    if request.no_cache:
        cmd.append("--no-cache")
    for ref in request.cache_from:  # e.g. the previous CI image, pushed with inline cache
        cmd += ["--cache-from", ref]
    if request.inline_cache:
        cmd += ["--build-arg", "BUILDKIT_INLINE_CACHE=1"]
    if bundle:
        cmd += ["--secret", f"id={render.CA_SECRET_ID},src={bundle}"]
    cmd.append(ctx)
    return _run_build(cmd, log_path, progress)


def _run_build(cmd: list[str], log_path: Path, progress: Callable[[str], None]) -> tuple[int, int]:
    env = {**os.environ, "DOCKER_BUILDKIT": "1", "BUILDKIT_PROGRESS": "plain"}
    step_cmds: dict[str, str] = {}
    step_lines: dict[str, list[str]] = {}
    cached: set[str] = set()
    failed: tuple[str, str] | None = None
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                bufsize=1)
        try:
            for line in proc.stdout:
                log.write(line)
                line = line.rstrip("\n")
                step = _STEP.match(line)
                if step:
                    sid = step.group(1)
                    if sid not in step_cmds:
                        step_cmds[sid] = f"[{step['stage']} {step['n']}/{step['total']}] " + _MOUNT.sub("", step["cmd"])
                        progress(step_cmds[sid][:160])
                    continue
                err = _ERROR.match(line)
                if err and failed is None:
                    failed = (err.group(1), err.group(2))
                if line.startswith("#") and " CACHED" in line:
                    cached.add(line.split()[0][1:])
                if line.startswith("#"):
                    sid = line.split()[0][1:]
                    step_lines.setdefault(sid, []).append(line.split(" ", 1)[1] if " " in line else "")
            rc = proc.wait()
        except BaseException:
            procs.stop(proc)  # the docker CLI cancels the build on SIGTERM
            raise
    if rc != 0:
        if failed:
            sid, message = failed
            tail = [l for l in step_lines.get(sid, []) if not l.startswith("ERROR")][-12:]
            raise BuildError(f"build failed: {message}", step_cmds.get(sid), tail, str(log_path))
        tail = log_path.read_text().splitlines()[-12:]
        raise BuildError(f"docker build exited {rc}", None, tail, str(log_path))
    return len(step_cmds), len(cached & set(step_cmds))


def _run_podman_build(cmd: list[str], log_path: Path, progress: Callable[[str], None]) -> tuple[int, int]:
    """Run ``podman build``; its steps (FROM lines left out) and how many came from the cache.

    Podman prints each step's output below its ``STEP n/m:`` line; the step that failed is the
    last one started, and the ``Error:`` line says why.
    """
    stage_names: dict[str, str] = {}
    steps: list[str] = []
    step_lines: list[list[str]] = []
    cached = 0
    error: str | None = None
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                env=podman.build_env())
        try:
            for line in proc.stdout:
                log.write(line)
                line = line.rstrip("\n")
                step = _PODMAN_STEP.match(line)
                if step:
                    stage = step["stage"] or "1"
                    named = _PODMAN_FROM.match(step["cmd"])
                    if named:
                        stage_names[stage] = named["name"] or f"stage-{stage}"
                        progress(f"[{stage_names[stage]} {step['n']}/{step['total']}] {step['cmd']}"[:160])
                        continue
                    text = f"[{stage_names.get(stage, stage)} {step['n']}/{step['total']}] " + _MOUNT.sub("", step["cmd"])
                    steps.append(text)
                    step_lines.append([])
                    progress(text[:160])
                    continue
                if line.startswith("--> Using cache "):
                    cached += 1
                    continue
                if line.startswith("Error: ") and error is None:
                    error = line[len("Error: "):]
                    continue
                if step_lines and not line.startswith(("--> ", "[Warning] ")):
                    step_lines[-1].append(line)
            rc = proc.wait()
        except BaseException:
            procs.stop(proc)  # podman stops the build's container on SIGTERM
            raise
    if rc != 0:
        if error and steps:
            # 'building at STEP "RUN ...": while running runtime: exit status 100' -> the reason only
            reason = error.rsplit('": ', 1)[-1] if error.startswith("building at STEP") else error
            tail = [l for l in step_lines[-1] if l.strip()][-12:]
            raise BuildError(f"build failed: {reason}", steps[-1], tail, str(log_path))
        tail = log_path.read_text().splitlines()[-12:]
        raise BuildError(f"podman build exited {rc}", None, tail, str(log_path))
    return len(steps), cached
