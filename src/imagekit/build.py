"""Build a stack's image with the Docker engine's BuildKit, or with (rootless) Podman.

The recipe is rendered in-process and fed to Debian's docker CLI (BuildKit
built in) with ``--progress=plain``: each step is shown in its stage's order
as it finishes (``cached``, its time, or ``FAILED``; a long one also as it
starts), the full log goes to a file, and a failed step is reported with its
command and its last lines. The image is tagged only after the build succeeded (the build
itself writes an ID file, not a tag), so an interrupted build leaves no
half-tagged image.

``engine_name="podman"`` runs ``podman build`` (Buildah) as the calling user instead
(:mod:`imagekit.engines.podman`): the same recipe, labels, secret and tags; its ``STEP n/m:``
lines are parsed for progress and the failed step. What differs is in docs/build.md. The engine
(:class:`imagekit.engines.Engine`) gives the command line; this module reads its output.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from imagekit import base_pins, engines, render, sources
from imagekit.engines.image import BuildCommand
from imagekit.util import emulation, platforms, procs
from imagekit.util.ticker import Ticker
from imagekit.util.errors import ImagekitError, UsageError
from imagekit.image_facts import writer

TARGETS = ("runtime", "devel")
# The stack's arch decides the platform: a build on another arch's host must not silently take
# the host's manifest of a multi-arch base image.
PLATFORMS = {arch: str(platforms.of_arch(arch)) for arch in platforms.ARCHES}
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
    """Refuse early when a local-only base image is missing, naming the command that makes it, or
    is of another architecture than the stack builds for (a local image has one platform: BuildKit
    would look for the stack's in a registry)."""
    images = engines.of(engine_name)
    for ref in sorted({stack.base.image, stack.base.runtime}):
        if not ref.startswith("imagekit/"):
            continue        # a registry's image: the build's --platform picks from its index
        want = platforms.oci_name(stack.base.arch)
        made_by = "imagekit base " + ref.split("/", 1)[1].removesuffix(platforms.tag_suffix(stack.base.arch)) \
            + (f" --arch {want}" if platforms.tag_suffix(stack.base.arch) else "")
        if not images.image_exists(ref):
            copy = images.copy_hint(ref)
            raise ImagekitError(f"base image {ref} is not in {images.store}",
                                f"make it with `{images.command(made_by)}`" + (
                                    f", or copy Docker's: `{copy}` (as the user who builds)" if copy else ""))
        have = platforms.oci_name(images.inspect(ref).attrs.get("Architecture") or want)
        if have != want:
            raise ImagekitError(f"base image {ref} is a linux/{have} image, and {stack.name} builds for "
                                f"linux/{want}", f"make it again with `{made_by} --force`")


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
    # The engine ``engine_name`` names, resolved once when the request is made.
    engine: engines.Engine = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise UsageError(f"unknown target {self.target!r}", f"use one of: {', '.join(TARGETS)}")
        object.__setattr__(self, "engine", engines.of(self.engine_name))
        if not self.engine.registry_cache and (self.cache_from or self.inline_cache):
            raise UsageError("--cache-from and --inline-cache are BuildKit's registry cache",
                             f"drop them with --engine {self.engine.name}: its layer cache is the local store")
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
    target, images = request.target, request.engine
    progress = progress or (lambda _line: None)
    images.preflight()   # an engine that answers (Podman: subordinate ids), before anything is rendered or staged
    # Another architecture's RUN steps run through QEMU: a missing binfmt registration is one error
    # now, not "exec format error" at the first RUN.
    emulation.require(stack.base.arch, f"building {stack.name} for {stack.platform}")
    check_bases(stack, images.name)
    # A digest-pinned base whose tag names another image stops here (the engine's copy of the tag, else
    # the registry).
    for note in base_pins.verify(stack, images):
        progress(note)
    bundle = resolve_ca_bundle(request.ca_bundle)
    text = render.render(stack, "docker", single_stage=request.single_stage)
    digest = render.recipe_hash(text)
    labels = {**writer.build_labels(stack, target, digest), **request.extra_labels}

    log_dir = request.log_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    # Per arch: the arm64 build of a stack never writes over its amd64 build's log.
    log_path = log_dir / f"{stack.name}{platforms.tag_suffix(stack.base.arch)}-{target}.log"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="imagekit-build-") as ctx:
        staged = sources.stage(stack, ctx)  # a missing or altered mirror file stops here, before building
        if staged:
            progress(f"sources: {len(staged)} upstream files from the mirror {stack.mirror}, sha256 verified")
        dockerfile = images.dockerfile(text)
        (Path(ctx) / "Dockerfile").write_text(dockerfile)
        iidfile = Path(ctx) / "iid"
        cmd = images.build_argv(build_command(ctx, stack, request, iidfile, labels, bundle))
        steps, cached = _READERS[images.build_log](cmd, log_path, progress, images.build_env(),
                                                   totals=stage_totals(dockerfile))
        image_id = iidfile.read_text().strip()

    all_tags = [image_name(stack, target)]
    if target == "runtime":
        all_tags += list(stack.tags)
    # Extra tags carry the arch as the image's own do (an arm64 build never takes an amd64 tag).
    all_tags += [t for t in (platforms.local_tag(t, stack.base.arch) for t in request.tags) if t not in all_tags]
    image = images.inspect(image_id)
    for tag in all_tags:
        images.tag(image.id, tag)
    return BuildResult(stack=stack.name, target=target, image_id=image.id, tags=all_tags,
                       seconds=round(time.monotonic() - started, 2), log=str(log_path),
                       recipe_sha256=digest, size_bytes=image.size,
                       steps=steps, cached_steps=cached, labels=labels, engine=images.name)


