"""The SLSA provenance v1 predicate of an image imagekit built: what was built from what, by whom.

``buildDefinition``: the stack and target (external parameters), the recipe's sha256 (the rendered
Dockerfile's, as the image's ``io.imagekit.recipe.sha256`` label records it), imagekit's version, and
as resolved dependencies every upstream release file with its URL and pinned sha256.
``runDetails``: the builder (``IMAGEKIT_BUILDER_ID``, e.g. a CI runner's URL; else this host), the
engine and its version, and when the build started and finished when the build itself signed.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from imagekit import __version__, image_facts
from imagekit.attest.sbom import ImageRecord, stack_components

BUILD_TYPE = "https://imagekit.invalid/slsa/stack-build/v1"
BUILDER_ENV = "IMAGEKIT_BUILDER_ID"


@dataclass
class BuildRun:
    """What the build knew that the image does not record."""

    engine: str = ""             # "docker 20.10.24", "podman 4.3.1"
    started: str = ""            # RFC 3339
    finished: str = ""
    invocation: str = ""


def builder_id(env: dict[str, str] | os._Environ | None = None) -> str:
    env = os.environ if env is None else env
    return env.get(BUILDER_ENV) or f"urn:imagekit:builder:{socket.gethostname()}"


def predicate(image: ImageRecord, run: BuildRun | None = None) -> dict[str, Any]:
    """The provenance predicate of ``image`` (its labels) and, where known, the build's run."""
    labels = image.labels
    deps = []
    for c in stack_components(labels):
        if c.url or c.sha256:
            dep: dict[str, Any] = {"name": c.url.rsplit("/", 1)[-1] if c.url else c.name,
                                   "annotations": {"component": c.name, "version": c.version}}
            if c.url:
                dep["uri"] = c.url
            if c.sha256:
                dep["digest"] = {"sha256": c.sha256}
            deps.append(dep)
    stack = {"name": labels.get(image_facts.STACK, ""), "target": labels.get(image_facts.TARGET, ""),
             "arch": labels.get(image_facts.ARCH, ""), "platform": image.platform,
             "components": {c.name: {"version": c.version, "source": c.source}
                            for c in stack_components(labels)}}
    recipe = labels.get(image_facts.RECIPE_SHA256, "")
    run = run or BuildRun()
    metadata = {k: v for k, v in (("invocationId", run.invocation), ("startedOn", run.started),
                                  ("finishedOn", run.finished or image.created)) if v}
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"stack": stack, **({"recipe": {"sha256": recipe}} if recipe else {})},
            "internalParameters": {"imagekit": labels.get(image_facts.VERSION, "") or __version__},
            "resolvedDependencies": deps,
        },
        "runDetails": {
            "builder": {"id": builder_id(),
                        "version": {k: v for k, v in (("imagekit", __version__), ("engine", run.engine)) if v}},
            "metadata": metadata,
        },
    }
