"""What is in an image: stack, components, versions, sizes per component, checks run, exports made.

Sizes per component come from aligning the image's history with the runtime
stage that imagekit renders for the stack named in the labels: each component
contributes a known number of instructions, in layer order. When the stack is
not available (an image built elsewhere) or the counts differ, layers are
listed without attribution rather than guessed.
"""

from __future__ import annotations

import os
import re

from imagekit import image_facts, render, stack
from imagekit.util import ledger
from imagekit.engines import docker as engine
from imagekit.util.errors import EngineError, NotFoundError
from imagekit.image_facts import layered, reader
from imagekit.util.settings import Site, site_or_env

_INSTRUCTION = re.compile(r"^(RUN|COPY|ADD|ENV|LABEL|WORKDIR|ARG|USER|ENTRYPOINT|CMD|VOLUME|EXPOSE|SHELL)\b",
                          re.M)


def describe(image: str, site: Site | None = None) -> dict:
    """What ``image`` holds: an engine image, an Enroot ``.sqsh``, a ``.sif``, or (with no engine) a
    registry reference, an OCI layout or a ``docker save`` tarball, read from their config alone.
    Layers are attributed to components by rendering the image's stack, found on ``site``'s search path."""
    seen = _inspect(image)
    facts = seen["facts"]
    components = [{"name": c.name, "version": c.version, "source": c.source, "facts": dict(c.facts)}
                  for c in facts.components.values()]
    layers = seen["layers"]
    attribution = _attribute(facts, layers, site_or_env(site)) if layers else False
    sizes = {}
    for layer in layers:
        owner = layer.get("component", "unattributed")
        sizes[owner] = sizes.get(owner, 0) + layer["bytes"]
    for comp in components:
        comp["bytes"] = sizes.get(comp["name"], 0) if attribution else None
    history = ledger.for_image(seen["id"]) if seen["id"] else []
    return {
        "image": image, "id": seen["id"], "bytes": seen["bytes"], "form": seen["form"],
        "stack": facts.stack, "target": facts.target, "arch": facts.arch,
        "imagekit_version": facts.imagekit_version, "recipe_sha256": facts.recipe_sha256,
        "label_schema": facts.schema, "roles": {r: v.component for r, v in facts.roles.items()},
        "components": components, "packages": facts.packages,
        "base_bytes": sizes.get("base", 0) if attribution else None,
        "layers": layers, "attributed": attribution,
        "checks": [r for r in history if r["kind"] == "check"],
        "exports": _exports(history),
    }


def _inspect(image: str) -> dict:
    """id, bytes, facts, layers and the form (engine, file, registry or layout) of ``image``."""
    if image_facts.is_file_image(image) and not layered.is_layered(image):
        facts = reader.read(image)
        if facts.labels is None and not os.path.isfile(image):
            raise NotFoundError(f"{image} does not exist", "give the path of a .sqsh or .sif file")
        return {"id": "", "bytes": os.path.getsize(image), "facts": facts, "layers": [],
                "form": "sif" if image.endswith(".sif") else "squashfs"}
    ref = image
    if not layered.is_layered(image):
        try:
            img = engine.inspect(image)  # the one "not found" error, with its fix
        except EngineError as exc:
            if isinstance(exc, NotFoundError) or not layered.looks_like_registry(image):
                raise
            ref = layered.registry_fallback(image)   # no engine answers: read it from its registry
        else:
            facts = image_facts.from_labels(img.labels or {}, ref=image)
            layers = [{"created_by": h.get("CreatedBy", ""), "bytes": h.get("Size", 0)}
                      for h in reversed(img.history())]
            return {"id": img.id, "bytes": img.size, "facts": facts, "layers": layers, "form": "engine"}
    seen = layered.read(ref)
    return {"id": seen.image_id, "bytes": seen.stored_bytes, "facts": seen.facts, "layers": seen.history,
            "form": "registry" if ref.startswith("docker://") or "#" in ref else "layout"}


def _attribute(facts: image_facts.ImageFacts, layers: list[dict], site: Site) -> bool:
    """Tag each layer with its component; False (and no tags) when it cannot be done exactly."""
    name = facts.stack
    if not name:
        return False
    try:
        # The build of the image's own arch: its per_arch overlay may differ from this host's.
        resolved = stack.load(name, platform=facts.arch or None, site=site)
        render.reset_hpccm("docker")
        owners: list[str] = []
        for owner, blocks in render.stage_parts(resolved, "devel" if facts.target == "devel" else "runtime"):
            owners += [owner] * len(_INSTRUCTION.findall("\n".join(str(b) for b in blocks)))
        owners.append("labels")
    except Exception:  # the stack is not here, or changed: report without attribution
        return False
    if len(owners) > len(layers):
        return False
    base_count = len(layers) - len(owners)
    for i, layer in enumerate(layers):
        layer["component"] = "base" if i < base_count else owners[i - base_count]
    return True


def as_text(info: dict) -> str:
    mb = lambda b: "?" if b is None else f"{b / 1e6:.1f} MB"  # noqa: E731
    size = mb(info["bytes"]) + (" stored (compressed)" if info.get("form") in ("registry", "layout") else "")
    lines = [f"{info['image']}  {info['id'][:19] or info.get('form', '')}  {size}",
             f"  stack {info['stack'] or '(not an imagekit image)'}  target {info['target']}  arch {info['arch']}"
             f"  imagekit {info['imagekit_version']}"]
    if info["attributed"]:
        lines.append(f"  {'base image':<12} {'':<10} {'':<8} {mb(info['base_bytes']):>10}")
    for c in info["components"]:
        lines.append(f"  {c['name']:<12} {c['version']:<10} {c['source']:<8} {mb(c['bytes']):>10}")
    for stage, names in (info.get("packages") or {}).items():
        lines.append(f"  packages ({stage}): {' '.join(names)}")
    if not info["layers"]:
        lines.append("  (a squashfs has no layers: sizes per component need the engine image or its registry)")
    elif not info["attributed"]:
        lines.append("  layers (no per-component attribution: stack not available here):")
        for layer in info["layers"]:
            if layer["bytes"]:
                lines.append(f"    {mb(layer['bytes']):>10}  {layer['created_by'][:90]}")
    for c in info["checks"][-1:]:
        lines.append(f"  last check: {c.get('passed', 0)} passed, {c.get('failed', 0)} failed, "
                     f"{c.get('not_run', 0)} not run")
    gone = [e for e in info["exports"] if not e["exists"]]
    for e in info["exports"]:
        if e["exists"]:
            lines.append(f"  export: {e.get('format')} {e.get('path')} {mb(e.get('bytes'))} "
                         f"sha256 {e.get('sha256', '')[:16]}")
    if gone:
        lines.append(f"  ({len(gone)} earlier export{'s' if len(gone) != 1 else ''} no longer on disk or "
                     "replaced since; --json lists them)")
    return "\n".join(lines)


def _exports(history: list[dict]) -> list[dict]:
    """Export records, newest per path, each marked with whether that file is still the one exported."""
    latest: dict[str, dict] = {}
    for record in history:
        if record["kind"] == "export":
            latest[record.get("path", "")] = record
    out = []
    for record in latest.values():
        path = record.get("path") or ""
        exists = os.path.isfile(path) and (record.get("bytes") in (None, os.path.getsize(path)))
        out.append({**record, "exists": exists})
    return out
