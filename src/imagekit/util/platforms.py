"""CPU architectures and OCI platforms: one vocabulary for stacks, tags, indexes and nodes.

Each tool names an architecture its own way: a stack file and ``uname -m`` say ``x86_64`` and
``aarch64``; OCI indexes, image configs, Debian and ``docker --platform`` say ``amd64`` and
``arm64``; NVIDIA's CUDA repositories say ``x86_64`` and ``sbsa``. This module maps them onto
one another, picks an image's entry out of a multi-platform index (for exports, the registry
client, the Pyxis importer and ``launch``), and names the local tag of a build for an
architecture, so that an arm64 build never replaces the amd64 image of the same stack:

- an x86_64 build keeps the tag it always had (``imagekit/debian-mpi:latest``);
- any other architecture gets ``-ARCH`` after the tag (``imagekit/debian-mpi:latest-arm64``,
  ``imagekit/debian:bookworm-arm64``).

Nothing here opens a file or a connection: index *selection* lives here, index and blob
*reading* stays with each source.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from imagekit.util.errors import ImagekitError, UsageError


@dataclass(frozen=True)
class Arch:
    stack: str        # the stack file's and uname's name: x86_64, aarch64
    oci: str          # OCI / Go / Debian / Docker: amd64, arm64
    cuda_repo: str    # NVIDIA's repository and toolkit target directory: x86_64, sbsa


ARCHES: dict[str, Arch] = {
    "x86_64": Arch("x86_64", "amd64", "x86_64"),
    "aarch64": Arch("aarch64", "arm64", "sbsa"),
}
# Every spelling a user, a node or an image config may use -> the stack's name.
ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "x86-64": "x86_64", "x64": "x86_64",
           "aarch64": "aarch64", "arm64": "aarch64", "arm64v8": "aarch64", "sbsa": "aarch64"}
# The architecture whose local tags carry no suffix (what every tag meant before arm64 builds).
UNSUFFIXED = "x86_64"


class PlatformError(ImagekitError):
    """An image, index or stack offers no entry for the platform asked for."""

    exit_code = 2


@dataclass(frozen=True)
class Platform:
    os: str
    architecture: str               # OCI spelling: amd64, arm64
    variant: str | None = None

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)

    @property
    def arch(self) -> str:
        """The stack's spelling (x86_64, aarch64), or the OCI one for an architecture imagekit
        does not build."""
        return ALIASES.get(self.architecture, self.architecture)

    def as_dict(self) -> dict[str, str]:
        return {"os": self.os, "architecture": self.architecture, **({"variant": self.variant} if self.variant else {})}

    @classmethod
    def of(cls, doc: Mapping[str, Any] | None) -> Platform:
        """An OCI ``platform`` object, or an image config / ``docker inspect`` (os, architecture)."""
        doc = doc or {}
        arch = str(doc.get("architecture") or doc.get("Architecture") or "")
        return cls(str(doc.get("os") or doc.get("Os") or "linux"), oci_name(arch) if arch else "",
                   str(doc.get("variant") or doc.get("Variant") or "") or None)


def stack_name(name: str) -> str:
    """Any spelling of a known architecture -> the stack's (``arm64`` -> ``aarch64``); unknown
    names are returned unchanged (the caller decides whether that is an error)."""
    return ALIASES.get(name.strip().lower(), name)


def oci_name(name: str) -> str:
    """Any spelling -> the OCI one (``aarch64`` -> ``arm64``); unknown names unchanged."""
    arch = ARCHES.get(stack_name(name))
    return arch.oci if arch else name


def of_arch(arch: str) -> Platform:
    """The OCI platform a stack's ``arch`` builds (``aarch64`` -> linux/arm64)."""
    return Platform("linux", oci_name(arch))


def parse(text: str, what: str = "--platform") -> Platform:
    """``linux/arm64``, ``linux/arm64/v8``, or a bare architecture (``arm64``, ``aarch64``)."""
    parts = text.strip().split("/")
    if len(parts) == 1 and parts[0]:
        parts = ["linux", parts[0]]
    if len(parts) not in (2, 3) or not all(parts):
        raise UsageError(f"{what} {text!r} is not OS/ARCH[/VARIANT]",
                         "e.g. linux/amd64 or linux/arm64 (several: linux/amd64,linux/arm64)")
    return Platform(parts[0], oci_name(parts[1]), parts[2] if len(parts) == 3 else None)


