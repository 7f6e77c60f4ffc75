"""Before a build: every distro package a stack file names must be in its base's archive.

A misspelt package would otherwise fail minutes into the build, in an ``apt-get`` log line that
does not point back at the stack file. The names checked are the stack's ``packages:`` and the
packages components make from options the stack file wrote (``python.packages`` -> python3-X).

Where the archive is comes from the base image itself: an ``imagekit base`` image's labels
(``io.imagekit.base``, ``.base.mirror``, ``.base.components``), else its apt sources
(``/etc/apt/sources.list`` and ``sources.list.d``, one-line and deb822) read in one throwaway
container. The archive's ``Packages`` index (``.xz``, ``.gz`` or plain) is read once and its
package names (and the names packages provide) are kept in the user's cache for a day, so the check
is a set lookup for every later build, and works offline from the cache (a stale cache is used, and
said to be, when the archive cannot be reached). When neither the archive nor a cache can be read,
nothing is refused: the check says what it could not check, and the build goes on.
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
import lzma
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from imagekit import engines, image_facts
from imagekit.util import atomic
from imagekit.util.errors import EngineError, StackError

DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
MAX_AGE = 24 * 3600          # seconds a cached index is used without asking the archive
TIMEOUT = 30                 # seconds per request to the archive
MAX_INDEX_BYTES = 512 << 20  # a Packages index uncompressed (bookworm main amd64: 48 MiB)
SOURCES_SCRIPT = ("for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; "
                  "do [ -f \"$f\" ] && printf '### %s\\n' \"$f\" && cat \"$f\"; done; true")
_PACKAGE = re.compile(rb"^(?:Package|Provides): (.*)$", re.M)


@dataclass(frozen=True)
class Archive:
    """One suite of one apt archive, as a base image's sources name it."""

    mirror: str                     # http(s):// or file:// URL of the archive root
    suite: str
    components: tuple[str, ...]

    def index_urls(self, arch: str, component: str) -> list[str]:
        base = f"{self.mirror.rstrip('/')}/dists/{self.suite}/{component}/binary-{arch}/Packages"
        return [base + ".xz", base + ".gz", base]

    def describe(self) -> str:
        return f"{self.mirror} {self.suite} {' '.join(self.components)}"


@dataclass
class Result:
    """What the check did: ``checked`` packages, and why any were not (``reason``)."""

    checked: list[str] = field(default_factory=list)
    reason: str = ""
    archives: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Named:
    """A package a stack file names, with where it was written."""

    package: str
    file: str | None
    line: int | None
    key: str
    owner: str = ""        # who named it, when not the stack file itself


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "imagekit" / "apt-index"


def named_packages(stack) -> list[tuple[str, Named]]:
    """(stage's base image, package) for every package the stack file names."""
    out = []
    for p in stack.packages:
        image = stack.base.image if p.stage == "devel" else stack.base.runtime
        out.append((image, Named(p.name, p.file, p.line, p.key)))
    for component in stack.components.values():
        if component.source == "distro":
            # What the component's module names (a site module may misspell it too): at its stack key.
            where = component.where
            file = getattr(where, "file", None) or stack.file
            owner = f" (component {component.name}, {component.origin or 'shipped with imagekit'})"
            for package in component.packages(devel=True):
                out.append((stack.base.image, Named(package, file, getattr(where, "line", None),
                                                    f"components.{component.name}", owner)))
        for package, key, index in component.written_packages():
            raw = component.where.get(key) if component.where is not None else None
            lines, files = getattr(raw, "lines", []), getattr(raw, "files", [])
            file = (files[index] if index < len(files) and files[index] else None) or \
                getattr(raw, "file", None) or stack.file
            line = lines[index] if index < len(lines) else None
            out.append((stack.base.runtime, Named(package, file, line, f"components.{component.name}.{key}[{index + 1}]")))
    return out


def check(stack, *, engine_name: str = "docker", log: Callable[[str], None] = lambda _m: None,
          max_age: float = MAX_AGE) -> Result:
    """Refuse (StackError, naming file, line and key) a package the base's archive does not have."""
    wanted = named_packages(stack)
    result = Result()
    if not wanted:
        return result
    arch = DEB_ARCH.get(stack.base.arch, stack.base.arch)
    by_image: dict[str, list[Named]] = {}
    for image, named in wanted:
        by_image.setdefault(image, []).append(named)
    unknown: list[tuple[Named, set[str], list[str]]] = []
    for image, packages in by_image.items():
        archives, reason = archives_of(image, engine_name)
        if not archives:
            result.reason = reason
            continue
        names: set[str] = set()
        for archive in archives:
            got, note = archive_names(archive, arch, log=log, max_age=max_age)
            if got is None:
                result.reason = note
                names = set()
                break
            names |= got
            if note:
                result.notes.append(note)
            result.archives.append(f"{archive.describe()} ({arch})")
        if not names:
            continue
        for named in packages:
            if named.package in names:
                result.checked.append(named.package)
            else:
                unknown.append((named, names, [a.describe() for a in archives]))
    if unknown:
        first, names, where = unknown[0]
        close = _close(first.package, names)
        others = [f"{n.package} (line {n.line})" for n, _, _ in unknown[1:]]
        hint = (f"did you mean {close!r}? " if close else "") + \
            f"the index read: {'; '.join(where)} ({arch})" + \
            (f"; also not there: {', '.join(others)}" if others else "")
        raise StackError(f"no package {first.package!r}{first.owner} in the base image's archive", file=first.file,
                         line=first.line, key=first.key, hint=hint)
    return result


