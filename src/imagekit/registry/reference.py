"""Image references in every form Pyxis, Enroot and Docker users write them.

Enroot's grammar (``docker::_parse_uri`` in its src/docker.sh), which Pyxis
passes on as ``docker://…``:

- ``docker://[USER@]REGISTRY#IMAGE[:TAG][@DIGEST]`` — ``#`` separates the registry;
- ``docker://[USER@]REGISTRY/IMAGE[:TAG][@DIGEST]`` — the first component is a
  registry only when it contains ``.`` or ``:``, otherwise it is a Docker Hub
  namespace (so ``localhost/x`` is Docker Hub's ``localhost/x`` there);
- ``docker://[USER@]IMAGE[:TAG][@DIGEST]`` — Docker Hub's ``library/IMAGE``.

A digest wins over a tag; the tag defaults to ``latest``; ``docker.io`` and
``index.docker.io`` become ``registry-1.docker.io`` with ``library/`` for
one-component names. Without the ``docker://`` scheme the same forms are read
(``registry#repo:tag`` is what users give ``srun --container-image``), and the
Docker CLI's own rule applies to the first component: ``localhost`` is a
registry too (``imagekit push --to localhost:5000/x`` and ``localhost/x``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from imagekit.util.errors import UsageError
from imagekit.util.registry_names import DOCKER_HUB, HUB_ALIASES  # noqa: F401 - also this module's names

# Enroot's character classes (reg_image, reg_tag), with the digest made exact.
REPO_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")
TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
REGISTRY_RE = re.compile(r"[A-Za-z0-9.-]+(?::[0-9]+)?|\[[0-9A-Fa-f:]+\](?::[0-9]+)?")

VALID_FORMS = ("docker://[USER@]REGISTRY#REPO[:TAG][@sha256:…], REGISTRY#REPO[:TAG], "
               "REGISTRY/REPO[:TAG], REPO@sha256:… (Docker Hub); e.g. 127.0.0.1:5000#hpc/mpi:1")


@dataclass(frozen=True)
class Reference:
    """One image in one repository: by tag, or pinned by digest (then the tag is informative)."""

    registry: str
    repository: str
    tag: str = "latest"
    digest: str | None = None
    user: str | None = None       # the USER@ part: which credentials entry to use

    @property
    def reference(self) -> str:
        """What goes after ``/manifests/``: the digest when pinned, else the tag."""
        return self.digest or self.tag

    def with_digest(self, digest: str) -> "Reference":
        return Reference(self.registry, self.repository, self.tag, digest, self.user)

    @property
    def docker(self) -> str:
        """``registry/repo:tag`` or ``registry/repo@digest``, as the Docker CLI writes it."""
        return f"{self.registry}/{self.repository}" + (f"@{self.digest}" if self.digest else f":{self.tag}")

    @property
    def pyxis(self) -> str:
        """``registry#repo:tag`` (or ``@digest``), the form for ``srun --container-image``."""
        return f"{self.registry}#{self.repository}" + (f"@{self.digest}" if self.digest else f":{self.tag}")

    def __str__(self) -> str:
        return self.docker


def _bad(ref: str, why: str) -> UsageError:
    return UsageError(f"invalid image reference {ref!r}: {why}", f"valid forms: {VALID_FORMS}")


def _looks_like_registry(first: str, scheme: bool) -> bool:
    # Enroot (docker://): "." or ":" only. The Docker CLI also takes "localhost".
    return "." in first or ":" in first or (not scheme and first == "localhost")


def parse(ref: str) -> Reference:
    """Parse any form above into a :class:`Reference`; UsageError names the reference otherwise."""
    text = ref.strip()
    scheme = False
    if "://" in text:
        name, _, text = text.partition("://")
        if name != "docker":
            raise _bad(ref, f"the {name}:// scheme is not a registry "
                            "(dockerd:// and podman:// name local images: use the image name)")
        scheme = True
    if not text:
        raise _bad(ref, "it is empty")
    digest = None
    head, at, tail = text.rpartition("@")
    if at and re.match(r"(sha256|sha384|sha512):", tail) and not set("#/") & set(tail):
        if not DIGEST_RE.fullmatch(tail):
            raise _bad(ref, f"{tail!r} is not a sha256 digest (sha256: and 64 lower-case hex digits)")
        digest, text = tail, head
    user = None
    if "#" in text:
        left, _, rest = text.partition("#")
        if "@" in left:
            user, _, left = left.rpartition("@")
        if not left or "/" in left:
            raise _bad(ref, f"{left!r} before '#' is not a registry host[:port]")
        registry = left
    else:
        first, slash, after = text.partition("/")
        if "@" in first:
            user, _, first = first.rpartition("@")
        if slash and _looks_like_registry(first, scheme):
            registry, rest = first, after
        else:
            registry, rest = DOCKER_HUB, (f"{first}/{after}" if slash else first)
    tag = "latest"
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, _, tag = rest.rpartition(":")
        if not TAG_RE.fullmatch(tag):
            raise _bad(ref, f"bad tag {tag!r} (letters, digits, . _ -, at most 128)")
    if not REGISTRY_RE.fullmatch(registry):
        raise _bad(ref, f"bad registry {registry!r} (host[:port])")
    if registry in HUB_ALIASES:
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in rest:
        rest = f"library/{rest}"
    if not rest or not REPO_RE.fullmatch(rest):
        raise _bad(ref, f"bad repository name {rest!r} (lower case: letters, digits, . _ - and /)")
    if user is not None and not user:
        raise _bad(ref, "empty user before '@'")
    return Reference(registry=registry, repository=rest, tag=tag, digest=digest, user=user)
