"""What a root filesystem holds, read from its tar stream: the dpkg and pip inventories, the OS, and
(for the SBOM's completeness) every file and which package owns it.

One pass over the flattened image (``docker export``, merged layers, or ``sqfs2tar`` of a ``.sqsh``)
with nothing unpacked and nothing run inside the image: ``var/lib/dpkg/status`` gives the installed
Debian packages, ``var/lib/dpkg/info/*.list`` their files, ``*.dist-info/METADATA`` (and
``*.egg-info/PKG-INFO``) the Python distributions, their ``RECORD`` files their files, and
``etc/os-release`` (or ``usr/lib/os-release``) the distribution. The image's own programs are never
trusted to report on themselves.
"""

from __future__ import annotations

import email.parser
import posixpath
import re
import tarfile
from dataclasses import dataclass, field
from typing import BinaryIO

from imagekit.util.errors import ImagekitError

MAX_META = 16 << 20             # dpkg's status of a large image is a few MiB
# What one scan keeps, in all (H13 of ../shared/reviews/security-4.md: sparse files compress to nothing,
# so a 4 KiB squashfs of 96 sparse METADATA files took 1.75 GB and 73 s). A METADATA's name and version
# are in its headers, before the description: only MAX_HEADERS of each is read. The bounds are 5-10x
# the largest images seen (a CUDA + PyTorch image: ~250 Python distributions, ~120,000 paths, ~40 MiB of
# dpkg lists and RECORDs); past one, the scan stops with one error naming the image and the bound.
MAX_HEADERS = 64 << 10          # a METADATA's headers; its long description follows, and is skipped
MAX_DISTS = 20_000              # Python distributions (*.dist-info, *.egg-info)
MAX_PATHS = 2_000_000           # paths listed with ``files`` (regular files and links)
MAX_TOTAL = 512 << 20           # metadata bytes kept: dpkg status, headers, RECORDs, dpkg .list files
_DIST = re.compile(r"(?:^|/)(?:site|dist)-packages/([^/]+)\.(dist-info|egg-info)/(METADATA|PKG-INFO|RECORD)$")
_DPKG_LIST = re.compile(r"^var/lib/dpkg/info/([^/]+)\.list$")


@dataclass(frozen=True)
class Package:
    ecosystem: str               # "deb" or "pypi"
    name: str
    version: str
    arch: str = ""
    source: str = ""             # deb: the source package (when it differs)
    location: str = ""           # pypi: the site directory

    @property
    def key(self) -> str:
        return f"{self.ecosystem}:{self.name}"


@dataclass
class Inventory:
    os_release: dict[str, str] = field(default_factory=dict)
    packages: list[Package] = field(default_factory=list)
    files: list[str] | None = None                  # "/usr/bin/x": regular files and symlinks
    owned: dict[str, set[str]] | None = None        # Package.key -> the paths it lists
    symlinks: dict[str, str] = field(default_factory=dict)   # top-level /bin, /lib … -> their targets

    @property
    def distro(self) -> tuple[str, str]:
        """(ID, VERSION_ID) of /etc/os-release, e.g. ("debian", "12")."""
        return self.os_release.get("ID", ""), self.os_release.get("VERSION_ID", "")

    def of(self, ecosystem: str) -> list[Package]:
        return [p for p in self.packages if p.ecosystem == ecosystem]


def _norm(name: str) -> str:
    return "/" + posixpath.normpath(name.lstrip("./").lstrip("/")) if name.strip("./") else "/"


def parse_os_release(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Z0-9_]+", key.strip()):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            out[key.strip()] = value
    return out


def parse_dpkg_status(text: str) -> list[Package]:
    """Installed packages of a dpkg status file (``Status: install ok installed``)."""
    out = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        last = None
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t"):
                continue            # continuation of a multi-line field (Description, Conffiles)
            key, sep, value = line.partition(":")
            if sep:
                last = key.strip()
                fields[last] = value.strip()
        if fields.get("Package") and fields.get("Version") and fields.get("Status", "").endswith(" installed"):
            source = fields.get("Source", "").split(" ")[0]
            out.append(Package("deb", fields["Package"], fields["Version"], fields.get("Architecture", ""),
                               source if source and source != fields["Package"] else ""))
    return out


def _metadata(text: str) -> tuple[str, str]:
    msg = email.parser.HeaderParser().parsestr(text)
    return (msg.get("Name") or "").strip(), (msg.get("Version") or "").strip()


