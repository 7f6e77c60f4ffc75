"""The CI build matrix (``imagekit matrix``): one row per stack x variant x arch, for the GitHub workflow
and the GitLab pipeline to build, check, export, sign and push.

A site adopts the templates by their inputs alone, so the matrix takes what a site names: which stacks
(its own directory's by default once it has one), which platforms, and which rows a validate leg runs
on with which system model. Every row's ``file`` is one a runner's checkout resolves: relative under the
working directory, else the stack's name (a ``pip install .`` puts the shipped stacks under the build
job's own site-packages, a path another runner, an arm64 one, does not have).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from imagekit import stack as stack_mod
from imagekit.build import PLATFORMS
from imagekit.util import platforms
from imagekit.util.errors import UsageError
from imagekit.util.settings import Site
from imagekit.validate import system as system_mod


@dataclass(frozen=True)
class MatrixRequest:
    """What a site asks of the matrix. Empty means "no limit" for ``stacks`` and ``platforms``."""

    stacks: tuple[str, ...] = ()              # stack names or files; default: every stack found
    site_only: bool = False                   # only the site's stack directories (not the shipped stacks)
    platforms: tuple[str, ...] = ()           # linux/amd64, linux/arm64 (comma-separated allowed)
    validate: tuple[str, ...] = ()            # ROW=SYSTEM pairs (ROW: a row id, variant or stack name)
    runners: tuple[str, ...] = ()             # ARCH=LABEL[,LABEL] pairs: a row's build runner (default: [ARCH])
    gpu_runners: tuple[str, ...] = ()         # ARCH=LABEL[,LABEL] pairs: a validate leg's runner (default: gpu, ARCH)
    buildable_here: bool = False              # only offline stacks for this machine's architecture
    site: Site = field(default_factory=Site.from_env)


def rows(request: MatrixRequest) -> list[dict]:
    """The rows, in the order the stacks are found (site directories first), then by arch and variant."""
    wanted_arches = {platforms.buildable(p) for p in platforms.parse_list(request.platforms)}
    runners, gpu_runners = _labels(request.runners, "--runner"), _labels(request.gpu_runners, "--gpu-runner")
    out = []
    for path in _stack_files(request):
        offered = {a for v in stack_mod.load_all(path, site=request.site) for a in v.arches}
        for arch in [a for a in platforms.ARCHES if a in offered]:
            if wanted_arches and arch not in wanted_arches:
                continue
            for variant in stack_mod.load_all(path, PLATFORMS[arch], request.site):
                offline = variant.base.image.startswith("imagekit/")
                here = platforms.stack_name(platforms.host_machine())
                if request.buildable_here and (not offline or arch != here):
                    continue
                # ``id`` names the row (variant, plus -arm64 where the variant has several arches); a variant
                # of several arches is pushed under TAG-ARCH each, then one index under TAG.
                suffix, several = platforms.tag_suffix(arch), len(variant.arches) > 1
                out.append({"stack": variant.stack_name, "variant": variant.name,
                            "id": variant.name + (suffix if several else ""),
                            "file": runner_path(path, request.site), "arch": arch, "image": variant.image,
                            "offline": offline, "platform": PLATFORMS[arch], "suffix": suffix,
                            "index": several, "push_suffix": f"-{platforms.oci_name(arch)}" if several else "",
                            "system": "", "runner": runners.get(arch, [arch]),
                            "gpu_runner": gpu_runners.get(arch, ["gpu", arch])})
    _assign_systems(out, request.validate, request.site)
    return out


def _stack_files(request: MatrixRequest) -> list[Path]:
    site = request.site
    found = stack_mod.available(site)
    if request.site_only:
        found = [(p, d) for p, d in found if d.resolve() != site.shipped_stacks.resolve()]
    if not request.stacks:
        return [p for p, _ in found]
    chosen: list[Path] = []
    for ref in request.stacks:
        path, _variant = stack_mod.find(ref, site)   # an unknown name: its one error, naming what exists
        if path not in chosen:
            chosen.append(path)
    return chosen


def runner_path(path: Path, site: Site) -> str:
    """How a CI job names the stack file: relative under the working directory, else by its name when
    the search path finds this same file by it, else the absolute path."""
    rel = os.path.relpath(path)
    if not rel.startswith(".."):
        return rel
    try:
        if stack_mod.find(path.stem, site)[0].resolve() == Path(path).resolve():
            return path.stem
    except UsageError:
        pass
    return str(path)


def _pairs(values: Iterable[str], option: str, separators: str, example: str) -> list[tuple[str, str]]:
    """NAME=VALUE items of ``values``, split at ``separators`` (a regex class)."""
    pairs = []
    for value in values:
        for item in re.split(separators, value.strip()):
            if not item:
                continue
            name, sep, what = item.partition("=")
            if not sep or not name or not what:
                raise UsageError(f"{option} {item!r} is not NAME=VALUE", f"e.g. {option} {example}")
            pairs.append((name, what))
    return pairs


def _labels(values: Iterable[str], option: str) -> dict[str, list[str]]:
    """ARCH=LABEL[,LABEL] pairs (space-separated) -> {stack arch: labels}; an unknown arch is an error."""
    out = {}
    for arch, labels in _pairs(values, option, r"\s+", "x86_64=self-hosted,linux,x64"):
        name = platforms.stack_name(arch)
        if name not in platforms.ARCHES:
            raise UsageError(f"{option} {arch}=...: {arch!r} is not an architecture imagekit builds",
                             "use " + " or ".join(platforms.ARCHES) + " (amd64, arm64 also do)")
        out[name] = [label for label in labels.split(",") if label]
    return out


def _assign_systems(rows_: list[dict], values: Iterable[str], site: Site | None = None) -> None:
    """Each ROW=SYSTEM pair gives the rows it names (by id, else variant, else stack) a validate leg on
    SYSTEM's model; ROW alone, on the catalogue model whose ``stacks:`` lists the row's id (the V100
    image's is dgx-1v). A ROW that names no row, or no model lists, is an error naming what would do.
    The leg's GPU runner also carries the model's name as a label: each leg runs on its own hardware."""
    items = [item for value in values for item in re.split(r"[,\s]+", value.strip()) if item]
    pairs = _pairs([i for i in items if "=" in i], "--validate", r"[,\s]+", "site-mpi=dgx-h100 (ROW: a row id, "
                   "variant or stack; SYSTEM: imagekit validate --list-systems, or a site model)")
    for row_name, system in [*pairs, *((i, None) for i in items if "=" not in i)]:
        hit = ([r for r in rows_ if r["id"] == row_name] or [r for r in rows_ if r["variant"] == row_name]
               or [r for r in rows_ if r["stack"] == row_name])
        if not hit:
            raise UsageError(f"--validate {row_name}{'=' + system if system else ''}: no matrix row is called "
                             f"{row_name!r}", "rows: " + (", ".join(r["id"] for r in rows_) or "none (no stack was chosen)"))
        for r in hit:
            chosen = system or system_mod.for_row(r["id"], site)
            if not chosen:
                raise UsageError(f"--validate {row_name}: no system model lists {r['id']!r} in its stacks:",
                                 f"name one: --validate {row_name}=SYSTEM (imagekit validate --list-systems)")
            r["system"] = chosen
            if chosen not in r["gpu_runner"]:
                r["gpu_runner"] = [*r["gpu_runner"], chosen]
