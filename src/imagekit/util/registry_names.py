"""One spelling for each registry and engine image, so that a policy rule matches what a job reaches.

Host names are case-insensitive and a trailing dot names the same host; ``05000`` is port 5000, and
443 is the port an HTTPS registry answers on without one; Docker Hub answers to three names. A rule
written for ``registry.example.org:5000/hpc/*`` must hold for ``Registry.Example.org.:05000/hpc/mpi``
too, or a later, broader rule applies to the same repository (security-4 H11). The site policy
(:mod:`imagekit.attest.policy`) matches these canonical names, and canonicalises its own patterns the
same way.
"""

from __future__ import annotations

import re

DOCKER_HUB = "registry-1.docker.io"
HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
HTTPS_PORT = 443

_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>[0-9]+))?")


def registry(name: str) -> str:
    """``host[:port]`` canonical: host lower case without its trailing dot, the port a number (none for
    443), Docker Hub's aliases as ``registry-1.docker.io``. A name that is not ``host[:port]`` (a
    pattern with wildcards) is only lower-cased."""
    m = _HOST_PORT.fullmatch(name)
    if m is None or "*" in name or "?" in name:
        return name.lower()
    host = m["host"].lower().rstrip(".")
    port = int(m["port"]) if m["port"] is not None else None
    canonical = host if port in (None, HTTPS_PORT) else f"{host}:{port}"
    return DOCKER_HUB if canonical in HUB_ALIASES else canonical


def repository(name: str) -> str:
    """``REGISTRY/REPOSITORY`` (what a policy rule matches for ``docker://``) with its registry canonical."""
    head, slash, rest = name.partition("/")
    return registry(head) + slash + rest


def engine_image(name: str) -> str:
    """An engine image's name as Docker shortens it (``docker.io/library/x:1`` is ``x:1``), with any
    other registry canonical; an image ID or a name that is not ``REPO[:TAG]`` stays as it is."""
    first, slash, rest = name.partition("/")
    if not slash:
        return name
    # The Docker CLI's rule: the first component is a registry when it has "." or ":", or is localhost.
    host, path = (registry(first), rest) if "." in first or ":" in first or first == "localhost" else (DOCKER_HUB, name)
    if host != DOCKER_HUB:
        return f"{host}/{path}"
    return path[len("library/"):] if path.startswith("library/") and path.count("/") == 1 else path
