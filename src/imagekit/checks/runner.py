"""Run a stack's checks against a container of an image with pytest-testinfra.

Each component brings its checks; the stack file may add more; every image
also gets the no-secrets checks. The checks travel with the image (label
``io.imagekit.checks``), so ``imagekit check IMAGE`` needs no stack file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from imagekit import engines, export, image_facts
from imagekit.util import emulation, ledger, own_python
from imagekit.util.ticker import Ticker
from imagekit import checks as checks_mod
from imagekit.util.atomic import target
from imagekit.checks import runtimes
from imagekit.util.errors import EngineError, ImagekitError, NotFoundError, UsageError
from imagekit.image_facts import is_file_image, layered, reader

MODULE = Path(__file__).parents[1] / "data" / "testinfra_checks.py"
# Hardware a check may need; what offering it to a container means is each engine's (Engine.devices).
HARDWARE = ("gpu", "fabric")


@dataclass
class Outcome:
    id: str
    describe: str
    status: str            # passed | failed | not-run
    detail: str = ""


@dataclass
class Report:
    image: str
    outcomes: list[Outcome] = field(default_factory=list)
    junit: str | None = None
    notes: list[str] = field(default_factory=list)   # what may explain a failure, said once

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failed and any(o.status == "passed" for o in self.outcomes)

    def counts(self) -> dict[str, int]:
        out = {"passed": 0, "failed": 0, "not-run": 0}
        for o in self.outcomes:
            out[o.status] += 1
        return out

    def as_dict(self) -> dict:
        return {"image": self.image, "ok": self.ok, "counts": self.counts(), "junit": self.junit,
                "notes": self.notes, "checks": [asdict(o) for o in self.outcomes]}


def checks_from_image(image: str, engine_name: str = "docker") -> list[dict]:
    """The checks the image's label carries, as JSON objects; each is refused here, naming the image,
    if no kind reads it (the label is the image builder's text). ``image`` is any form
    :func:`imagekit.image_facts.reader.read` reads: an engine image, a file, a registry reference."""
    return _label_checks(image, reader.read(image, engine_name=engine_name))


def _label_checks(image: str, facts) -> list[dict]:
    specs = facts.checks
    if facts.labels is None and is_file_image(image) and not layered.is_layered(image) and not os.path.exists(image):
        raise NotFoundError(f"{image} does not exist", "give the path of a .sqsh or .sif file, a registry "
                            "reference (docker://REGISTRY/REPO:TAG) or an engine image")
    if not specs:
        raise UsageError(f"image {image} carries no imagekit checks (label {image_facts.CHECKS})",
                         "give the stack: `imagekit check STACK --image IMAGE`")
    for spec in specs:
        try:
            checks_mod.from_dict(spec)
        except checks_mod.InvalidCheck as exc:
            raise UsageError(f"image {image}: label {image_facts.CHECKS}: {exc.message}", exc.hint) from None
    return specs


def run(image: str, checks: list, *, junit: str | None = None, with_: tuple[str, ...] = (),
        assume: tuple[str, ...] = (), engine_name: str = "docker",
        progress: Callable[[str], None] | None = None) -> Report:
    """Start a container of ``image``, run ``checks`` in it with testinfra, remove the container.

    ``with_`` offers hardware to the container (``--gpus all``, ``/dev/infiniband``) and runs the
    checks that need it; ``assume`` runs those checks without adding flags, for hosts whose
    default runtime already injects the devices (e.g. the nvidia runtime as Docker's default).
    ``engine_name="podman"``: the image is in the calling user's Podman store; the container is
    Podman's, and testinfra reaches it with its ``podman://`` backend.
    """
    # Read (and so validated) before any container starts: the JSON the testinfra module gets is
    # what the kinds write, whatever the caller passed.
    specs = [(c if isinstance(c, checks_mod.Check) else checks_mod.from_dict(c)).as_dict() for c in checks]
    for hw in (*with_, *assume):
        if hw not in HARDWARE:
            raise UsageError(f"unknown hardware {hw!r}", f"use one of: {', '.join(HARDWARE)}")
    images = engines.of(engine_name)
    found = images.inspect(image)  # a clear error when the image is not there
    # An arm64 image on an x86 machine runs through QEMU: without it every check would fail with
    # "exec format error", so say that once instead.
    arch = found.attrs.get("Architecture")
    if arch:
        emulation.require(arch, f"checking {image}")
    cpuinfo, notes = _emulated_cpu(images, image, arch)
    image_id = found.id
    cli = images.cli()
    options = ["--network", "none", *(a for hw in with_ for a in images.devices[hw])]
    with tempfile.TemporaryDirectory(prefix="imagekit-cpuinfo-") as tmp:
        if cpuinfo is not None:
            given = Path(tmp) / "cpuinfo"
            given.write_text(cpuinfo)
            options += ["-v", f"{given}:/proc/cpuinfo:ro"]
        with images.throwaway(image, options=options, idle=True, purpose="check") as container:
            report = _run_in(container, image, specs, cli, junit=junit, with_=with_, assume=assume,
                             image_id=image_id, backend=images.testinfra_backend, progress=progress)
    report.notes.extend(notes)
    return report


def _emulated_cpu(images: engines.Engine, image: str, arch: str | None) -> tuple[str | None, list[str]]:
    """For an image that runs here through QEMU, whose programs would read the host's /proc/cpuinfo
    (QEMU before 8.2): the arm64 one its check container gets instead, and the note that says so.
    A program that picks its code from that file can crash on the host's (`import torch` does), and
    a check that crashes shows only a signal."""
    if not arch or not emulation.emulated(arch):
        return None, []
    try:
        done = images.run_once(image, ["cat", "/proc/cpuinfo"], timeout=300)
    except EngineError:
        return None, []      # the checks themselves will say what is wrong with starting it
    if done.returncode != 0 or not done.stdout.strip():
        return None, []      # no cat in the image: nothing is known
    wrong = emulation.hidden_cpu(arch, done.stdout)
    if wrong is None:
        return None, []
    return emulation.arm64_cpuinfo(os.cpu_count() or 1), [
        f"{image} runs here under emulation, but {wrong}; its check container reads an Arm Neoverse N1's "
        f"/proc/cpuinfo instead (bind-mounted); {emulation.OLD_QEMU_FIX}"]


@dataclass(frozen=True)
class CheckRun:
    """How a check run reports and what it may use: the JUnit file to write, the hardware offered to
    the container (``with_``) and the hardware taken as there without a check (``assume``), and where
    it says how far it is (``progress``, a line at a time; see :class:`_Pace`)."""

    junit: str | None = None
    with_: tuple[str, ...] = ()
    assume: tuple[str, ...] = ()
    progress: Callable[[str], None] | None = None


# pytest -v's line for a finished check: "test_imagekit_checks.py::test_check[mpi4py-ring] PASSED [ 40%]".
_RESULT = re.compile(r"::test_check\[(?P<id>.+?)\] (?P<status>PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")


class _Pace:
    """How far a check run is, said every ``EVERY`` seconds while it runs (a minute of checks printed
    nothing, review 4): how many are done and failed, and which runs now and for how long. The checks
    run in the order of ``ids`` (pytest's parametrize order), so the next one is the one that runs."""

    EVERY = 5.0

    def __init__(self, ids: list[str], say: Callable[[str], None]) -> None:
        self.ids, self.say = ids, say
        self.done = self.failed = 0
        self.started = self.since = self.last = time.monotonic()
        self.lock = threading.Lock()

    def finished(self, line: str) -> None:
        m = _RESULT.search(line)
        if m is None:
            return
        with self.lock:
            self.done += 1
            self.failed += m["status"] in ("FAILED", "ERROR")
            self.since = time.monotonic()

    def tick(self, now: float) -> None:
        with self.lock:
            if now - self.last < self.EVERY:
                return
            self.last = now
            running = (f"; running {self.ids[self.done]} ({now - self.since:.0f} s)"
                       if self.done < len(self.ids) else "")
            self.say(f"checks: {self.done} of {len(self.ids)} done, {self.failed} failed{running}")


def run_ref(ref: str, how: CheckRun = CheckRun(), *, runtime: str | None = None, engine_name: str = "docker",
            log: Callable[[str], None] = lambda _m: None) -> Report:
    """The checks an image's label carries, run wherever the image is: a container of an engine
    image, or with no engine a ``.sqsh``/``.sif`` under Enroot or Apptainer; a registry reference,
    an OCI layout or a ``docker save`` tarball is exported to an Enroot file first (through the
    export store: a second check of the same image converts nothing)."""
    junit, with_, assume, progress = how.junit, how.with_, how.assume, how.progress
    specs = checks_from_image(ref, engine_name)
    images = engines.of(engine_name)
    if is_file_image(ref) and not layered.is_layered(ref):
        return run_file(ref, specs, runtime=runtime, junit=junit, with_=with_, assume=assume, progress=progress)
    source = ref
    if not layered.is_layered(ref):
        if runtime is None and (images.available() or not layered.looks_like_registry(ref)):
            return run(ref, specs, junit=junit, with_=with_, assume=assume, engine_name=engine_name,
                       progress=progress)
        if runtime is not None and images.available() and images.image_exists(ref):
            source = images.export_source(ref, ref)         # the engine's image, exported
        elif layered.looks_like_registry(ref):
            source = layered.registry_fallback(ref)         # no engine: from its registry
    with tempfile.TemporaryDirectory(prefix="imagekit-check-") as tmp:
        out = Path(tmp) / "image.sqsh"
        log(f"exporting {ref} to an Enroot squashfs to run its checks (kept in the export store)")
        export.export_image(source, export.ExportRequest("enroot"), out)
        report = run_file(out, specs, runtime=runtime, junit=junit, with_=with_, assume=assume, progress=progress)
    report.image = ref
    return report


def run_file(path: str | Path, checks: list, *, runtime: str | None = None, junit: str | None = None,
             with_: tuple[str, ...] = (), assume: tuple[str, ...] = (),
             progress: Callable[[str], None] | None = None) -> Report:
    """Run ``checks`` in a container of the image file ``path`` (.sqsh or .sif) under Enroot or
    Apptainer (:mod:`imagekit.checks.runtimes`; ``runtime`` None picks by the file): no engine."""
    specs = [(c if isinstance(c, checks_mod.Check) else checks_mod.from_dict(c)).as_dict() for c in checks]
    for hw in (*with_, *assume):
        if hw not in HARDWARE:
            raise UsageError(f"unknown hardware {hw!r}", f"use one of: {', '.join(HARDWARE)}")
    path = Path(path)
    chosen = runtimes.pick(path, runtime)
    with runtimes.container(path, chosen, gpu="gpu" in with_) as prefix:
        return _run_in(json.dumps(prefix), str(path), specs, "", junit=junit, with_=with_, assume=assume,
                       image_id=None, backend="exec", progress=progress)


def _run_in(container: str, image: str, specs: list[dict], cli: str, *, junit: str | None,
            with_: tuple[str, ...], assume: tuple[str, ...], image_id: str | None, backend: str = "docker",
            progress: Callable[[str], None] | None = None) -> Report:
    """Run the checks with testinfra in the running ``container`` (backend ``exec``: ``container``
    is the JSON command prefix of :mod:`imagekit.checks.runtimes`)."""
    workdir = Path(tempfile.mkdtemp(prefix="imagekit-check-"))
    try:
        checks_file = workdir / "checks.json"
        checks_file.write_text(json.dumps(specs))
        xml_path = workdir / "junit.xml"
        env = {**os.environ, "IMAGEKIT_CHECKS": str(checks_file), "IMAGEKIT_BACKEND": backend,
               "IMAGEKIT_WITH": ",".join((*with_, *assume)),
               **({"IMAGEKIT_EXEC": container} if backend == "exec" else
                  {"IMAGEKIT_CONTAINER": container, "PATH": f"{Path(cli).parent}:{os.environ.get('PATH', '')}"})}
        module = workdir / "test_imagekit_checks.py"
        shutil.copy(MODULE, module)
        # Isolated (imagekit.util.own_python): the module imports imagekit's check kinds from where
        # this imagekit came from, never from a PYTHONPATH or directory someone else can write.
        _pytest(own_python.argv("pytest", str(module), "-v", "-p", "no:cacheprovider", "--assert=plain",
                                "-o", "junit_family=xunit2", f"--junitxml={xml_path}", "--rootdir", str(workdir),
                                "-o", "addopts=", "-o", "testpaths="),
                workdir, own_python.environ(env), _Pace([s["id"] for s in specs], progress) if progress is not None else None)
        if not xml_path.exists():
            raise ImagekitError("the testinfra run produced no results", "run with a working pytest-testinfra")
        report = Report(image=image, outcomes=_outcomes(xml_path, specs))
        counts = report.counts()

        if image_id is not None:   # an engine image: `imagekit report` shows its last check
            ledger.add(image_id, "check", image=image, passed=counts["passed"],
                   failed=counts["failed"], not_run=counts["not-run"], with_=list(with_))
        if junit:
            with target(junit) as tmp:
                shutil.copy(xml_path, tmp)
            report.junit = junit
        return report
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _pytest(argv: list[str], cwd: Path, env: dict[str, str], pace: _Pace | None) -> None:
    """Run the testinfra module; each finished check's line tells ``pace``, which a thread lets speak
    while the next one runs. The results come from the JUnit file, not from these lines."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with Ticker(pace.tick if pace is not None else lambda _now: None, name="imagekit-check-pace"):
            for line in proc.stdout:
                if pace is not None:
                    pace.finished(line)
            proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def _outcomes(xml_path: Path, specs: list[dict]) -> list[Outcome]:
    by_id = {s["id"]: s for s in specs}
    out = []
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = case.get("name", "")
        cid = name[name.find("[") + 1:-1] if "[" in name else name
        spec = by_id.get(cid, {"describe": cid})
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            out.append(Outcome(cid, spec["describe"], "failed", _clean(_failure_text(failure))))
        elif skipped is not None:
            out.append(Outcome(cid, spec["describe"], "not-run", skipped.get("message", "")))
        else:
            out.append(Outcome(cid, spec["describe"], "passed"))
    return out


def _failure_text(failure: ET.Element) -> str:
    """The assertion's message: the "E " lines of the full report (the element text), since pytest
    >= 9.2 cuts the ``message`` attribute to 500 characters."""
    lines = [line[1:].strip() for line in (failure.text or "").splitlines() if line.startswith("E ")]
    return "\n".join(lines) or failure.get("message", "") or (failure.text or "")


def _clean(message: str) -> str:
    lines = [l for l in message.splitlines() if not l.startswith("assert ") and l.strip() != "assert False"]
    text = "\n".join(lines).strip()
    return text.split("\nassert ")[0] if text else message.strip()