class ScanBound(ImagekitError):
    """A root filesystem whose metadata passes a bound of the inventory scan."""


class _Budget:
    """What a scan has kept so far, against the bounds (module constants)."""

    def __init__(self, what: str) -> None:
        self.what, self.bytes, self.dists, self.paths = what, 0, 0, 0

    def take(self, n: int) -> None:
        self.bytes += n
        self._check(self.bytes, MAX_TOTAL, "bytes of package metadata")

    def dist(self) -> None:
        self.dists += 1
        self._check(self.dists, MAX_DISTS, "Python distributions")

    def path(self) -> None:
        self.paths += 1
        self._check(self.paths, MAX_PATHS, "paths")

    def _check(self, have: int, bound: int, what: str) -> None:
        if have > bound:
            raise ScanBound(f"{self.what}: more than {bound} {what}, a bound of the inventory scan: refused",
                            "an image this large is not one imagekit builds: check where it came from")


def scan(stream: BinaryIO, *, files: bool = False, what: str = "the image") -> Inventory:
    """The inventory of the root filesystem in the tar ``stream`` (read to its end). With ``files``,
    also every regular file and symlink, and each package's listed files. ScanBound names ``what`` and
    the bound it passed (module constants); a METADATA is read only as far as its headers go."""
    inv = Inventory(files=[] if files else None, owned={} if files else None)
    budget = _Budget(what)
    dists: dict[str, dict[str, object]] = {}      # dist-info dir -> {"meta": (name, version), "record": [paths]}
    dpkg_lists: dict[str, list[str]] = {}
    status = ""
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            path = _norm(member.name)
            if files and (member.isfile() or member.issym() or member.islnk()):
                budget.path()
                inv.files.append(path)  # type: ignore[union-attr]
            if member.issym() and path.count("/") == 1:
                inv.symlinks[path] = member.linkname
            if not member.isfile() or member.size > MAX_META:
                continue
            rel = path[1:]
            if rel == "var/lib/dpkg/status":
                status = _text(tar, member, budget)
            elif rel in ("etc/os-release", "usr/lib/os-release") and not inv.os_release:
                inv.os_release = parse_os_release(_text(tar, member, budget, MAX_HEADERS))
            elif files and _DPKG_LIST.match(rel):
                text = _text(tar, member, budget)
                dpkg_lists[_DPKG_LIST.match(rel).group(1).split(":")[0]] = [l for l in text.splitlines() if l]
            else:
                m = _DIST.search(rel)
                if m and (files or m.group(3) != "RECORD"):
                    directory = path[: path.rindex("/")]
                    if directory not in dists:
                        budget.dist()
                    slot = dists.setdefault(directory, {})
                    if m.group(3) == "RECORD":
                        slot["record"] = _record_paths(_text(tar, member, budget))
                    else:
                        slot["meta"] = _metadata(_text(tar, member, budget, MAX_HEADERS))
    inv.packages = parse_dpkg_status(status)
    for directory, found in sorted(dists.items()):
        if "meta" not in found:
            continue
        name, version = found["meta"]  # type: ignore[misc]
        if not name or not version:
            continue
        site = posixpath.dirname(directory)
        pkg = Package("pypi", name, version, location=site)
        inv.packages.append(pkg)
        if files and "record" in found:
            owned = inv.owned.setdefault(pkg.key, set())  # type: ignore[union-attr]
            owned.update(posixpath.normpath(posixpath.join(site, rel)) for rel in found["record"])  # type: ignore[union-attr]
    if files:
        for pkg in inv.of("deb"):
            listed = dpkg_lists.get(pkg.name)
            if listed:
                inv.owned.setdefault(pkg.key, set()).update(listed)  # type: ignore[union-attr]
    return inv


def _record_paths(text: str) -> list[str]:
    """The paths a RECORD lists (``path,hash,size`` a line)."""
    out = []
    for line in text.splitlines():
        rel = line.rsplit(",", 2)[0] if line.count(",") >= 2 else line
        if rel:
            out.append(rel)
    return out


def _text(tar: tarfile.TarFile, member: tarfile.TarInfo, budget: _Budget, limit: int | None = None) -> str:
    """The member's text (its first ``limit`` bytes), counted against the scan's budget; the rest of the
    member is skipped by the stream, never kept."""
    fh = tar.extractfile(member)
    if fh is None:
        return ""
    data = fh.read(member.size if limit is None else min(limit, member.size))
    budget.take(len(data))
    return data.decode("utf-8", "replace")
