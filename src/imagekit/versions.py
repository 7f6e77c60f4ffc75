"""Versions as data: each pin of a stack against what is served today.

A pin is a component's version (or a pip requirement with ``==``) as the stack
file writes it. PyPI pins (NCCL and CUDA wheels, torch, pip requirements) are
compared with what pip's own configured index serves (``pip index versions``:
its index-url, extra-index-url and find-links, so a site's proxy or mirror
answers, and no host is named here). NCCL from NVIDIA's apt repo is compared with
the NCCL wheel of the same CUDA major (the same releases; the apt repo itself is
the registry's, out of reach here). Upstream release files are compared with the
site mirror's listing when a mirror directory is given, and with the versions
imagekit (and the site pins file) pin otherwise. A component taken from the
distro (Debian's or Ubuntu's package of the base release) is compared with the
newest upstream release imagekit pins, which is how far the distro lags. Base
images are listed with whether they are pinned by digest (the registry is not
asked here: ``imagekit build`` verifies a pinned digest against its tag).

A mirror (or imagekit's pins) knows only what someone put there, so a
source-built pin is also held to upstream (fourth CUDA review, J8): the newest
release in imagekit's own upstream data (``data/upstream-releases.yaml``, dated),
and, with ``upstream=True`` (``--upstream``, where a site lets the machine reach
upstream), what upstream's release feed lists now. Each row says which of these
its "upstream" column is, so "newest" never silently means "newest in the mirror".
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from packaging.version import InvalidVersion, Version

from imagekit import components, sources
from imagekit.util.errors import ImagekitError
from imagekit.util import own_python


@dataclass
class Row:
    stack: str
    component: str
    package: str        # what is looked up: a PyPI name, or the upstream file's name pattern
    pinned: str
    newest: str | None  # newest served, None when nothing is served (or nothing could be asked)
    behind: str         # "yes", "no", "not served", "unknown"
    where: str          # "package index", "site mirror", "imagekit pins"
    file: str | None = None
    line: int | None = None
    key: str = ""
    upstream: str | None = None   # newest upstream release (source-built pins), None when unknown
    upstream_from: str = ""       # "imagekit's upstream data (as of ...)", "upstream's release feed", ...

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class PackageIndexError(ImagekitError):
    """pip itself could not be run to ask the package index."""

    exit_code = 2


_INDEX_CACHE: dict[str, list[str]] = {}


def served(package: str) -> list[str]:
    """The versions pip's configured index serves for ``package``, newest first ([] when none)."""
    if package not in _INDEX_CACHE:
        try:
            # Isolated: `python -m pip` would import a pip/ package from the caller's directory.
            proc = subprocess.run(own_python.argv("pip", "index", "versions", package, "--disable-pip-version-check"),
                                  env=own_python.environ(), capture_output=True, text=True, timeout=180)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PackageIndexError(f"cannot ask the package index about {package}: {exc}",
                                    "check pip's index settings (pip config list)") from None
        found = re.search(r"^Available versions: (.*)$", proc.stdout, re.M)
        _INDEX_CACHE[package] = [v.strip() for v in found.group(1).split(",")] if found else []
    return _INDEX_CACHE[package]


def _newest(versions: list[str]) -> str | None:
    parsed = []
    for v in versions:
        try:
            parsed.append((Version(v), v))
        except InvalidVersion:
            continue
    return max(parsed)[1] if parsed else None


def _behind(pinned: str, newest: str | None, available: list[str]) -> str:
    if newest is None:
        return "not served"
    try:
        if not any(Version(v) == Version(pinned) for v in available):
            return "not served"
        return "yes" if Version(pinned) < Version(newest) else "no"
    except InvalidVersion:
        return "unknown"


def _pos(component, key: str = "version") -> tuple[str | None, int | None]:
    where = component.where
    if where is not None and hasattr(where, "pos") and key in where:
        return where.pos(key)
    return getattr(where, "file", component.stack.file), getattr(where, "line", None)


def _pypi_pins(component) -> list[tuple[str, str, str]]:
    """(PyPI name, pinned version, option key) for what this component takes from the package index."""
    name, version = component.name, component.opts.get("version")
    if name == "nccl" and version and component.source in ("pypi", "repo") and component.cuda:
        # The repo's libnccl2 and the wheel are the same NCCL release, packaged twice.
        return [(f"nvidia-nccl-cu{component.cuda.split('.')[0]}", version.split("-")[0], "version")]
    if name == "cuda" and component.source == "pypi" and version:
        return [("cuda-toolkit", version, "version")]
    if name == "pytorch" and version:
        return [("torch", version, "version")]
    out = []
    for req in component.opts.get("pip") or []:
        found = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;,]+)\s*", req)
        if found:
            out.append((found.group(1), found.group(3), "pip"))
    return out


def _mirror_versions(component, mirror: str) -> list[str]:
    """Versions of this component's release file in a mirror directory."""
    template = component.upstream_file[0].replace("{tag}", "{version}")
    if template.count("{version}") != 1 or re.search(r"\{(?!version\})", template):
        return []  # named by more than its version (HPC-X's build label): not listable
    head, tail = (re.escape(part) for part in template.split("{version}"))
    pattern = re.compile(head + r"(\d[\w.+-]*?)" + tail)
    return [m.group(1) for path in sorted(Path(mirror).iterdir()) if (m := pattern.fullmatch(path.name))]


UPSTREAM_DATA = Path(__file__).resolve().parent / "data" / "upstream-releases.yaml"


@lru_cache(maxsize=1)
def upstream_data() -> dict[str, Any]:
    """imagekit's upstream data: {"as_of": ..., "releases": {component: {newest, date, feed}}}."""
    return yaml.safe_load(UPSTREAM_DATA.read_text())


