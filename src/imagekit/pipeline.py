"""The chained stages for one stack file: build -> check -> export, per matrix variant."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from imagekit import podman, sources
from imagekit import build as build_mod
from imagekit import check as check_mod
from imagekit import stack as stack_mod
from imagekit.errors import ImagekitError
from imagekit.export import export_image, formats
from imagekit.export.image_source import PODMAN


def build_all(ref: str, *, variant: str | None = None, target: str = "runtime", single_stage: bool = False,
              tags: tuple = (), no_cache: bool = False, ca_bundle: str | None = "auto",
              log_dir: str = "build/logs", run_checks: bool = False, cache_from: tuple = (),
              inline_cache: bool = False, exports: list[str] = (), mirror: str | None = None,
              output_dir: str = "out", store: str | None = None, use_store: bool = True,
              progress: Callable[[str], None] | None = None,
              export_progress: Callable[[], Callable[[int, bool], None]] | None = None,
              log: Callable[[str], None] = lambda _m: None, engine_name: str = "docker") -> list[dict]:
    """Build every variant of ``ref`` (or one), then check and export each as asked.

    ``engine_name``: ``docker`` (BuildKit) or ``podman`` (the calling user's Podman); the checks
    run in a container of that engine and the exports read the image from its store.

    Exports go through the export store (``store``: a directory, None for the default)
    unless ``use_store`` is false, as ``imagekit export`` does.
    """
    for fmt in exports:        # refused before any build: `--export enrot` must not cost a build and the checks
        formats.get(fmt)
    path, implied = stack_mod.find(ref)
    variant = variant or implied
    stacks = [stack_mod.load(path, variant)] if variant else stack_mod.load_all(path)
    if mirror:
        for one in stacks:
            one.mirror = sources.resolve_mirror(one.file, None, mirror)
    if tags and len(stacks) > 1:
        raise ImagekitError("--tag with several matrix variants would give them all the same tag",
                            "add --variant NAME, or use {placeholders} in the stack's tags")
    if engine_name == "podman":
        podman.preflight()   # the user's subordinate ids: one error before anything starts
    results = []
    for stack in stacks:
        log(f"building {stack.name} ({target})")
        result = build_mod.build(stack, target=target, tags=tags, no_cache=no_cache, ca_bundle=ca_bundle,
                                 log_dir=log_dir, single_stage=single_stage, progress=progress,
                                 cache_from=tuple(cache_from), inline_cache=inline_cache,
                                 engine_name=engine_name)
        log(f"built {result.tags[0]} in {result.seconds:.1f} s ({result.cached_steps}/{result.steps} "
            f"steps cached)")
        entry = {"stack": stack.name, "build": result.as_dict()}
        entry["build"].pop("labels", None)
        image = result.tags[0]
        if run_checks:
            report = check_mod.run(image, check_mod.stack_checks(stack, target), engine_name=engine_name)
            entry["check"] = report.as_dict()
            counts = report.counts()
            log(f"checked {image}: {counts['passed']} passed, {counts['failed']} failed, "
                f"{counts['not-run']} not run")
            if not report.ok:
                for o in report.failed:
                    log(f"  FAIL {o.id}: {o.detail.splitlines()[0] if o.detail else o.describe}")
                results.append(entry)
                again = f"imagekit check {image}" + (" --engine podman" if engine_name == "podman" else "")
                raise ImagekitError(f"checks failed for {image}; nothing exported", f"see `{again}`")
        if exports:
            # Podman's image is read from the user's store (skopeo's containers-storage: form).
            source = f"{PODMAN}{image}" if engine_name == "podman" else image

            entry["exports"] = []
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            for fmt in exports:
                out = Path(output_dir) / f"{stack.name}{formats.get(fmt).suffix}"
                log(f"exporting {image} -> {out}")
                entry["exports"].append(_as_dict(export_image(
                    source, fmt, str(out), force=True, store=store, use_store=use_store,
                    progress=export_progress() if export_progress else None)))
        results.append(entry)
    return results


def _as_dict(value) -> dict:
    if hasattr(value, "as_dict"):
        return value.as_dict()
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(value)
    return dict(value) if isinstance(value, dict) else {"result": str(value)}