def build_command(ctx: str, stack, request: BuildRequest, iidfile: Path, labels: dict[str, str],
                  bundle: str | None) -> BuildCommand:
    """The build of ``stack`` as ``request`` asks, in the context ``ctx``, for whichever engine runs it."""
    return BuildCommand(ctx, str(Path(ctx) / "Dockerfile"), target=request.target,
                        platform=PLATFORMS[stack.base.arch], iidfile=str(iidfile), labels=labels,
                        no_cache=request.no_cache, secrets={render.CA_SECRET_ID: bundle} if bundle else {},
                        cache_from=request.cache_from, inline_cache=request.inline_cache)


# The instructions BuildKit counts as a stage's steps (ENV, LABEL, ARG and the like change only metadata).
_COUNTED = ("FROM", "RUN", "COPY", "ADD", "WORKDIR")


def stage_totals(dockerfile: str) -> dict[str, int]:
    """Each named stage's step count, from the Dockerfile itself. BuildKit's own ``[stage n/total]`` takes
    a step's name from whichever build first made it, so a step another build shares (the common FROM,
    the apt setup) carried that build's total: ``[devel 2/27]`` then ``[devel 3/17]`` (review 4)."""
    totals: dict[str, int] = {}
    stage = None
    for line in re.sub(r"\\\n", " ", dockerfile).splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        word = words[0].upper()
        if word == "FROM":
            stage = words[3] if len(words) >= 4 and words[2].upper() == "AS" else str(len(totals))
            totals[stage] = 0
        if stage is not None and word in _COUNTED:
            totals[stage] += 1
    return totals


_OUTPUT = re.compile(r"^#(\d+) \d+\.\d+ ")   # a running step's output: "#8 0.512 cc -O2 -c ring.c"
_DONE = re.compile(r"^#(\d+) (?:DONE (?P<secs>[\d.]+)s|(?P<cached>CACHED)|(?P<canceled>CANCELED))$")


class _Steps:
    """BuildKit's steps, shown in each stage's order, each once finished: ``cached``, its time,
    ``FAILED`` or ``canceled``. BuildKit runs stages side by side and prints their lines interleaved,
    and prints cached steps in no order at all (a cached build's last step may come first), so a
    step's start line says little about what is done. The step a stage is waiting on is shown once
    (``...``) when it has run for ``ANNOUNCE_AFTER`` seconds and the build prints anything, so that
    a long compile is not silent.

    A stage may never print some of its numbers: both stages start FROM the same image, and BuildKit
    runs (and names) that step once, for one of them. A gap is passed over once a later step of the
    stage is seen running (a stage's steps run one after the other, so the gap's step is done), and
    at the end of the build."""

    ANNOUNCE_AFTER = 3.0
    # A step that runs long says so this often, output or not: a compile that prints nothing for
    # minutes must not look like a hang.
    HEARTBEAT = 5.0

    def __init__(self, progress: Callable[[str], None], totals: Mapping[str, int] | None = None) -> None:
        self.progress = self._said(progress)
        self.totals = dict(totals or {})
        self.steps: dict[str, dict] = {}                 # BuildKit's vertex id -> the step
        self.stages: dict[str, dict[int, dict]] = {}     # stage -> its steps by number
        self.next: dict[str, int] = {}                   # stage -> the number it shows next
        self.last_said = time.monotonic()
        self.lock = threading.Lock()                     # the heartbeat thread and the reader both print

    def _said(self, progress: Callable[[str], None]) -> Callable[[str], None]:
        def say(line: str) -> None:
            self.last_said = time.monotonic()
            progress(line)
        return say

    def heartbeat(self, now: float) -> None:
        """Every HEARTBEAT seconds with nothing shown: the steps running now, with how long they have run."""
        with self.lock:
            if now - self.last_said < self.HEARTBEAT:
                return
            running = [s for stage, steps in self.stages.items() for n, s in sorted(steps.items())
                       if s["state"] is None and n >= self.next[stage]][:2]
            if running:
                self.progress("; ".join(f"{self.head(s)} running {now - s['since']:.0f} s  {s['text']}"[:120]
                                        for s in running))
                self.last_said = now

    def started(self, sid: str, stage: str, n: int, total: int, text: str) -> None:
        if sid in self.steps:   # BuildKit repeats a step's line when its output resumes
            return
        step = {"stage": stage, "n": n, "total": total, "text": text, "state": None, "announced": False,
                "since": time.monotonic()}
        with self.lock:
            self.steps[sid] = step
            self.stages.setdefault(stage, {})[n] = step
            self.next.setdefault(stage, 1)
            self._flush()

    def finished(self, sid: str, state: str) -> None:
        with self.lock:
            step = self.steps.get(sid)
            if step is not None and step["state"] is None:
                step["state"] = state
                self._flush()

    def ran(self, sid: str) -> None:
        """The step printed output: it runs (a cached step prints none)."""
        step = self.steps.get(sid)
        if step is not None:
            step["ran"] = True

    def tick(self) -> None:
        with self.lock:
            self._flush()

    def close(self) -> None:
        """The build ended: show what finished, in order, past any gap."""
        with self.lock:
            self._flush(final=True)

    def head(self, step: dict) -> str:
        total = max(self.totals.get(step["stage"], step["total"]), step["n"])
        return f"[{step['stage']} {step['n']}/{total}]"

    def _show(self, step: dict) -> None:
        step["shown"] = True
        self.progress(f"{self.head(step)} {step['state']:<8} {step['text']}"[:160])

    def _flush(self, final: bool = False) -> None:
        for stage, steps in self.stages.items():
            for step in steps.values():   # one printed after its stage had moved past it: shown late
                if step["n"] < self.next[stage] and step["state"] is not None and not step.get("shown"):
                    self._show(step)
            top = max(steps)
            while self.next[stage] <= top:
                step = steps.get(self.next[stage])
                if step is None:
                    # Skipped over only where a later step ran (not merely cached: cached steps come
                    # in any order, and a step's line does not say which it will be) or the build is over.
                    if final or any(s.get("ran") or s["state"] not in (None, "cached")
                                    for n, s in steps.items() if n > self.next[stage]):
                        self.next[stage] += 1
                        continue
                    break
                if step["state"] is None:
                    if final:
                        self.next[stage] += 1
                        continue
                    if not step["announced"] and time.monotonic() - step["since"] >= self.ANNOUNCE_AFTER:
                        step["announced"] = True
                        self.progress(f"{self.head(step)} ...      {step['text']}"[:160])
                    break
                self._show(step)
                self.next[stage] += 1


