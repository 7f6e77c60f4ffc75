"""Writing the image-facts contract: the labels a recipe and a build put on an image.

The build side's half of :mod:`imagekit.image_facts` (which names and parses the labels): it
needs a resolved stack, so it sits above the model, beside the renderer that uses it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from imagekit import __version__
from imagekit.util import version_info
from imagekit.checks import stack_checks
from imagekit.image_facts import (ARCH, BASE, BASE_COMPONENTS, BASE_MIRROR, BENCHMARK, CHECKS, COMPONENTS,
                                  PACKAGES, RECIPE_SHA256, SCHEMA, SCHEMA_LABEL, STACK, TARGET, VERSION, component_label,
                                  role_label)

if TYPE_CHECKING:
    from imagekit.stack import Stack


def recipe_labels(stack: "Stack") -> dict[str, str]:
    """The labels the recipe carries for ``stack`` (the build adds :func:`build_labels`)."""
    labels = {
        SCHEMA_LABEL: str(SCHEMA),
        STACK: stack.name,
        VERSION: __version__,
        ARCH: stack.base.arch,
        COMPONENTS: ",".join(stack.components),
        "org.opencontainers.image.title": stack.name,
    }
    if stack.description:
        labels["org.opencontainers.image.description"] = stack.description
    for stage, label in PACKAGES.items():
        # What the stack asked for, per stage (a devel stage installs both lists).
        names = [p.name for p in stack.packages if p.stage == stage]
        if names:
            labels[label] = ",".join(names)
    for name, comp in stack.components.items():
        labels[component_label(name, "version")] = comp.version
        labels[component_label(name, "source")] = comp.source
        for key, value in comp.labels().items():
            if value != "":
                labels[component_label(name, key)] = value
        # What the SBOM and the provenance need and no package database records: the release file a
        # build came from (URL and pinned sha256) and where its files went.
        for artifact in comp.artifacts()[:1]:
            labels[component_label(name, "url")] = artifact.url
            if artifact.sha256:
                labels[component_label(name, "sha256")] = artifact.sha256
        if comp.install_paths():
            labels[component_label(name, "paths")] = ",".join(comp.install_paths())
        if comp.origin:   # a site component: which file (and its sha256) or distribution made these layers
            labels[component_label(name, "origin")] = comp.origin
        if comp.opts.get("accept"):  # the risks the stack took on knowingly travel with the image
            labels[component_label(name, "accepted")] = ",".join(comp.opts["accept"])
    for role, name in sorted(stack.roles().items()):
        labels[role_label(role)] = name
        comp = stack.components[name]
        if comp.role_versions()[role] != comp.version:  # a bundle: HPC-X 2.22 fills "mpi" with its Open MPI
            labels[role_label(role, "version")] = comp.role_versions()[role]
    for comp in stack.components.values():
        bench = comp.benchmark()
        if bench is not None:
            labels[BENCHMARK] = json.dumps({"command": bench[0], "env": bench[1]}, sort_keys=True,
                                           separators=(",", ":"))
            break
    return labels


def build_labels(stack: "Stack", target: str, recipe_sha256: str) -> dict[str, str]:
    """What the build adds on top of the recipe's labels: the recipe hash, the target, the checks, and
    the version with its commit.

    The version replaces the recipe's own (the package version alone): a build-time label wins over
    the recipe's, and the commit stays out of the recipe text, its hash and the layer cache.
    """
    checks = json.dumps([c.as_dict() for c in stack_checks(stack, target)], separators=(",", ":"))
    return {RECIPE_SHA256: recipe_sha256, TARGET: target, CHECKS: checks, VERSION: version_info.full_version()}


def base_labels(distro: str, suite: str, mirror: str, components: list[str]) -> dict[str, str]:
    """Labels of a base image that ``imagekit base`` bootstraps."""
    # The package version alone: a commit here would give the base a new id at every commit, and
    # every stack built on it would miss the layer cache.
    return {BASE: f"{distro}:{suite}", BASE_MIRROR: mirror, BASE_COMPONENTS: ",".join(components),
            VERSION: __version__}