def parse_list(text: str | Iterable[str] | None, what: str = "--platform") -> list[Platform]:
    """A comma-separated list (or several values of a repeated option), duplicates dropped."""
    if not text:
        return []
    items = text.split(",") if isinstance(text, str) else [p for t in text for p in t.split(",")]
    out: list[Platform] = []
    for item in items:
        if item.strip():
            p = parse(item, what)
            if p not in out:
                out.append(p)
    return out


def buildable(platform: Platform, what: str = "--platform") -> str:
    """The stack arch that builds ``platform``, or the error naming the ones imagekit builds."""
    arch = platform.arch
    if platform.os != "linux" or arch not in ARCHES:
        raise PlatformError(f"{what} {platform}: imagekit builds linux images for "
                            + ", ".join(str(of_arch(a)) for a in ARCHES),
                            "use linux/amd64 or linux/arm64")
    return arch


def host_machine() -> str:
    """This machine's ``uname -m``."""
    return os.uname().machine


def host() -> Platform:
    """This machine's platform, as an index entry would name it."""
    return Platform("linux", oci_name(host_machine()))


def tag_suffix(arch: str) -> str:
    """``""`` for x86_64, ``-arm64`` for aarch64 (see the module docstring)."""
    arch = stack_name(arch)
    return "" if arch == UNSUFFIXED else f"-{oci_name(arch)}"


def local_tag(ref: str, arch: str) -> str:
    """``repo:tag`` for ``arch``: the same for x86_64, ``repo:tag-arm64`` for arm64; a reference
    pinned by digest is returned unchanged (a digest names one image of one architecture)."""
    suffix = tag_suffix(arch)
    if not suffix or "@" in ref:
        return ref
    repo, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:          # no tag: host:port/repo, or a bare name
        repo, tag = ref, "latest"
    return ref if tag.endswith(suffix) else f"{repo}:{tag}{suffix}"


def names_arch(ref: str, arch: str) -> bool:
    """Whether ``ref`` names ``arch`` already, in any spelling, as a word (``:2.19-sbsa``,
    ``hpc/mpi-arm64``): such a tag needs no suffix to stay apart from another arch's."""
    spellings = [name for name, to in ALIASES.items() if to == stack_name(arch)]
    return any(re.search(rf"(?<![A-Za-z0-9]){re.escape(s)}(?![A-Za-z0-9])", ref) for s in spellings)


def matches(entry_platform: Mapping[str, Any] | None, want: Platform) -> bool:
    have = Platform.of(entry_platform)
    return (have.architecture == want.architecture and have.os == want.os
            and (want.variant is None or have.variant == want.variant))


def offered(entries: Iterable[Mapping[str, Any]]) -> list[str]:
    """The platforms an index's entries name, sorted (attestation entries, ``unknown/unknown``,
    are left out: they are no image)."""
    names = {str(Platform.of(e.get("platform"))) for e in entries if isinstance(e, Mapping)}
    return sorted(n for n in names if "unknown" not in n)


def pick(entries: list[Mapping[str, Any]], want: Platform | None, what: str,
         hint: str = "pick one of those with --platform OS/ARCH") -> Mapping[str, Any]:
    """The entry of an index's ``manifests`` for ``want`` (default: this machine's platform).

    The error names the platform asked for and every platform the index has, so a job that would
    have failed with "exec format error" inside its container stops before it starts."""
    want = want or host()
    found = [e for e in entries if isinstance(e, Mapping) and matches(e.get("platform"), want)]
    if not found:
        have = offered(entries)
        raise PlatformError(f"{what} has no {want} image (it has: {', '.join(have) or 'none'})", hint)
    # Several entries for one platform: the one without a variant constraint first (v8 is arm64's
    # only variant in practice), else the index's order, as Docker and containerd pick.
    return found[0]


def check_runs_here(image_platform: Platform, what: str, node: Platform | None = None,
                    hint: str | None = None) -> None:
    """Refuse an image whose architecture the node cannot run natively, naming both: the job
    stops here instead of failing with "exec format error" inside its container."""
    node = node or host()
    if not image_platform.architecture or image_platform.architecture == node.architecture:
        return
    raise PlatformError(f"{what} is a {image_platform} image, but this node is {node} ({node.arch})",
                        hint or f"push a {node} image under the same reference (one index for both "
                                f"platforms: imagekit push IMAGE --platform {node},{image_platform} --to "
                                f"REF), or run the job on {image_platform.arch} nodes")
