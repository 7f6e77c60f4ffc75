"""The Stack model: load a stack file, apply ``extends`` and ``matrix``, validate, resolve.

A stack file names a base (devel and runtime images, distro, arch) and the
components to compose. ``extends`` deep-merges a parent file (child wins;
``component: false`` drops an inherited component). ``matrix`` expands one file
into variants: each axis maps a value key to an overlay, and a variant's name
is the stack's name followed by its value keys (``nccl-tests-cu124-x86_64``).
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit import checks as checks_mod
from imagekit import rules, schema, searchpath, settings, sources, yamlpos
from imagekit.components import RETIRED, registry
from imagekit.errors import StackError
from imagekit.schema import Option
from imagekit.yamlpos import PosDict, PosList

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
    "extends": Option(str, None, "a parent stack file, relative to this one"),
    "base": Option(dict, None, "base images, distro and arch", required=True),
    "components": Option(dict, {}, "component name -> options"),
    "tags": Option(list, [], "image tags; {name} and matrix axis names are substituted", item_type=str),
    "checks": Option(list, [], "extra checks run by `imagekit check`", item_type=dict),
    "matrix": Option(dict, None, "axis -> value key -> overlay"),
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
    "arch": Option(str, "x86_64", "CPU architecture", choices=ARCHES),
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
OVERLAY_KEYS = ("description", "base", "components", "tags", "checks")


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

    def get(self, name: str):
        return self.components.get(name)

    def has(self, name: str) -> bool:
        return name in self.components

    def provider(self, role: str):
        """The component that fills ``role`` (e.g. "mpi"), whichever it is, or None."""
        return next((c for c in self.components.values() if role in c.provides), None)

    def roles(self) -> dict[str, str]:
        """Role -> the name of the component that fills it."""
        return {role: c.name for c in reversed(list(self.components.values())) for role in c.provides}

    @property
    def image(self) -> str:
        """The local tag imagekit builds (tags from the stack are added on top)."""
        return f"imagekit/{self.name}:latest"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name, "stack": self.stack_name, "file": self.file, "variant": self.variant,
            "description": self.description,
            "base": {"image": self.base.image, "runtime": self.base.runtime, "distro": self.base.distro,
                     "arch": self.base.arch},
            "components": [c.describe() for c in self.components.values()],
            "tags": self.tags, "image": self.image,
        }


# -- locating stacks ----------------------------------------------------

SHIPPED_DIR = Path(__file__).resolve().parent / "stacks"
PATH_ENV = "IMAGEKIT_STACKS_PATH"
# Site stack directories given on the command line (--stacks-dir), searched first (the list is
# settings.stack_dirs itself, which the CLI's group fills without loading this module).
extra_dirs: list[Path] = settings.stack_dirs


def search_path() -> list[Path]:
    """Where stacks are found, in order: --stacks-dir, $IMAGEKIT_STACKS_PATH (os.pathsep-separated),
    then the shipped stacks ($IMAGEKIT_STACKS replaces the shipped directory itself)."""
    env = [Path(p) for p in os.environ.get(PATH_ENV, "").split(os.pathsep) if p]
    replaced = os.environ.get("IMAGEKIT_STACKS")
    return [*extra_dirs, *env, Path(replaced) if replaced else SHIPPED_DIR]


def available() -> list[tuple[Path, Path]]:
    """Every stack file on the search path with the directory it came from; a name found in an
    earlier directory hides the same name further on."""
    return list(searchpath.files(search_path()).values())


def shipped() -> list[Path]:
    return [path for path, _ in available()]


def find(ref: str) -> tuple[Path, str | None]:
    """A stack path or name (or a variant name) -> (file, variant name or None)."""
    path = Path(ref)
    if path.suffix in searchpath.SUFFIXES or path.exists():
        if not path.is_file():
            raise StackError("stack file not found", file=ref,
                             hint=f"shipped stacks: {', '.join(p.stem for p in shipped()) or 'none'}")
        return path, None
    for candidate in shipped():
        if candidate.stem == ref:
            return candidate, None
    broken: list[StackError] = []
    for candidate in shipped():
        try:
            variants = load_all(candidate)
        except StackError as exc:
            # A sibling that fails its own rules must not stop the lookup of the stack asked for (review 3
            # H11); it is named only if nothing matches, in case it was the one meant.
            broken.append(exc)
            continue
        for variant in variants:
            if variant.name == ref and variant.variant:
                return candidate, ref
    names = [p.stem for p in shipped()]
    import difflib
    close = difflib.get_close_matches(ref, names, n=1)
    unreadable = ("; stack files that could not be read (one may hold it): "
                  + "; ".join(e.message for e in broken)) if broken else ""
    raise StackError(f"unknown stack {ref!r}", hint=(f"did you mean {close[0]!r}? " if close else "")
                     + f"shipped stacks: {', '.join(names)} (or give a path to a .yaml file){unreadable}")


def load(ref: str | Path, variant: str | None = None, *, mirror: str | None = None) -> Stack:
    """One resolved stack; a matrix stack needs ``variant`` unless it has a single one.

    ``mirror`` (a directory or URL) overrides the stack's and $IMAGEKIT_MIRROR.
    """
    stack = _load_one(ref, variant)
    if mirror:
        stack.mirror = sources.resolve_mirror(stack.file, None, mirror)
    return stack


def _load_one(ref: str | Path, variant: str | None) -> Stack:
    path, implied = find(str(ref))
    variant = variant or implied
    stacks = load_all(path)
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


def load_all(path: str | Path) -> list[Stack]:
    """Every variant of the stack file at ``path`` (one when there is no matrix)."""
    path = Path(path)
    raw = _load_with_extends(path, seen=())
    top = schema.validate(raw, TOP, context="")
    matrix = top["matrix"]
    if not matrix:
        return [_resolve(raw, top, path, variant={})]
    variants = []
    axes = _matrix_axes(matrix)
    for combo in itertools.product(*[list(values.items()) for _, values in axes]):
        merged = raw
        keys = {}
        for (axis, _), (value_key, overlay) in zip(axes, combo):
            keys[axis] = str(value_key)
            if overlay:
                merged = deep_merge(merged, overlay)
        vtop = schema.validate(merged, TOP, context="")
        variants.append(_resolve(merged, vtop, path, variant=keys))
    return variants


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


def _load_with_extends(path: Path, seen: tuple[Path, ...]) -> PosDict:
    data = yamlpos.load(path)
    if not isinstance(data, dict):
        raise StackError("a stack file is a mapping of keys (name, base, components, ...)", file=str(path),
                         line=getattr(data, "line", 1))
    parent_ref = data.get("extends")
    if parent_ref is None:
        return data
    file, line = data.pos("extends")
    if not isinstance(parent_ref, str):
        raise StackError("expected a path to a parent stack file", file=file, line=line, key="extends")
    parent = _resolve_parent(path, parent_ref, file, line)
    if parent.resolve() in seen or parent.resolve() == path.resolve():
        raise StackError(f"`extends` cycle through {parent}", file=file, line=line, key="extends")
    parent_data = _load_with_extends(parent, seen + (path.resolve(),))
    merged = deep_merge(parent_data, data)
    merged.pop("extends", None)
    return merged


def _resolve_parent(path: Path, ref: str, file: str | None, line: int | None) -> Path:
    candidates = [path.parent / ref, path.parent / f"{ref}.yaml"]
    candidates += [d / name for d in search_path() for name in (ref, f"{ref}.yaml")]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise StackError(f"parent stack {ref!r} not found", file=file, line=line, key="extends",
                     hint=f"give a path relative to {path.parent} (with or without .yaml), or a name in "
                          + ", ".join(str(d) for d in search_path()))


def deep_merge(parent: Any, child: Any) -> Any:
    """Child wins; mappings merge key by key; lists and scalars are replaced."""
    if not (isinstance(parent, dict) and isinstance(child, dict)):
        return child
    out = PosDict(file=getattr(child, "file", None), line=getattr(child, "line", None))
    for key, value in parent.items():
        out[key] = value
        out.where[key] = parent.pos(key) if hasattr(parent, "pos") else (None, None)
    for key, value in child.items():
        out[key] = deep_merge(parent[key], value) if key in parent else value
        out.where[key] = child.pos(key) if hasattr(child, "pos") else (None, None)
    return out


def _resolve(raw: PosDict, top: dict, path: Path, variant: dict[str, str]) -> Stack:
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
    stack = Stack(
        name=name, file=str(path), stack_name=top["name"], variant=dict(variant),
        description=top["description"] or "",
        mirror=sources.resolve_mirror(str(path), top["mirror"]),
        base=Base(image=base["image"], runtime=base["runtime"] or base["image"], distro=base["distro"],
                  arch=base["arch"], bootstrap=base["bootstrap"]),
    )
    substitutions = {"name": name, "stack": top["name"], **variant}
    tags = raw.get("tags") or PosList()
    for i, tag in enumerate(top["tags"]):
        try:
            # Tags only reach the engine's API as arguments (never a script): the engine checks them.
            stack.tags.append(_substitute(tag, substitutions))
        except ValueError as exc:
            lines = getattr(tags, "lines", [])
            raise StackError(f"tag {tag!r}: {exc}", file=str(path),
                             line=lines[i] if i < len(lines) else None, key="tags",
                             hint="placeholders: " + ", ".join("{%s}" % k for k in substitutions)) from None

    known = registry()
    comps_raw = raw.get("components") or PosDict()
    for cname, copts in comps_raw.items():
        if copts is False:
            continue
        if cname in RETIRED:
            file, line = comps_raw.pos(cname)
            raise StackError(RETIRED[cname][0], file=file, line=line, key=f"components.{cname}",
                             hint=RETIRED[cname][1])
        if cname not in known:
            raise schema.unknown_key(comps_raw, cname, list(known), "components")
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
    rules.enforce(stack)
    return stack


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
                             f"{', '.join(kinds) or 'none'})", file=str(path),
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