def archives_of(image: str, engine_name: str = "docker") -> tuple[list[Archive], str]:
    """The apt archives ``image`` installs from, or ([], why not)."""
    images = engines.of(engine_name)
    try:
        found = images.inspect(image)
    except EngineError as exc:
        return [], f"the base image {image} is not in the engine yet ({exc.message}); packages not checked"
    labels = found.labels or {}
    if labels.get(image_facts.BASE) and labels.get(image_facts.BASE_MIRROR):
        suite = labels[image_facts.BASE].partition(":")[2]
        components = tuple(c for c in labels.get(image_facts.BASE_COMPONENTS, "main").split(",") if c)
        return [Archive(labels[image_facts.BASE_MIRROR], suite, components)], ""
    try:
        proc = images.run_once(image, ["/bin/sh", "-c", SOURCES_SCRIPT], timeout=60)
    except EngineError as exc:
        return [], f"cannot read {image}'s apt sources ({exc.message}); packages not checked"
    archives = parse_sources(proc.stdout)
    if not archives:
        return [], f"{image} names no apt archive in /etc/apt/sources.list*; packages not checked"
    return archives, ""


def parse_sources(text: str) -> list[Archive]:
    """Archives of one-line (``deb [opts] URI SUITE COMP...``) and deb822 (``Types: deb``) sources."""
    out: list[Archive] = []
    files = re.split(r"^### (.*)$", text, flags=re.M)
    chunks = [(files[i], files[i + 1]) for i in range(1, len(files) - 1, 2)] or [("", text)]
    for name, body in chunks:
        if name.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", body):
                fields = dict(_deb822(stanza))
                if "deb" not in fields.get("Types", "").split() or fields.get("Enabled", "yes") == "no":
                    continue
                for uri in fields.get("URIs", "").split():
                    for suite in fields.get("Suites", "").split():
                        out.append(Archive(uri, suite, tuple(fields.get("Components", "").split())))
            continue
        for line in body.splitlines():
            words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb":
                out.append(Archive(words[1], words[2], tuple(words[3:])))
    return [a for a in dict.fromkeys(out) if a.components]


def _deb822(stanza: str) -> Iterable[tuple[str, str]]:
    key = None
    values: dict[str, str] = {}
    for line in stanza.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line[0].isspace() and key:
            values[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip()
            values[key] = value.strip()
    return values.items()


def archive_names(archive: Archive, arch: str, *, log: Callable[[str], None] = lambda _m: None,
                  max_age: float = MAX_AGE) -> tuple[set[str] | None, str]:
    """Every package name (and provided name) of ``archive`` for ``arch``, from the cache when it is
    younger than ``max_age``; (None, why) when neither the archive nor a cache answers."""
    names: set[str] = set()
    notes = []
    for component in archive.components:
        key = hashlib.sha256(f"{archive.mirror.rstrip('/')} {archive.suite} {component} {arch}".encode()).hexdigest()
        cached = cache_dir() / f"{key[:24]}.names"
        fresh = cached.is_file() and time.time() - cached.stat().st_mtime < max_age
        if fresh:
            names |= _read_cache(cached)
            continue
        urls = archive.index_urls(arch, component)
        log(f"reading the package index {urls[0].rsplit('/', 1)[0]}/Packages (kept for a day)")
        try:
            got = _fetch_names(urls)
        except OSError as exc:
            if cached.is_file():
                age = (time.time() - cached.stat().st_mtime) / 3600
                notes.append(f"{archive.mirror} did not answer ({exc}); used the package names cached {age:.0f} h ago")
                names |= _read_cache(cached)
                continue
            return None, f"cannot read the package index of {archive.describe()} ({exc}) and none is cached; " \
                         "packages not checked"
        cached.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(cached, "\n".join(sorted(got)) + "\n")
        names |= got
    return names, "; ".join(notes)


def _read_cache(path: Path) -> set[str]:
    return set(path.read_text().split())


def _fetch_names(urls: list[str]) -> set[str]:
    last: OSError | None = None
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
                raw = response.read(MAX_INDEX_BYTES + 1)
        except urllib.error.HTTPError as exc:   # 404: try the next compression
            last = OSError(f"{url}: HTTP {exc.code}")
            continue
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, FileNotFoundError):    # a file:// archive without this compression
                last = OSError(f"{url}: not there")
                continue
            raise OSError(f"{url}: {reason}") from None
        try:
            if url.endswith(".xz"):
                data = lzma.LZMADecompressor().decompress(raw, MAX_INDEX_BYTES)
            elif url.endswith(".gz"):
                data = gzip.decompress(raw)
            else:
                data = raw
        except (lzma.LZMAError, OSError, EOFError) as exc:
            last = OSError(f"{url}: not a readable index ({exc})")
            continue
        return parse_index(data)
    raise last or OSError("no index")


def parse_index(data: bytes) -> set[str]:
    """Package names and the names they provide (``Provides: a (= 1), b``) in a Packages index."""
    names: set[str] = set()
    for m in _PACKAGE.finditer(data):
        for item in m.group(1).split(b","):
            word = item.strip().split(b" ", 1)[0]
            if word:
                names.add(word.decode("ascii", "replace"))
    return names


def _close(name: str, names: set[str]) -> str | None:
    # Candidates sharing the first two characters: difflib over 60,000 names takes seconds.
    pool = [n for n in names if n[:2] == name[:2]]
    close = difflib.get_close_matches(name, pool, n=1, cutoff=0.75)
    return close[0] if close else None
