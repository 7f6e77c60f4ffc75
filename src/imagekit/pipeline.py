"""The chained stages for one stack file: build -> check -> export, per matrix variant."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import datetime as dt

from imagekit import package_check, sources
from imagekit.util import atomic
from imagekit import build as build_mod
from imagekit import checks
from imagekit import stack as stack_mod
from imagekit.build import BuildRequest
from imagekit.checks import runner
from imagekit.attest import keys as keys_mod
from imagekit.attest.provenance import BuildRun
from imagekit.util.errors import ImagekitError
from imagekit.export import ExportRequest, export_image, formats, signing
from imagekit.export.image_source import open_source
from imagekit.util.platforms import Platform, buildable, tag_suffix
from imagekit.util.platforms import parse as parse_platform
from imagekit.util.settings import Site

if TYPE_CHECKING:
    from imagekit.export import StoreChoice


@dataclass(frozen=True)
class PipelineRequest:
    """``imagekit build``'s whole ask: which stack, how to build it, whether to check, what to export.

    ``exports`` are ExportRequests, or format names (each then exported with its defaults); each
    goes to ``output_dir``/STACK.SUFFIX, replacing what is there. ``store``: as ``export_image``
    takes it (False: convert straight to the outputs). Checked when made: ``--export enrot`` or a
    bad preset must not cost a build and the checks. ``platforms``: build for each of these
    (``linux/arm64`` ...; default: the stack's own choice, this machine's arch where offered);
    a platform the stack does not offer fails before anything is built. ``site``: where the stack, its
    parents, site components and the site's pins are found (the CLI's --stacks-dir, --site and environment).
    """

    ref: str
    variant: str | None = None
    mirror: str | None = None
    platforms: tuple[Platform, ...] = ()
    build: BuildRequest = field(default_factory=BuildRequest)
    check: bool = False
    exports: tuple[ExportRequest, ...] = ()
    output_dir: Path = Path("out")
    store: "StoreChoice" = None
    sign: Path | None = None        # a site key: SBOM + provenance of the image and each export, signed
    # Look up the stack's distro packages in its base's archive before building (package_check).
    check_packages: bool = True
    site: Site = field(default_factory=Site.from_env)

    def __post_init__(self) -> None:
        exports = tuple(e if isinstance(e, ExportRequest) else ExportRequest(e, force=True) for e in self.exports)
        object.__setattr__(self, "exports", exports)
        object.__setattr__(self, "output_dir", Path(self.output_dir))
        chosen = tuple(p if isinstance(p, Platform) else parse_platform(p) for p in self.platforms)
        for one in chosen:
            buildable(one)
        object.__setattr__(self, "platforms", tuple(dict.fromkeys(chosen)))


def build_all(request: PipelineRequest, *, progress: Callable[[str], None] | None = None,
              export_progress: Callable[[], Callable[[int, bool], None]] | None = None,
              log: Callable[[str], None] = lambda _m: None) -> list[dict]:
    """Build every variant of ``request.ref`` (or one), then check and export each as asked.

    The engine (``request.build.engine_name``: docker's BuildKit or the user's Podman) also runs
    the checks, and the exports read the image from its store.
    """
    build, images = request.build, request.build.engine
    key = keys_mod.load_private(request.sign) if request.sign else None   # a bad key costs no build
    path, implied = stack_mod.find(request.ref, request.site)
    variant = request.variant or implied
    # Every platform resolved first: one it does not offer (or a component that does not build
    # there) fails before the first build starts.
    stacks = []
    for platform in request.platforms or (None,):
        stacks += [stack_mod.load(path, variant, platform=platform, site=request.site)] if variant else \
            stack_mod.load_all(path, platform, request.site)
    if request.mirror:
        for one in stacks:
            one.mirror = sources.resolve_mirror(one.file, None, request.mirror)
    if build.tags and len({one.name for one in stacks}) > 1:
        raise ImagekitError("--tag with several matrix variants would give them all the same tag",
                            "add --variant NAME, or use {placeholders} in the stack's tags")
    images.preflight()   # an engine that answers (Podman: the user's subordinate ids) before anything starts
    if request.exports:      # an output directory that cannot be written must not cost a build
        atomic.writable_dir(request.output_dir, f"the exports (-o {request.output_dir})", create=True)
    checked = {}
    if request.check_packages:   # every variant before any build: a typo must not cost the first build
        for stack in stacks:
            checked[stack.name] = _check_packages(stack, images.name, log)
    results = []
    for stack in stacks:
        log(f"building {stack.name} ({build.target})")
        result = build_mod.build(stack, build, progress=progress)
        log(f"built {result.tags[0]} in {result.seconds:.1f} s ({result.cached_steps}/{result.steps} "
            f"steps cached)")
        entry = {"stack": stack.name, "build": result.as_dict()}
        entry["build"].pop("labels", None)
        if stack.name in checked:
            entry["packages"] = checked[stack.name]
        image = result.tags[0]
        # What is signed is the image just built (pinned): a tag another build moves meanwhile would be misnamed.
        source = images.export_source(image, result.image_id, pinned=key is not None)
        described = None
        if key is not None:
            finished = dt.datetime.now(dt.timezone.utc)
            run = BuildRun(engine=images.version(),
                           started=(finished - dt.timedelta(seconds=result.seconds)).isoformat(timespec="seconds"),
                           finished=finished.isoformat(timespec="seconds"))
            described = signing.describe(open_source(source), run=run, log=log)
            signed = signing.sign_engine_image(open_source(source), key, described=described)
            entry["signed"] = signed.as_dict()
            log(f"signed {image} ({key.key.keyid}): SBOM and provenance in {signed.bundle}")
        if request.check:
            report = runner.run(image, checks.stack_checks(stack, build.target), engine_name=images.name,
                                progress=log)
            entry["check"] = report.as_dict()
            counts = report.counts()
            log(f"checked {image}: {counts['passed']} passed, {counts['failed']} failed, "
                f"{counts['not-run']} not run")
            if not report.ok:
                for o in report.failed:
                    log(f"  FAIL {o.id}: {o.detail.splitlines()[0] if o.detail else o.describe}")
                results.append(entry)
                again = images.command(f"imagekit check {image}")
                raise ImagekitError(f"checks failed for {image}; nothing exported", f"see `{again}`")
        if request.exports:
            entry["exports"] = []
            request.output_dir.mkdir(parents=True, exist_ok=True)
            for export in request.exports:
                # Per arch: the arm64 export never replaces the amd64 one (debian-mpi-arm64.sqsh).
                out = request.output_dir / f"{stack.name}{tag_suffix(stack.base.arch)}" \
                    f"{formats.get(export.format).suffix}"
                log(f"exporting {image} -> {out}")
                exported = export_image(source, export, out, store=request.store,
                                        progress=export_progress() if export_progress else None,
                                        for_signing=key is not None)
                made = exported.as_dict()
                if key is not None and described is not None:
                    signed = signing.sign_export(exported, key, described, log=log)
                    made.update(signed=signed.as_dict(), sha256=signed.subjects[-1].sha256,
                                bytes=out.stat().st_size)
                entry["exports"].append(made)
        results.append(entry)
    return results


def _check_packages(stack, engine_name: str, log: Callable[[str], None]) -> dict:
    found = package_check.check(stack, engine_name=engine_name, log=log)
    for note in found.notes:
        log(f"packages: {note}")
    if found.checked:
        log(f"packages: {len(found.checked)} found in {'; '.join(dict.fromkeys(found.archives))}")
    if found.reason:
        log(f"packages: {found.reason}")
    return {"checked": found.checked, "not_checked": found.reason or None}
