"""Components: one module each, discovered when the registry is first asked for.

A component knows its options, its sources, the HPCCM building blocks for the
devel stage, what the runtime stage needs, the OCI labels it adds and the
checks it brings. It also says which *roles* it fills (``provides``: "mpi",
"nccl", "rdma", ...) and which roles it needs from the rest of the stack
(``requires``). Other components, the launchers, preflight and the benchmark
choice ask for a role ("the stack's MPI"), never for a component's name, so
adding a component (xpmem, a network plugin, another MPI, ...) means adding one module
here that defines a ``Component`` subclass (on :mod:`imagekit.components._base`), and
nothing else. The component modules import ``_base``, never this package, so the discovery
below points one way only; scripts/import_graph.py draws it as an edge from this package to
each component module, so the layer test sees those edges too.

A site adds its own components the same way, without forking imagekit (docs/site-extensions.md):
one module each, in a ``components/`` directory beside its stacks (any ``--stacks-dir`` or
``$IMAGEKIT_STACKS_PATH`` directory), or installed as a Python package that names the module under
the ``imagekit.components`` entry point group. A site component keeps the shipped ones' contract
(:func:`imagekit.components._base.contract_problems`) and may not take a shipped one's name; its
``origin`` (the file and its sha256, or the distribution) reaches ``imagekit show`` and the labels.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import pkgutil
import sys
import traceback
from pathlib import Path
from types import ModuleType

from imagekit.components import _blocks as blocks  # noqa: F401 - for site components: apt_install, env, ...
from imagekit.components._base import (EXCLUSIVE_ROLES, RETIRED, ROLES, SOURCES, Component, Requires,  # noqa: F401
                                       Stack, contract_problems, defined)
from imagekit.util.errors import UsageError
from imagekit.util.settings import Site, site_or_env

ENTRY_POINTS = "imagekit.components"     # the entry point group site packages name their modules under
SITE_DIR = "components"                  # beside a site's stacks: DIR/components/NAME.py
SITE_PACKAGE = "imagekit_site_components"  # the name site modules from a directory are imported under

_REGISTRY: dict[str, type[Component]] | None = None
_REGISTRY_KEY: tuple | None = None


class SiteComponentError(UsageError):
    """A site component that cannot be loaded, or breaks the component contract."""


def site_dirs(site: Site | None = None) -> list[Path]:
    """Where site component modules are looked for: components/ in each of the site's stack directories
    (default: the environment's site)."""
    return [d / SITE_DIR for d in site_or_env(site).stack_dirs if (d / SITE_DIR).is_dir()]


def registry(site: Site | None = None) -> dict[str, type[Component]]:
    """Every component class by its stack key, in layer order: this package's modules, then the
    site's (directories and entry points). Found again when the site directories change."""
    global _REGISTRY, _REGISTRY_KEY
    dirs = site_dirs(site)
    key = tuple(str(d) for d in dirs)
    if _REGISTRY is None or key != _REGISTRY_KEY:
        for mod in pkgutil.iter_modules(__path__):
            if not mod.name.startswith("_"):
                importlib.import_module(f"{__name__}.{mod.name}")
        for cls in (_REGISTRY or {}).values():   # site components of an earlier search path leave it
            if vars(cls).get("origin"):
                cls.origin = None
        found = defined(site=False)
        for origin, module in _site_modules(dirs):
            for cls in _classes_in(module):
                problems = contract_problems(cls)
                if problems:
                    raise SiteComponentError(f"site component {getattr(cls, 'name', cls.__name__)!r} ({origin}) "
                                             f"breaks the component contract: {'; '.join(problems)}",
                                             "see docs/site-extensions.md, \"Site components\"")
                if cls.name in found:
                    other = getattr(found[cls.name], "origin", None) or "shipped with imagekit"
                    raise SiteComponentError(f"site component {cls.name!r} ({origin}) has the name of another "
                                             f"component ({other})", "rename it: `name = \"site-...\"`")
                cls.origin = origin
                found[cls.name] = cls
        _REGISTRY = dict(sorted(found.items(), key=lambda kv: (kv[1].order, kv[0])))
        _REGISTRY_KEY = key
    return _REGISTRY


def _site_modules(dirs: list[Path]) -> list[tuple[str, ModuleType]]:
    """(origin, module) for every site component module: ``dirs`` first, then entry points."""
    out = []
    for directory in dirs:
        for path in sorted(directory.glob("*.py")):
            if path.name.startswith("_"):
                continue
            out.append((_file_origin(path), _import_file(path)))
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINTS), key=lambda e: e.name):
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else "unknown distribution"
        origin = f"entry point {ep.value} ({dist})"
        try:
            loaded = ep.load()
        except Exception as exc:  # noqa: BLE001 - a site package's import error, said in one line
            raise SiteComponentError(f"site component {origin} fails to import: {type(exc).__name__}: {exc}",
                                     f"fix the module, or uninstall {dist.split()[0]}") from None
        module = loaded if isinstance(loaded, ModuleType) else sys.modules[loaded.__module__]
        out.append((origin, module))
    return out


def _file_origin(path: Path) -> str:
    """The file's name and the start of its sha256: what made the layers, without the site's paths
    (a label in the recipe: a checkout's location must not change the recipe's hash)."""
    return f"{path.name} sha256:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"


def _import_file(path: Path) -> ModuleType:
    """Import one site module from its file, under a name that says which file it was."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"{SITE_PACKAGE}.{path.stem.replace('-', '_')}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SiteComponentError(f"site component {path} cannot be imported", "give it a .py name")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the site file's error, said in one line
        del sys.modules[name]
        # A SyntaxError knows its line; anything else raised while the module ran: its frame's line.
        line = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else next(
            (n for f, n in reversed(list(traceback.walk_tb(exc.__traceback__)))
             if f.f_code.co_filename == str(path)), None)
        raise SiteComponentError(f"site component {path}{f':{line}' if line else ''}: fails to import: "
                                 f"{type(exc).__name__}: {exc}", "fix the module, or move it out of "
                                 f"{path.parent}") from None
    return module


def _classes_in(module: ModuleType) -> list[type[Component]]:
    """The Component subclasses a site module defines (not those it imports)."""
    found = [obj for obj in vars(module).values()
             if isinstance(obj, type) and issubclass(obj, Component) and obj is not Component
             and obj.__module__ == module.__name__ and "name" in vars(obj)]
    if not found:
        raise SiteComponentError(f"site module {getattr(module, '__file__', module.__name__)} defines no component",
                                 "define a Component subclass with a `name` (docs/site-extensions.md)")
    return found


def pinnable(site: Site | None = None) -> set[str]:
    """The components with upstream release files, and the other source trees they build from (a
    component's ``parts``: libcxi's Cassini headers), which a site pins file may pin."""
    return ({name for name, cls in registry(site).items() if cls.upstream_file}
            | {part for cls in registry(site).values() for part in getattr(cls, "parts", {})})


def providers_of(role: str, site: Site | None = None) -> list[str]:
    """Names of the components that can fill ``role``, in layer order."""
    return [name for name, cls in registry(site).items() if role in cls.provides]


def forwarded_env_prefixes(site: Site | None = None) -> tuple[str, ...]:
    """Every prefix some component asks launchers to forward into rank containers."""
    out: list[str] = []
    for cls in registry(site).values():
        out += [p for p in cls.forward_env if p not in out]
    return tuple(out)
