"""The Stack model: load a stack file, apply ``extends`` and ``matrix``, validate, resolve.

A stack file names a base (devel and runtime images, distro, arch) and the
components to compose. ``extends`` merges a parent file into it by :mod:`imagekit.merge`'s
rules (child wins; ``component: false`` drops an inherited component; ``checks``,
``packages`` and ``pip`` lists append). ``matrix`` expands one file into variants: each axis maps a value key to an overlay, and a variant's name
is the stack's name followed by its value keys (``nccl-tests-cu124-x86_64``).

Architectures: ``base.arch`` names the one the stack builds for, or a list of those it offers
(``[x86_64, aarch64]``). A load picks one (``platform``; default: this machine's where offered,
else the first), applies ``per_arch.ARCH`` (an overlay like a matrix value's: per-arch pins where
upstream differs), and gives the image a local tag that carries it (``imagekit/NAME:latest-arm64``;
x86_64 keeps ``imagekit/NAME:latest``), so that the builds of one stack never replace each other.
"""

from __future__ import annotations

import difflib
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit import checks as checks_mod
from imagekit import merge, rules, sources
from imagekit.util import known_errors, platforms, schema, searchpath, settings, yamlpos
from imagekit import components
from imagekit.components import RETIRED
from imagekit.util.errors import StackError
from imagekit.util.schema import Option
from imagekit.util.settings import Site, site_or_env
from imagekit.util.yamlpos import PosDict, PosList

# Our distro names -> (HPCCM's distro for rendering, package family).
# Debian is unknown to HPCCM (an unknown image silently becomes Ubuntu 16.04),
# so Debian bases render with the apt-based Ubuntu of the same generation.
DISTROS = {
    "debian11": ("ubuntu20", "deb"), "debian12": ("ubuntu22", "deb"), "debian13": ("ubuntu24", "deb"),
    "ubuntu20": ("ubuntu20", "deb"), "ubuntu22": ("ubuntu22", "deb"), "ubuntu24": ("ubuntu24", "deb"),
    "rockylinux8": ("rockylinux8", "rpm"), "rockylinux9": ("rockylinux9", "rpm"),
    "rhel8": ("rhel8", "rpm"), "rhel9": ("rhel9", "rpm"),
}
ARCHES = ("x86_64", "aarch64")
# A stack file is a few KiB and under a hundred YAML nodes (the shipped ones: 2.5 KiB, 74). These
# bounds keep a hostile one (a pull request's) from keeping `imagekit render` busy: read and parse
# end in well under a second (bench/stack_bounds.py; tests/test_stack_bounds.py).
MAX_STACK_BYTES = 64 << 10
MAX_STACK_NODES = 5_000

# Stack values reach Dockerfiles, definition files, labels and shell lines; those that name things
# are held to the characters that can name them (schema.check_text refuses control characters in all).
NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
NAME_HELP = "letters, digits, '.', '_' and '-' (it names the image)"
IMAGE = r"[A-Za-z0-9_./:@+-]+"
IMAGE_HELP = "an image reference like nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04, or a path (no spaces or quotes)"
MIRROR = r"[^\s'\"\\$`;&|<>()*?]+"

