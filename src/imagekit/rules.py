"""Compatibility rules: refuse bad combinations before any build.

Most rules live with the component they constrain: what it ``requires`` (roles
such as "mpi" or "cuda", optionally only when one of its options is on) and its
``check_stack()``. This module keeps what truly spans components, as data:
roles that one image can fill only once, and the one rule that relates an
MPI to the UCX and PMIx it links. Each failure names the file, line and key,
and says what to change.
"""

from __future__ import annotations

from typing import Callable

from imagekit.components import EXCLUSIVE_ROLES, providers_of
from imagekit.util.errors import StackError

# A distro MPI links the distro's copies of these roles: an upstream build of one would sit unused.
DISTRO_MPI_LINKS = ("ucx", "pmix")


def _exclusive_roles(stack) -> None:
    """Two components that fill one exclusive role (two MPIs, two NCCLs) load each other's libraries."""
    for role in EXCLUSIVE_ROLES:
        filling = [c for c in stack.components.values() if role in c.provides]
        if len(filling) > 1:
            first, second = filling[0], filling[1]
            second.error(None, f"`{second.name}` and `{first.name}` both provide `{role}`; an image has one",
                         f"keep one of {', '.join(f'`{c.name}`' for c in filling)} "
                         f"(components that provide `{role}`: {', '.join(providers_of(role, stack.site))})")


def _same_source_mpi_stack(stack) -> None:
    """A distro MPI (Debian's OpenMPI) links the distro's UCX and PMIx: an upstream UCX/PMIx would sit unused."""
    mpi = stack.provider("mpi")
    if mpi is None or mpi.source != "distro":
        return
    for role in DISTRO_MPI_LINKS:
        dep = stack.provider(role)
        if dep is not None and dep.source == "upstream" and mpi.enabled(role):
            dep.error("source", f"`source: upstream` {dep.name} is not used by `source: distro` {mpi.name} "
                      f"(the distro's {mpi.name} links the distro's {role})",
                      f"use `source: distro` for {dep.name}, or `source: upstream` for {mpi.name}")


CHECKS: list[Callable] = [_exclusive_roles, _same_source_mpi_stack]


def enforce(stack) -> None:
    """Raise StackError for the first rule the stack breaks: requirements, then the cross-component
    rules, then each component's own ``check_stack``."""
    for component in stack.components.values():
        for requirement in component.requires:
            requirement.check(component)
    for check in CHECKS:
        check(stack)
    for component in stack.components.values():
        component.check_stack()


__all__ = ["CHECKS", "enforce", "StackError"]