_FEED_CACHE: dict[str, tuple[str | None, str]] = {}


def _tag_version(tag: str) -> str | None:
    found = re.search(r"(\d+(?:\.\d+)+)", tag)
    return found.group(1) if found else None


def ask_upstream(feed: str, timeout: float = 15) -> tuple[str | None, str]:
    """(newest release, what was asked or why not) from a GitHub releases or tags feed (JSON list of
    objects with ``tag_name`` or ``name``; drafts and pre-releases skipped)."""
    if feed not in _FEED_CACHE:
        try:
            with urllib.request.urlopen(feed, timeout=timeout) as response:
                entries = json.load(response)
            found = [_tag_version(str(e.get("tag_name") or e.get("name") or "")) for e in entries
                     if isinstance(e, dict) and not e.get("draft") and not e.get("prerelease")]
            _FEED_CACHE[feed] = (_newest([v for v in found if v]), "upstream's release feed")
        except (OSError, ValueError) as exc:
            _FEED_CACHE[feed] = (None, f"upstream not reachable ({exc.__class__.__name__})")
    return _FEED_CACHE[feed]


def upstream_newest(component: str, ask: bool = False) -> tuple[str | None, str]:
    """(newest upstream release of ``component``, where that comes from): imagekit's dated data, and with
    ``ask`` what upstream's feed lists when it answers (the newer of the two)."""
    data = upstream_data()
    entry = (data.get("releases") or {}).get(component)
    if not entry:
        return None, "not in imagekit's upstream data"
    known, where = str(entry["newest"]), f"imagekit's upstream data (as of {data.get('as_of')}; --upstream asks)"
    if not ask:
        return known, where
    asked, how = ask_upstream(str(entry["feed"]))
    if asked is None:
        return known, f"{how}: imagekit's upstream data (as of {data.get('as_of')})"
    return (_newest([known, asked]) or asked), how


def rows(stack, mirror: str | None = None, upstream: bool = False) -> list[Row]:
    """One row per pin of ``stack`` (a resolved variant); ``upstream``: ask upstream's release feeds."""
    out = []
    for component in stack.components.values():
        for package, pinned, key in _pypi_pins(component):
            available = served(package)
            newest = _newest(available)
            file, line = _pos(component, key)
            out.append(Row(stack.stack_name, component.name, package, pinned, newest,
                           _behind(pinned, newest, available), "package index", file, line,
                           f"components.{component.name}.{key}"))
        if component.upstream_file and component.source == "upstream" and component.opts.get("version"):
            pinned = component.pin_version
            if mirror and not sources._is_url(mirror) and Path(mirror).is_dir():
                available, where = _mirror_versions(component, mirror), "site mirror"
            else:
                pins = {**sources.PINS, **sources.site_pins(components.pinnable(stack.site), stack.site)}
                available, where = [v for (c, v) in pins if c == component.name], "imagekit pins"
            newest = _newest(available)
            file, line = _pos(component)
            behind = _behind(pinned, newest, available)
            if behind == "not served" and where == "imagekit pins":
                behind = "unknown"  # a stack's own `sha256:` pins what imagekit does not list
            latest, latest_from = upstream_newest(component.name, upstream)
            if behind in ("no", "unknown") and latest and _older(pinned, latest):
                behind = "yes"      # the mirror has not caught up: behind upstream all the same
            out.append(Row(stack.stack_name, component.name,
                           component.upstream_file[0].replace("{tag}", "{version}"), pinned, newest, behind, where,
                           file, line, f"components.{component.name}.version", latest, latest_from))
    return out


def _older(pinned: str, than: str) -> bool:
    try:
        return Version(pinned) < Version(than)
    except InvalidVersion:
        return False


def distro_rows(stack) -> list[Row]:
    """Components from the base distro's packages against the newest upstream release imagekit pins."""
    out = []
    pins = {**sources.PINS, **sources.site_pins(components.pinnable(stack.site), stack.site)}
    for component in stack.components.values():
        if component.source != "distro" or component.version in ("distro", "unknown"):
            continue
        upstream = [v for (c, v) in pins if c == component.name]
        newest = _newest(upstream)
        try:
            behind = "unknown" if newest is None else "yes" if Version(component.version) < Version(newest) else "no"
        except InvalidVersion:
            behind = "unknown"
        file, line = _pos(component, "source")
        out.append(Row(stack.stack_name, component.name, f"{stack.base.distro} package", component.version, newest,
                       behind, "upstream (imagekit pins)", file, line, f"components.{component.name}.source"))
    return out


def base_rows(stack) -> list[Row]:
    """The stack's base images: the tag, and whether a digest pins it (locally made bases cannot be)."""
    out = []
    for key, ref in (("image", stack.base.image), ("runtime", stack.base.runtime)):
        if ref.startswith("imagekit/") or (key == "runtime" and ref == stack.base.image):
            continue
        name, _, digest = ref.partition("@")
        out.append(Row(stack.stack_name, f"base.{key}", name, name.rpartition(":")[2],
                       None, "unknown", "digest-pinned" if digest else "tag only, not pinned by digest",
                       stack.file, None, f"base.{key}"))
    return out


def report(stacks: list, mirror: str | None = None, upstream: bool = False) -> list[Row]:
    """Rows for every variant of every stack, one per distinct pin of each stack file."""
    seen, out = set(), []
    for stack in stacks:
        for row in rows(stack, mirror, upstream) + distro_rows(stack) + base_rows(stack):
            key = (row.stack, row.component, row.package, row.pinned)
            if key not in seen:
                seen.add(key)
                out.append(row)
    return out