TOP = {
    "name": Option(str, None, "the stack's name (image and variant names derive from it)", required=True,
                   pattern=NAME, pattern_help=NAME_HELP),
    "description": Option(str, ""),
    "extends": Option(str, None, "a parent stack: a file below this one's directory, or a stack name on "
                                 "the search path"),
    "base": Option(dict, None, "base images, distro and arch", required=True),
    "components": Option(dict, {}, "component name -> options"),
    "tags": Option(list, [], "image tags; {name} and matrix axis names are substituted", item_type=str),
    "checks": Option(list, [], "extra checks run by `imagekit check`", item_type=dict),
    "packages": Option(dict, None, "distro packages to add: {runtime: [...], devel: [...]} (docs/site-extensions.md)"),
    "matrix": Option(dict, None, "axis -> value key -> overlay"),
    "per_arch": Option(dict, None, "arch (x86_64, aarch64) -> overlay applied when building for it, e.g. "
                                   "an aarch64-only pin where upstream differs"),
    "mirror": Option(str, None, "a site mirror of upstream release files: a directory (relative to this "
                                "file) or an http(s)/file URL; --mirror and $IMAGEKIT_MIRROR override it",
                     pattern=MIRROR, pattern_help="a path or URL without spaces, quotes or shell characters"),
}
BASE = {
    "image": Option(str, None, "the devel stage's base image", required=True, pattern=IMAGE,
                    pattern_help=IMAGE_HELP),
    "runtime": Option(str, None, "the runtime stage's base image (default: the devel image)", pattern=IMAGE,
                      pattern_help=IMAGE_HELP),
    "distro": Option(str, None, "always explicit: HPCCM guesses wrong otherwise", choices=tuple(DISTROS),
                     required=True),
    # A string or a list: _arches reads it before the schema sees the chosen one.
    "arch": Option(str, "x86_64", "CPU architecture, or the list of those the stack builds for "
                                  "(e.g. [x86_64, aarch64]; the first is the default)", choices=ARCHES),
    "bootstrap": Option(str, "docker", "Singularity bootstrap agent for the base images",
                        choices=("docker", "docker-daemon", "localimage")),
}
CHECK_KEYS = {
    "name": Option(str, None, "a short name for the check", required=True, pattern=r"[A-Za-z0-9_.-]+",
                   pattern_help="letters, digits, '.', '_' and '-'"),
    "describe": Option(str, None),
    # Code by design: it runs in a container of the image under test, never on the host.
    "run": Option(str, None, "a shell command that must exit 0", multiline=True),
    "expect": Option(str, None, "a regex the command's output must match"),
    "file": Option(str, None, "a path that must exist"),
    "absent": Option(str, None, "globs that must match nothing",
                     pattern=r"/[A-Za-z0-9_./*?\[\]+@%:=,-]*( /[A-Za-z0-9_./*?\[\]+@%:=,-]*)*",
                     pattern_help="absolute paths with * ? [] wildcards, separated by spaces "
                                  "(no other shell characters)"),
    "library": Option(str, None, "a soname the loader cache must resolve", pattern=r"[A-Za-z0-9_.+-]+",
                      pattern_help="a soname like libnccl.so.2"),
    "python_import": Option(str, None, "a module python3 must import",
                            pattern=r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*",
                            pattern_help="a dotted module name like torch.distributed"),
    "needs": Option(str, None, "hardware the check needs", choices=checks_mod.NEEDS),
}
# The check kinds a stack file writes as keys (ldd_closure is the builder's own, over the prefixes).
STACK_CHECK_KINDS = tuple(k for k in checks_mod.KINDS if k in CHECK_KEYS)
OVERLAY_KEYS = ("description", "base", "components", "tags", "checks", "packages")
# `packages:` stages: runtime packages go into both stages (devel builds against them), devel ones
# into the devel stage only.
PACKAGE_STAGES = {
    "runtime": Option(list, [], "packages both stages install (libraries, tools)"),
    "devel": Option(list, [], "packages only the devel stage installs (headers, compilers)"),
}
# A Debian package name (Debian Policy 5.6.1): what apt-get may be given, and nothing a shell reads.
DEB_NAME = r"[a-z0-9][a-z0-9+.-]+"
DEB_NAME_HELP = "a Debian package name: lowercase letters, digits, '+', '-' and '.', e.g. libhdf5-dev"


@dataclass(frozen=True)
class Package:
    """One distro package a stack file adds, under the base distro's name, and where it was written."""

    name: str
    stage: str            # runtime | devel
    file: str | None
    line: int | None
    key: str


@dataclass(frozen=True)
class Base:
    image: str
    runtime: str
    distro: str
    arch: str
    bootstrap: str = "docker"

    @property
    def hpccm_distro(self) -> str:
        return DISTROS[self.distro][0]

    @property
    def family(self) -> str:
        return DISTROS[self.distro][1]


@dataclass
class Stack:
    name: str
    file: str
    base: Base
    description: str = ""
    components: dict = field(default_factory=dict)  # name -> Component, in layer order
    tags: list = field(default_factory=list)
    checks: list = field(default_factory=list)
    stack_name: str = ""                            # the file's name: before matrix expansion
    variant: dict = field(default_factory=dict)     # axis -> value key
    mirror: str | None = None                       # resolved: a directory path or a URL
    site: Site = field(default_factory=Site.from_env)  # where it was found: its stacks, components, pins
    arches: tuple = ("x86_64",)                     # every arch the stack (this variant) builds for

    @property
    def platform(self) -> platforms.Platform:
        """The OCI platform this resolved stack builds (linux/amd64, linux/arm64)."""
        return platforms.of_arch(self.base.arch)
    packages: list = field(default_factory=list)    # Package, in the order written

    def get(self, name: str):
        return self.components.get(name)

    def has(self, name: str) -> bool:
        return name in self.components

    def provider(self, role: str):
        """The component that fills ``role`` (e.g. "mpi"), whichever it is, or None."""
        return next((c for c in self.components.values() if role in c.provides), None)

    def package_names(self, stage: str) -> list[str]:
        """The ``packages:`` a stage installs: a devel stage also gets the runtime ones."""
        stages = ("runtime", "devel") if stage == "devel" else (stage,)
        return [p.name for p in self.packages if p.stage in stages]

    def roles(self) -> dict[str, str]:
        """Role -> the name of the component that fills it."""
        return {role: c.name for c in reversed(list(self.components.values())) for role in c.provides}

    @property
    def image(self) -> str:
        """The local tag imagekit builds (tags from the stack are added on top); it carries the
        architecture except for x86_64 (``imagekit/NAME:latest-arm64``), unless the name says it
        already (a matrix variant ``nccl-tests-cu129-sbsa``)."""
        image = f"imagekit/{self.name}:latest"
        return image if platforms.names_arch(self.name, self.base.arch) else platforms.local_tag(image, self.base.arch)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name, "stack": self.stack_name, "file": self.file, "variant": self.variant,
            "description": self.description,
            "base": {"image": self.base.image, "runtime": self.base.runtime, "distro": self.base.distro,
                     "arch": self.base.arch},
            "arches": list(self.arches), "platform": str(self.platform),
            "components": [c.describe() for c in self.components.values()],
            "packages": {stage: self.package_names(stage) for stage in PACKAGE_STAGES},
            "checks": [c.as_dict() for c in checks_mod.stack_checks(self, "runtime")],
            "tags": self.tags, "image": self.image,
        }


