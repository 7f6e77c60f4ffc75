"""What is in an image: stack, components, versions, sizes per component, checks run, exports made.

Sizes per component come from aligning the image's history with the runtime
stage that imagekit renders for the stack named in the labels: each component
contributes a known number of instructions, in layer order. When the stack is
not available (an image built elsewhere) or the counts differ, layers are
listed without attribution rather than guessed.
"""

from __future__ import annotations

import re

from imagekit import engine, image_facts, records, render, stack

_INSTRUCTION = re.compile(r"^(RUN|COPY|ADD|ENV|LABEL|WORKDIR|ARG|USER|ENTRYPOINT|CMD|VOLUME|EXPOSE|SHELL)\b",
                          re.M)


def describe(image: str) -> dict:
    img = engine.inspect(image)  # the one "not found" error, with its fix
    facts = image_facts.from_labels(img.labels or {}, ref=image)
    components = [{"name": c.name, "version": c.version, "source": c.source, "facts": dict(c.facts)}
                  for c in facts.components.values()]
    layers = [{"created_by": h.get("CreatedBy", ""), "bytes": h.get("Size", 0)}
              for h in reversed(img.history())]
    attribution = _attribute(facts, layers)
    sizes = {}
    for layer in layers:
        owner = layer.get("component", "unattributed")
        sizes[owner] = sizes.get(owner, 0) + layer["bytes"]
    for comp in components:
        comp["bytes"] = sizes.get(comp["name"], 0) if attribution else None
    history = records.for_image(img.id)
    return {
        "image": image, "id": img.id, "bytes": img.size,
        "stack": facts.stack, "target": facts.target, "arch": facts.arch,
        "imagekit_version": facts.imagekit_version, "recipe_sha256": facts.recipe_sha256,
        "label_schema": facts.schema, "roles": {r: v.component for r, v in facts.roles.items()},
        "components": components, "base_bytes": sizes.get("base", 0) if attribution else None,
        "layers": layers, "attributed": attribution,
        "checks": [r for r in history if r["kind"] == "check"],
        "exports": _exports(history),
    }


def _attribute(facts: image_facts.ImageFacts, layers: list[dict]) -> bool:
    """Tag each layer with its component; False (and no tags) when it cannot be done exactly."""
    name = facts.stack
    if not name:
        return False
    try:
        # The build of the image's own arch: its per_arch overlay may differ from this host's.
        resolved = stack.load(name, platform=facts.arch) if facts.arch else stack.load(name)
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
    lines = [f"{info['image']}  {info['id'][:19]}  {mb(info['bytes'])}",
             f"  stack {info['stack'] or '(not an imagekit image)'}  target {info['target']}  arch {info['arch']}"
             f"  imagekit {info['imagekit_version']}"]
    if info["attributed"]:
        lines.append(f"  {'base image':<12} {'':<10} {'':<8} {mb(info['base_bytes']):>10}")
    for c in info["components"]:
        lines.append(f"  {c['name']:<12} {c['version']:<10} {c['source']:<8} {mb(c['bytes']):>10}")
    if not info["attributed"]:
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
    import os

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
