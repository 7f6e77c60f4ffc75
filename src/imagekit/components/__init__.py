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
"""

from __future__ import annotations

import importlib
import pkgutil

from imagekit.components._base import (EXCLUSIVE_ROLES, RETIRED, ROLES, SOURCES, Component, Requires,  # noqa: F401
                                       Stack, defined)

_REGISTRY: dict[str, type[Component]] | None = None


def registry() -> dict[str, type[Component]]:
    """Every component class by its stack key, in layer order, found by importing this package's modules."""
    global _REGISTRY
    if _REGISTRY is None:
        for mod in pkgutil.iter_modules(__path__):
            if not mod.name.startswith("_"):
                importlib.import_module(f"{__name__}.{mod.name}")
        _REGISTRY = defined()
    return _REGISTRY


def pinnable() -> set[str]:
    """The components with upstream release files, which a site pins file may pin."""
    return {name for name, cls in registry().items() if cls.upstream_file}


def providers_of(role: str) -> list[str]:
    """Names of the components that can fill ``role``, in layer order."""
    return [name for name, cls in registry().items() if role in cls.provides]


def forwarded_env_prefixes() -> tuple[str, ...]:
    """Every prefix some component asks launchers to forward into rank containers."""
    out: list[str] = []
    for cls in registry().values():
        out += [p for p in cls.forward_env if p not in out]
    return tuple(out)