# -- locating stacks ----------------------------------------------------

SHIPPED_DIR = settings.SHIPPED_STACKS_DIR
PATH_ENV = settings.STACKS_PATH_ENV


def search_path(site: Site | None = None) -> list[Path]:
    """Where stacks are found: the site's stack directories, then the shipped stacks (default: the
    environment's site, :meth:`Site.from_env`)."""
    return site_or_env(site).stack_search_path()


def available(site: Site | None = None) -> list[tuple[Path, Path]]:
    """Every stack file on the search path with the directory it came from; a name found in an
    earlier directory hides the same name further on. A site pins file kept among the stacks is not
    one (:func:`pins_files`)."""
    site = site_or_env(site)
    found = searchpath.files(search_path(site)).values()
    return [(path, d) for path, d in found if d == site.shipped_stacks or not sources.is_pins_file(path)]


def pins_files(site: Site | None = None) -> list[Path]:
    """The site pins files kept in the site's stack directories (``pins:`` and nothing else at the top)."""
    site = site_or_env(site)
    return [path for path, d in searchpath.files(list(site.stack_dirs)).values() if sources.is_pins_file(path)]


def _not_a_pins_file(path: Path, site: Site) -> None:
    if sources.is_pins_file(path):
        raise known_errors.PINS_FILE_AS_STACK.error(file=path)


def shipped(site: Site | None = None) -> list[Path]:
    return [path for path, _ in available(site)]


def find(ref: str, site: Site | None = None) -> tuple[Path, str | None]:
    """A stack path or name (or a variant name) -> (file, variant name or None)."""
    site = site_or_env(site)
    path = Path(ref)
    if path.suffix in searchpath.SUFFIXES or path.exists():
        if not path.is_file():
            raise StackError("stack file not found", file=ref,
                             hint=f"shipped stacks: {', '.join(p.stem for p in shipped(site)) or 'none'}")
        _not_a_pins_file(path, site)
        return path, None
    for candidate in shipped(site):
        if candidate.stem == ref:
            return candidate, None
    broken: list[StackError] = []
    for candidate in shipped(site):
        try:
            variants = load_all(candidate, site=site)
        except StackError as exc:
            # A sibling that fails its own rules must not stop the lookup of the stack asked for (review 3
            # H11); it is named only if nothing matches, in case it was the one meant.
            broken.append(exc)
            continue
        for variant in variants:
            if variant.name == ref and variant.variant:
                return candidate, ref
    names = [p.stem for p in shipped(site)]
    close = difflib.get_close_matches(ref, names, n=1)
    unreadable = ("; stack files that could not be read (one may hold it): "
                  + "; ".join(e.message for e in broken)) if broken else ""
    raise StackError(f"unknown stack {ref!r}", hint=(f"did you mean {close[0]!r}? " if close else "")
                     + f"shipped stacks: {', '.join(names)} (or give a path to a .yaml file){unreadable}")


def load(ref: str | Path, variant: str | None = None, *, mirror: str | None = None,
         platform: str | platforms.Platform | None = None, site: Site | None = None) -> Stack:
    """One resolved stack; a matrix stack needs ``variant`` unless it has a single one (for
    ``platform``: a single one that offers it).

    ``mirror`` (a directory or URL) overrides the stack's and $IMAGEKIT_MIRROR. ``platform``
    (``linux/arm64``, ``arm64``, ``aarch64`` or a Platform) picks the architecture; default: this
    machine's where the stack offers it, else the first in ``base.arch``. ``site``: where stacks,
    parents, site components and pins are found (default: :meth:`Site.from_env`).
    """
    stack = _load_one(ref, variant, platform, site_or_env(site))
    if mirror:
        stack.mirror = sources.resolve_mirror(stack.file, None, mirror)
    return stack


