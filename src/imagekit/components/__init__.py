"""Components: one module each, discovered when a stack is first loaded.

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
Site modules are code, so one runs only when a stack being loaded names its component (:func:`known`;
:mod:`imagekit.components._site` finds it by name without running it), after the check that nobody
but root or the caller can change it (security-4 H10).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import pkgutil
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Iterable

from imagekit.components import _blocks as blocks  # noqa: F401 - for site components: apt_install, env, ...
from imagekit.components import _base, _site
from imagekit.components._base import (EXCLUSIVE_ROLES, RETIRED, ROLES, SOURCES, Component, Requires,  # noqa: F401
                                       Stack, contract_problems, defined)
from imagekit.components._site import ENTRY_POINTS, SITE_DIR  # noqa: F401 - their names, documented here
from imagekit.util import trusted_files
from imagekit.util.errors import UsageError
from imagekit.util.settings import Site

SITE_PACKAGE = "imagekit_site_components"  # the name site modules from a directory are imported under

_SHIPPED: dict[str, type[Component]] | None = None
# The site components imported so far, for one search path (its directories): a stack of another
# search path does not see them.
_SITE_KEY: tuple[str, ...] | None = None
_SITE_LOADED: dict[str, type[Component]] = {}


class SiteComponentError(UsageError):
    """A site component that cannot be loaded, or breaks the component contract."""


def shipped() -> dict[str, type[Component]]:
    """Every component this package ships, by its stack key, in layer order (its modules imported once)."""
    global _SHIPPED
    if _SHIPPED is None:
        for mod in pkgutil.iter_modules(__path__):
            if not mod.name.startswith("_"):
                importlib.import_module(f"{__name__}.{mod.name}")
        _SHIPPED = defined(site=False)
    return _SHIPPED


def known(site: Site | None = None, wanted: Iterable[str] = ()) -> dict[str, type[Component]]:
    """The shipped components, and of the site's those already loaded under this search path and
    those ``wanted`` names (a stack's keys) that no shipped component has: each imported now, after
    the check of who can change it. A site module no stack names never runs (security-4 H10)."""
    _site_loaded_for(site)
    offered = None
    for name in wanted:
        if name in shipped() or name in _SITE_LOADED:
            continue
        offered = _site.found(site) if offered is None else offered
        if name in offered:
            _SITE_LOADED[name] = _load(name, offered[name])
    found = {**shipped(), **_SITE_LOADED}
    return dict(sorted(found.items(), key=lambda kv: (kv[1].order, kv[0])))


def names(site: Site | None = None) -> list[str]:
    """Every component name a stack may use: the shipped ones and the site's, none of them imported."""
    return sorted({*shipped(), *_site.found(site)})


def registry(site: Site | None = None) -> dict[str, type[Component]]:
    """Every component class by its stack key, in layer order: this package's, then every one the
    site offers (each site module imported: for listings of all of them and the tests, never for
    loading a stack, which uses :func:`known`)."""
    return known(site, _site.found(site))


def _site_loaded_for(site: Site | None) -> None:
    """Forget the site components of an earlier search path (they carry no origin outside it)."""
    global _SITE_KEY
    key = tuple(str(d) for d in _site.dirs(site))
    if key != _SITE_KEY:
        for cls in _SITE_LOADED.values():
            cls.origin = None
        _SITE_LOADED.clear()
        _SITE_KEY = key


def _load(name: str, offers: list[_site.Found]) -> type[Component]:
    """The site component ``name``: its one module checked, imported, and held to the contract."""
    if len(offers) > 1:
        raise SiteComponentError(f"site component {name!r} is offered twice: {offers[0]} and {offers[1]}",
                                 "keep one of them (a stack directory's module or a distribution's entry point)")
    offer = offers[0]
    origin, module = (_import_file(offer.path) if offer.path is not None
                      else _import_entry_point(offer.entry_point))  # type: ignore[arg-type]
    classes = _classes_in(module)
    for cls in classes:
        problems = contract_problems(cls)
        if problems:
            raise SiteComponentError(f"site component {getattr(cls, 'name', cls.__name__)!r} ({origin}) "
                                     f"breaks the component contract: {'; '.join(problems)}",
                                     "see docs/site-extensions.md, \"Site components\"")
        if cls.name in shipped():
            raise SiteComponentError(f"site component {cls.name!r} ({origin}) has the name of another "
                                     "component (shipped with imagekit)", "rename it: `name = \"site-...\"`")
    if [cls.name for cls in classes] != [name]:
        raise SiteComponentError(f"site module {offer} must define one component, {name!r} (the name it is found "
                                 f"by); it defines {', '.join(repr(c.name) for c in classes)}",
                                 "one module per component, named for it (docs/site-extensions.md)")
    cls = classes[0]
    cls.origin = origin
    return cls


def _import_entry_point(ep: importlib.metadata.EntryPoint) -> tuple[str, ModuleType]:
    """(origin, module) of an ``imagekit.components`` entry point, its files checked before they run."""
    dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else "unknown distribution"
    origin = f"entry point {ep.value} ({dist})"
    for path in _module_files(ep.module):
        trusted_files.check(path, f"site component {origin}:")
    try:
        loaded = ep.load()
    except Exception as exc:  # noqa: BLE001 - a site package's import error, said in one line
        raise SiteComponentError(f"site component {origin} fails to import: {type(exc).__name__}: {exc}",
                                 f"fix the module, or uninstall {dist.split()[0]}") from None
    return origin, loaded if isinstance(loaded, ModuleType) else sys.modules[loaded.__module__]


def _module_files(name: str) -> list[Path]:
    """The files ``import name`` would run (each package's ``__init__.py``, then the module), found
    without running any of them; [] when the top package is not found (its import error says so)."""
    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.origin or not os.path.isabs(spec.origin):
        return []
    files, here = [Path(spec.origin)], Path(spec.origin).parent
    for part in parts[1:]:
        package, module = here / part / "__init__.py", here / f"{part}.py"
        found = package if package.exists() else module
        files.append(found)
        here = here / part
    return [f for f in files if f.exists()]


def _file_origin(path: Path) -> str:
    """The file's name and the start of its sha256: what made the layers, without the site's paths
    (a label in the recipe: a checkout's location must not change the recipe's hash)."""
    return f"{path.name} sha256:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"


def _import_file(path: Path) -> tuple[str, ModuleType]:
    """(origin, module) of one site module file, imported under a name that says which file it was,
    after the check that only root or the caller can change it."""
    trusted_files.check(path, "site component")    # code imagekit runs: only root's or the caller's
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"{SITE_PACKAGE}.{path.stem.replace('-', '_')}_{digest}"
    if name in sys.modules:
        return _file_origin(path), sys.modules[name]
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
    return _file_origin(path), module


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
    """What a site pins file may pin: the components with upstream release files, and the site's by name."""
    shipped()
    return _base.pinnable(site)


def providers_of(role: str, site: Site | None = None) -> list[str]:
    """Names of the components known so far (:func:`known`) that can fill ``role``, in layer order."""
    return [name for name, cls in known(site).items() if role in cls.provides]


def forwarded_env_prefixes(site: Site | None = None) -> tuple[str, ...]:
    """Every prefix some component known so far (:func:`known`) asks launchers to forward into rank containers."""
    out: list[str] = []
    for cls in known(site).values():
        out += [p for p in cls.forward_env if p not in out]
    return tuple(out)