def _run_build(cmd: list[str], log_path: Path, progress: Callable[[str], None],
               env: Mapping[str, str] | None = None, totals: Mapping[str, int] | None = None) -> tuple[int, int]:
    """Run a BuildKit build (``cmd``, with ``--progress=plain``), its log to ``log_path`` and its
    steps to ``progress`` as :class:`_Steps` orders them.
    Returns how many steps ran and how many came from the cache; a failed build raises BuildError."""
    env = dict(os.environ if env is None else env)
    step_cmds: dict[str, str] = {}
    step_lines: dict[str, list[str]] = {}
    cached: set[str] = set()
    failed: tuple[str, str] | None = None
    shown = _Steps(progress, totals)
    # BuildKit prints nothing while a quiet step runs, and the reader waits on its next line: the ticker
    # lets the steps say what runs.
    with open(log_path, "w") as log, Ticker(shown.heartbeat, name="imagekit-build-heartbeat"):
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
                        step_cmds[sid] = _MOUNT.sub("", step["cmd"])
                        shown.started(sid, step["stage"], int(step["n"]), int(step["total"]), step_cmds[sid])
                    continue
                err = _ERROR.match(line)
                if err and failed is None:
                    failed = (err.group(1), err.group(2))
                    shown.finished(err.group(1), "FAILED")
                done = _DONE.match(line)
                if done:
                    shown.finished(done.group(1), "cached" if done["cached"] else "canceled" if done["canceled"]
                                   else f"{float(done['secs']):.1f} s")
                if line.startswith("#") and " CACHED" in line:
                    cached.add(line.split()[0][1:])
                output = _OUTPUT.match(line)
                if output:
                    shown.ran(output.group(1))
                shown.tick()
                if line.startswith("#"):
                    sid = line.split()[0][1:]
                    step_lines.setdefault(sid, []).append(line.split(" ", 1)[1] if " " in line else "")
            rc = proc.wait()
            shown.close()
        except BaseException:
            procs.stop(proc)  # the docker CLI cancels the build on SIGTERM
            raise
    if rc != 0:
        if failed:
            sid, message = failed
            tail = [l for l in step_lines.get(sid, []) if not l.startswith("ERROR")][-12:]
            step_text = f"{shown.head(shown.steps[sid])} {step_cmds[sid]}" if sid in step_cmds else None
            raise BuildError(f"build failed: {message}", step_text, tail, str(log_path))
        tail = log_path.read_text().splitlines()[-12:]
        raise BuildError(f"docker build exited {rc}", None, tail, str(log_path))
    return len(step_cmds), len(cached & set(step_cmds))


def _run_podman_build(cmd: list[str], log_path: Path, progress: Callable[[str], None],
                      env: Mapping[str, str] | None = None, totals: Mapping[str, int] | None = None
                      ) -> tuple[int, int]:
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
                                env=dict(os.environ if env is None else env))
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


# How each build tool's output is read, by the dialect the engine names (Engine.build_log).
_READERS: dict[str, Callable[..., tuple[int, int]]] = {"buildkit": _run_build, "buildah": _run_podman_build}