def _load_one(ref: str | Path, variant: str | None, platform: str | platforms.Platform | None,
              site: Site) -> Stack:
    path, implied = find(str(ref), site)
    variant = variant or implied
    if variant is not None and platform is not None:
        # Naming the variant first: one that does not offer the platform says so itself.
        for one in load_all(path, site=site):
            if one.name == variant or (one.variant and variant == "-".join(one.variant.values())):
                return _one_variant(path, one.variant, platform, site)
    stacks = load_all(path, platform, site)
    if variant is None:
        if len(stacks) == 1:
            return stacks[0]
        raise StackError(f"stack has {len(stacks)} matrix variants; choose one", file=str(path),
                         hint="pass --variant NAME; variants: " + ", ".join(s.name for s in stacks))
    for stack in stacks:
        if stack.name == variant or (stack.variant and variant == "-".join(stack.variant.values())):
            return stack
    raise StackError(f"no variant {variant!r}", file=str(path),
                     hint="variants: " + ", ".join(s.name for s in stacks))


def load_all(path: str | Path, platform: str | platforms.Platform | None = None,
             site: Site | None = None) -> list[Stack]:
    """Every variant of the stack file at ``path`` (one when there is no matrix). With
    ``platform``, the variants that offer it, each resolved for it; none offering it is an error
    naming what the file offers. ``site``: as for :func:`load`."""
    path = Path(path)
    site = site_or_env(site)
    want = _wanted_arch(platform)
    out, refused = [], []
    for merged, keys in _variant_docs(path, site):
        arches, where = _arches(merged, path)
        if want is not None and want not in arches:
            refused.append((merged, arches, where))
            continue
        out.append(_resolve_for(merged, path, keys, arches, want, site))
    if not out:
        first, _, (file, line) = refused[0]
        offered = sorted({a for _, some, _ in refused for a in some})
        what = (raw_name(first) or path.stem) + (" (no variant)" if len(refused) > 1 else "")
        raise platforms.PlatformError(
            f"{file}:{line}: base.arch: {what} does not build for {platforms.of_arch(want)}; it offers "
            + ", ".join(f"{platforms.of_arch(a)} ({a})" for a in offered),
            f"build it for one of those, or add {want} to base.arch (a list, e.g. [{', '.join(offered)}, "
            f"{want}]) once every component builds there")
    return out


def _one_variant(path: Path, keys: dict[str, str], platform, site: Site) -> Stack:
    want = _wanted_arch(platform)
    for merged, these in _variant_docs(path, site):
        if these == keys:
            arches, (file, line) = _arches(merged, path)
            if want not in arches:
                name = "-".join([raw_name(merged) or Path(path).stem, *keys.values()])
                raise platforms.PlatformError(
                    f"{file}:{line}: base.arch: {name} does not build for {platforms.of_arch(want)}; it "
                    "offers " + ", ".join(f"{platforms.of_arch(a)} ({a})" for a in arches),
                    "pick a variant built for it (imagekit matrix lists them), or add it to base.arch")
            return _resolve_for(merged, path, keys, arches, want, site)
    raise StackError(f"no variant {keys!r}", file=str(path))


def raw_name(doc: PosDict) -> str | None:
    """The stack's ``name:`` before validation (for an error that comes first)."""
    name = doc.get("name") if isinstance(doc, dict) else None
    return name if isinstance(name, str) else None


def _wanted_arch(platform: str | platforms.Platform | None) -> str | None:
    if platform is None:
        return None
    chosen = platform if isinstance(platform, platforms.Platform) else platforms.parse(platform)
    return platforms.buildable(chosen)


def _variant_docs(path: Path, site: Site) -> list[tuple[PosDict, dict[str, str]]]:
    """(the merged document, axis -> value key) of each matrix variant, before arch selection."""
    raw = _load_with_extends(path, (), site)
    top = schema.validate(raw, TOP, context="")
    matrix = top["matrix"]
    if not matrix:
        return [(raw, {})]
    docs = []
    axes = _matrix_axes(matrix)
    for combo in itertools.product(*[list(values.items()) for _, values in axes]):
        merged = raw
        keys = {}
        for (axis, _), (value_key, overlay) in zip(axes, combo):
            keys[axis] = str(value_key)
            if overlay:
                merged = merge.merge(merged, overlay, parent_file=f"{path.name} without matrix.{axis}.{value_key}")
        docs.append((merged, keys))
    return docs


def _arches(doc: PosDict, path: Path) -> tuple[tuple[str, ...], tuple[str | None, int | None]]:
    """The arches ``base.arch`` offers (a string or a list), and where it says so."""
    base = doc.get("base")
    if not isinstance(base, dict) or base.get("arch") is None:
        # The default: the error points at `base:` (where `arch:` would go).
        where = doc.pos("base") if hasattr(doc, "pos") else (str(path), None)
        return (BASE["arch"].default,), (where[0] or str(path), where[1])
    value = base["arch"]
    file, line = base.pos("arch") if hasattr(base, "pos") else (str(path), None)
    items = value if isinstance(value, list) else [value]
    if not items:
        raise StackError("an empty list of architectures", file=file, line=line, key="base.arch",
                         hint=f"name one or more of: {', '.join(ARCHES)}")
    for item in items:
        if not isinstance(item, str) or item not in ARCHES:
            spelled = platforms.stack_name(item) if isinstance(item, str) else None
            raise StackError(f"invalid value {item!r}", file=file, line=line, key="base.arch",
                             hint=(f"write {spelled!r} (the stack file names architectures as uname -m "
                                   "does); " if spelled in ARCHES else "") + f"valid: {', '.join(ARCHES)}")
    if len(set(items)) != len(items):
        raise StackError(f"{value!r} names an architecture twice", file=file, line=line, key="base.arch")
    return tuple(items), (file or str(path), line)


def _with_arch(doc: PosDict, arch: str) -> PosDict:
    """``doc`` with ``base.arch`` set to the one arch chosen, keeping where it was written."""
    base = doc.get("base")
    if not isinstance(base, dict):
        return doc          # the schema says what is wrong with it
    file, line = base.pos("arch") if hasattr(base, "pos") else (None, None)
    one = PosDict({"arch": arch}, file=getattr(base, "file", None), line=getattr(base, "line", None))
    one.where["arch"] = (file, line)
    overlay = PosDict({"base": one}, file=getattr(doc, "file", None), line=getattr(doc, "line", None))
    overlay.where["base"] = doc.pos("base") if hasattr(doc, "pos") else (None, None)
    return merge.merge(doc, overlay)


def _resolve_for(merged: PosDict, path: Path, keys: dict[str, str], arches: tuple[str, ...],
                 want: str | None, site: Site) -> Stack:
    """Resolve one variant for one arch: ``want``, else this machine's where offered, else the first."""
    host = platforms.stack_name(platforms.host_machine())
    arch = want or (host if host in arches else arches[0])
    doc = _with_arch(merged, arch)
    top = schema.validate(doc, TOP, context="")
    overlays = top["per_arch"] or {}
    for key, overlay in overlays.items():
        file, line = overlays.pos(key) if hasattr(overlays, "pos") else (str(path), None)
        if key not in ARCHES:
            raise StackError(f"unknown architecture {key!r}", file=file, line=line, key=f"per_arch.{key}",
                             hint=f"valid: {', '.join(ARCHES)}")
        if key not in arches:
            raise StackError(f"an overlay for {key}, which base.arch does not offer", file=file, line=line,
                             key=f"per_arch.{key}", hint=f"add {key} to base.arch, or drop this overlay")
        if not isinstance(overlay, dict):
            raise StackError("expected a mapping (an overlay of stack keys)", file=file, line=line,
                             key=f"per_arch.{key}")
        for okey in overlay:
            if okey not in OVERLAY_KEYS:
                raise schema.unknown_key(overlay, okey, list(OVERLAY_KEYS), f"per_arch.{key}")
    if overlays.get(arch):
        doc = _with_arch(merge.merge(doc, overlays[arch], parent_file=f"{path.name} without per_arch.{arch}"), arch)
        top = schema.validate(doc, TOP, context="")
    stack = _resolve(doc, top, path, keys, site)
    stack.arches = arches
    return stack


def _matrix_axes(matrix: PosDict) -> list[tuple[str, PosDict]]:
    axes = []
    for axis, values in matrix.items():
        file, line = matrix.pos(axis)
        if not isinstance(values, dict) or not values:
            raise StackError("a matrix axis maps value keys to overlays", file=file, line=line,
                             key=f"matrix.{axis}", hint=f"e.g. {axis}: {{value1: {{...}}, value2: {{...}}}}")
        for value_key, overlay in values.items():
            if overlay is None:
                continue
            vfile, vline = values.pos(value_key)
            if not isinstance(overlay, dict):
                raise StackError("expected a mapping (an overlay of stack keys)", file=vfile, line=vline,
                                 key=f"matrix.{axis}.{value_key}")
            for key in overlay:
                if key not in OVERLAY_KEYS:
                    raise schema.unknown_key(overlay, key, list(OVERLAY_KEYS), f"matrix.{axis}.{value_key}")
        axes.append((str(axis), values))
    return axes


def diff_parent(ref: str | Path, site: Site | None = None) -> dict[str, Any]:
    """What a stack file changes from the stack it extends, both merged as a build reads them:
    {"stack", "parent", "changes": [{"op": "+"|"-"|"~", "key", ...}]} (before matrix expansion)."""
    site = site_or_env(site)
    path, _ = find(str(ref), site)
    data = yamlpos.load(path, max_bytes=MAX_STACK_BYTES, max_nodes=MAX_STACK_NODES)
    if not isinstance(data, dict) or data.get("extends") is None:
        raise StackError("extends no stack, so it has no parent to compare with", file=str(path),
                         hint="--diff-parent applies to a stack with `extends:`")
    file, line = data.pos("extends")
    parent = _resolve_parent(path, str(data["extends"]), file, line, site)
    before = _load_with_extends(parent, (path.resolve(),), site)
    after = _load_with_extends(path, (), site)
    return {"stack": str(path), "parent": str(parent), "changes": merge.diff(before, after)}


def files_read(path: str | Path, site: Site | None = None) -> list[Path]:
    """The stack file at ``path`` and every parent its ``extends:`` chain reads, child first: what a
    record of a build must hash to know the stack is unchanged (scripts/heavy_tier.py)."""
    site = site_or_env(site)
    chain = [Path(path)]
    while True:
        data = yamlpos.load(chain[-1], max_bytes=MAX_STACK_BYTES, max_nodes=MAX_STACK_NODES)
        ref = data.get("extends") if isinstance(data, dict) else None
        if not isinstance(ref, str):
            return chain
        file, line = data.pos("extends")
        parent = _resolve_parent(chain[-1], ref, file, line, site)
        if parent.resolve() in {p.resolve() for p in chain}:
            raise StackError(f"`extends` cycle through {parent}", file=file, line=line, key="extends")
        chain.append(parent)


def _load_with_extends(path: Path, seen: tuple[Path, ...], site: Site) -> PosDict:
    data = yamlpos.load(path, max_bytes=MAX_STACK_BYTES, max_nodes=MAX_STACK_NODES)
    if not isinstance(data, dict):
        raise StackError("a stack file is a mapping of keys (name, base, components, ...)", file=str(path),
                         line=getattr(data, "line", 1))
    if seen and any(key not in TOP for key in data):
        # A parent named by `extends` whose keys are not a stack's: say so without quoting any of
        # them (it may be a file that is not a stack at all, and its first line a secret).
        raise StackError(f"is not a stack file: {sum(key not in TOP for key in data)} of its top-level keys "
                         "are not stack keys", file=str(path),
                         hint=f"`extends` names a stack; stack keys are {', '.join(TOP)}")
    parent_ref = data.get("extends")
    if parent_ref is None:
        return merge.strip_removes(data)
    file, line = data.pos("extends")
    if not isinstance(parent_ref, str):
        raise StackError("expected a path to a parent stack file", file=file, line=line, key="extends")
    parent = _resolve_parent(path, parent_ref, file, line, site)
    if parent.resolve() in seen or parent.resolve() == path.resolve():
        raise StackError(f"`extends` cycle through {parent}", file=file, line=line, key="extends")
    parent_data = _load_with_extends(parent, seen + (path.resolve(),), site)
    merged = merge.merge(parent_data, data, parent_file=str(parent))
    merged.pop("extends", None)
    return merged


def _resolve_parent(path: Path, ref: str, file: str | None, line: int | None, site: Site) -> Path:
    """The file ``extends: ref`` names: ``ref`` (or ``ref.yaml``) under the child's own directory,
    else a stack of that name on the search path. Nothing else: an absolute path, a ``..`` or a
    link that leads out of the directory it was found in is refused, and so is a file that is not
    ``.yaml``/``.yml`` (a stack rendered from a pull request must not read the runner's files)."""
    rel = Path(ref)
    if not ref.strip() or rel.is_absolute() or ".." in rel.parts:
        raise StackError(f"parent stack {ref!r} is not a stack name or a path below {path.parent}", file=file,
                         line=line, key="extends",
                         hint="name a stack on the search path (e.g. base/cuda12-ubuntu22), or a file in "
                              "this stack's directory or below it; no absolute paths, no '..'")
    for root in [path.parent, *search_path(site)]:
        for name in (ref, f"{ref}.yaml"):
            candidate = root / name
            if not candidate.is_file():
                continue
            real, top = candidate.resolve(), root.resolve()
            if not real.is_relative_to(top):
                raise StackError(f"parent stack {ref!r} leads out of {root} (through a symbolic link)",
                                 file=file, line=line, key="extends",
                                 hint="`extends` reads stacks below the stack's own directory or on the "
                                      "search path only")
            if real.suffix not in searchpath.SUFFIXES:
                raise StackError(f"parent stack {ref!r} names {candidate.name}, which is not a stack file "
                                 f"({' or '.join(searchpath.SUFFIXES)})", file=file, line=line, key="extends")
            return candidate
    raise StackError(f"parent stack {ref!r} not found", file=file, line=line, key="extends",
                     hint=f"give a path relative to {path.parent} (with or without .yaml), or a name in "
                          + ", ".join(str(d) for d in search_path(site)))


def _resolve(raw: PosDict, top: dict, path: Path, variant: dict[str, str], site: Site) -> Stack:
    base_raw = raw["base"]
    base = schema.validate(base_raw, BASE, context="base")
    for key in ("image", "runtime"):
        # name[:tag]@sha256:<64 hex>: a digest pin (the tag kept for reading); anything else after '@' is a typo.
        if "@" in (base[key] or "") and not re.fullmatch(r"[^@\s]+@sha256:[0-9a-f]{64}", base[key]):
            file, line = base_raw.pos(key)
            raise StackError(f"{base[key]!r} has an '@' but no sha256 digest", file=file, line=line,
                             key=f"base.{key}", hint="pin as name:tag@sha256:<64 lowercase hex digits> (`docker "
                             "buildx imagetools inspect name:tag` prints the digest), or drop the '@…' part")
    name = top["name"] + "".join(f"-{v}" for v in variant.values())
    if variant and not re.fullmatch(NAME, name):
        file, line = raw.pos("matrix") if "matrix" in raw else (str(path), None)
        raise StackError(f"variant name {name!r} is not an image name", file=file, line=line, key="matrix",
                         hint=f"matrix value keys become part of it: {NAME_HELP}")
    arch = base["arch"]
    stack = Stack(
        name=name, file=str(path), stack_name=top["name"], variant=dict(variant),
        description=top["description"] or "",
        mirror=sources.resolve_mirror(str(path), top["mirror"]),
        base=Base(image=_local_base(base["image"], arch), runtime=_local_base(base["runtime"] or base["image"], arch),
                  distro=base["distro"], arch=arch, bootstrap=base["bootstrap"]),
        arches=(arch,), site=site,
    )
    substitutions = {"name": name, "stack": top["name"], "arch": arch, **variant}
    tags = raw.get("tags") or PosList()
    for i, tag in enumerate(top["tags"]):
        try:
            # Tags only reach the engine's API as arguments (never a script): the engine checks them.
            # A tag that does not name the arch itself ({arch}, or -sbsa, -arm64 in it) gets it
            # (x86_64's stays as written), so one stack's builds for two arches never share a tag.
            value = _substitute(tag, substitutions)
            named = "{arch}" in tag or platforms.names_arch(value, arch)
            stack.tags.append(value if named else platforms.local_tag(value, arch))
        except ValueError as exc:
            lines = getattr(tags, "lines", [])
            raise StackError(f"tag {tag!r}: {exc}", file=str(path),
                             line=lines[i] if i < len(lines) else None, key="tags",
                             hint="placeholders: " + ", ".join("{%s}" % k for k in substitutions)) from None

    comps_raw = raw.get("components") or PosDict()
    # Only the site components this stack names are imported (a site module is code: security-4 H10).
    known = components.known(site, [c for c, o in comps_raw.items() if o is not False and c not in RETIRED])
    for cname, copts in comps_raw.items():
        if copts is False:
            continue
        if cname in RETIRED:
            file, line = comps_raw.pos(cname)
            raise StackError(RETIRED[cname][0], file=file, line=line, key=f"components.{cname}",
                             hint=RETIRED[cname][1])
        if cname not in known:
            raise schema.unknown_key(comps_raw, cname, components.names(site), "components")
        if copts is None or copts is True:
            copts = PosDict(file=comps_raw.pos(cname)[0], line=comps_raw.pos(cname)[1])
        if not isinstance(copts, dict):
            file, line = comps_raw.pos(cname)
            raise StackError("expected a mapping of options (or {} for the defaults, false to drop it)",
                             file=file, line=line, key=f"components.{cname}")
        cls = known[cname]
        opts = schema.validate(copts, cls.all_options(), context=f"components.{cname}")
        stack.components[cname] = cls(stack, opts, where=copts)
    stack.components = dict(sorted(stack.components.items(), key=lambda kv: (kv[1].order, kv[0])))
    for component in stack.components.values():
        component.configure()
    stack.checks = _stack_checks(raw.get("checks") or PosList(), path)
    stack.packages = _packages(raw, top["packages"], stack.base, path)
    rules.enforce(stack)
    return stack


def _local_base(image: str, arch: str) -> str:
    """A base made by ``imagekit base`` (``imagekit/DISTRO:SUITE``) has one local tag per arch;
    any other image is a registry's, whose index the build's --platform picks from."""
    return platforms.local_tag(image, arch) if image.startswith("imagekit/") else image


def _substitute(tag: str, values: dict[str, str]) -> str:
    """Replace ``{key}`` placeholders; only plain names (str.format would also allow
    ``{name.attr}`` and ``{name[0]}``, which crash or silently mangle a tag)."""
    import string

    out = []
    for literal, field_name, spec, conversion in string.Formatter().parse(tag):
        out.append(literal)
        if field_name is None:
            continue
        if field_name not in values or spec or conversion:
            shown = "{" + field_name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ValueError(f"unknown placeholder {shown}")
        out.append(values[field_name])
    return "".join(out)


def _stack_checks(items: list, path: Path) -> list:
    out = []
    lines = getattr(items, "lines", [])
    for i, item in enumerate(items):
        key = f"checks[{i + 1}]"
        spec = schema.validate(item, CHECK_KEYS, context=key)
        kinds = [k for k in STACK_CHECK_KINDS if spec.get(k)]
        if len(kinds) != 1:
            raise StackError(f"a check needs exactly one of {', '.join(STACK_CHECK_KINDS)} (got "
                             f"{', '.join(kinds) or 'none'})", file=getattr(item, "file", None) or str(path),
                             line=lines[i] if i < len(lines) else None, key=key)
        kind = kinds[0]
        if spec["expect"] is not None:
            file, line = item.pos("expect")
            try:
                re.compile(spec["expect"])
            except re.error as exc:
                raise StackError(f"invalid regex: {exc}", file=file, line=line, key=f"{key}.expect",
                                 hint="it is a Python regular expression; escape ( [ . * with \\") from None
            if kind != "run":
                raise StackError(f"expect applies to run checks only, not to {kind}", file=file, line=line,
                                 key=f"{key}.expect", hint="drop it, or check the output of a command with run:")
        # The stack file's keys are the label's: the check is read the way an image's label is.
        label = {"id": f"stack.{spec['name']}", "describe": spec["describe"] or f"{kind}: {spec[kind]}",
                 "kind": kind, kind: spec[kind]}
        label.update({k: spec[k] for k in ("expect", "needs") if spec[k] is not None})
        try:
            out.append(checks_mod.from_dict(label))
        except checks_mod.InvalidCheck as exc:
            file, line = item.pos(kind)
            raise StackError(exc.problem, file=file, line=line, key=f"{key}.{kind}", hint=exc.hint) from None
    return out


def _packages(raw: PosDict, value: dict | None, base: Base, path: Path) -> list[Package]:
    """The ``packages:`` key: per stage, a list of names, or of ``{DISTRO: NAME, default: NAME}``
    mappings (a null name: none on that distro), each resolved for ``base.distro``."""
    if not value:
        return []
    file, line = raw.pos("packages")
    if base.family != "deb":
        raise StackError(f"packages: installs with apt, and {base.distro} is not a Debian-family distro",
                         file=file, line=line, key="packages", hint="drop it, or use a Debian/Ubuntu base")
    stages = schema.validate(value, PACKAGE_STAGES, context="packages")
    out: list[Package] = []
    for stage, items in stages.items():
        lines, files = getattr(items, "lines", []), getattr(items, "files", [])
        for i, item in enumerate(items):
            key = f"packages.{stage}[{i + 1}]"
            where = (files[i] if i < len(files) and files[i] else getattr(items, "file", None) or file,
                     lines[i] if i < len(lines) else line)
            name = _package_name(item, base.distro, where, key)
            if name is not None:
                out.append(Package(name, stage, where[0], where[1], key))
    return out


def _package_name(item: Any, distro: str, where: tuple[str | None, int | None], key: str) -> str | None:
    if isinstance(item, dict):
        for k in item:
            if k not in DISTROS and k != "default":
                raise schema.unknown_key(item, k, [*DISTROS, "default"], key)
        if distro not in item and "default" not in item:
            raise StackError(f"names no package for {distro}", file=where[0], line=where[1], key=key,
                             hint=f"add `{distro}: NAME` (or `{distro}: null` for none there), or `default: NAME`")
        item = item[distro] if distro in item else item["default"]
        if item is None:
            return None
    if not isinstance(item, str):
        raise StackError(f"expected a package name or a mapping of distro to name, got {item!r}",
                         file=where[0], line=where[1], key=key,
                         hint="e.g. `- htop` or `- {debian12: libhdf5-103-1, debian13: libhdf5-310}`")
    if not re.fullmatch(DEB_NAME, item):
        raise StackError(f"invalid package name {item!r}", file=where[0], line=where[1], key=key,
                         hint=DEB_NAME_HELP)
    return item
