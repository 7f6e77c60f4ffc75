"""Upstream source artifacts: where each comes from, its sha256 pin, and a site mirror.

A component that builds from an upstream release names its artifacts (file
name, upstream URL, sha256). Without a mirror the recipe downloads the URL in
the build; with a mirror (stack ``mirror:``, ``--mirror`` or
``IMAGEKIT_MIRROR``: a directory or an http(s)/file URL) every artifact is
taken from the mirror instead, verified on the host before the build starts,
and handed to the build through its context (``sources/FILE``). Either way
the build itself checks the pin again before it configures anything, so a
recipe rendered by plain HPCCM is checked too.

Pins: imagekit ships upstream's own sha256 of each release file (``PINS``), so a
site whose mirror holds upstream's files builds the shipped stacks as shipped.
A site whose mirror holds files of its own making (rebuilt from git tags,
patched) says so once, in a site pins file (``--site FILE`` or
``IMAGEKIT_SITE``)::

    pins:
      ucx: {"1.18.1": "<sha256 of the site's ucx-1.18.1.tar.gz>"}

A site pin replaces imagekit's pin for that component and version in every
stack; a stack's own ``sha256:`` replaces both.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from imagekit.util import digests, schema, settings, yamlpos
from imagekit.util.errors import ImagekitError, StackError
from imagekit.util.settings import Site, site_or_env

MIRROR_ENV = "IMAGEKIT_MIRROR"
SITE_ENV = settings.SITE_ENV
CONTEXT_DIR = "sources"  # inside the build context (and beside a rendered recipe)
BUILD_DIR = "/var/tmp"   # where HPCCM's generic blocks unpack


# sha256 of upstream's published release files (the URLs in each component's ``upstream_file``),
# keyed by (component, version); a stack's `sha256:` replaces them. Read from Spack's package
# recipes (spack/spack-packages 1e8cf05, July 2026: repos/spack_repo/builtin/packages/<name>/package.py), which
# verify them on every download; cross-checked against older spack/spack copies.
PINS: dict[tuple[str, str], str] = {
    ("openmpi", "4.1.7"): "54a33cb7ad81ff0976f15a6cc8003c3922f0f3d8ceed14e1813ef3603f22cd34",
    ("openmpi", "4.1.4"): "92912e175fd1234368c8730c03f4996fe5942e7479bb1d10059405e7f2b3930d",
    ("openmpi", "4.1.8"): "466f68e3132a1dc02710cc2011fafced8336d98359fa2dae4dddcfd5719f12a9",
    ("openmpi", "5.0.7"): "119f2009936a403334d0df3c0d74d5595a32d99497f9b1d41e90019fee2fc2dd",
    ("openmpi", "5.0.8"): "53131e1a57e7270f645707f8b0b65ba56048f5b5ac3f68faabed3eb0d710e449",
    ("openmpi", "5.0.9"): "dfb72762531170847af3e4a0f21d77d7b23cf36f67ce7ce9033659273677d80b",
    ("openmpi", "5.0.10"): "0acecc4fc218e5debdbcb8a41d182c6b0f1d29393015ed763b2a91d5d7374cc6",
    ("ucx", "1.17.0"): "34658e282f99f89ce7a991c542e9727552734ac6ad408c52f22b4c2653b04276",
    ("ucx", "1.18.1"): "8018dd75f11b5e8d6e57dcdb5b798d2c1f000982c353efde1f3170025c6c3b4c",
    ("ucx", "1.13.1"): "efc37829b68e131d2acc82a3fd4334bfd611156a756837ffeb650ab9a9dd3828",
    ("ucx", "1.19.1"): "dea5d821fce05b6ffe175a74e6e148386dd85791409fc71242f3d1369100fd8a",
    ("ucx", "1.20.0"): "7c8a6093cada179aa1d851b83625e3b25ed5658966e309de5118c27a038c7ef9",
    ("ucx", "1.20.1"): "545c419a7b5e04643cb8bff5a19b3b5071a8f8f0605f1e8efb36f8f3d7bfb9d3",
    ("pmix", "4.2.9"): "6b11f4fd5c9d7f8e55fc6ebdee9af04b839f44d06044e58cea38c87c168784b3",
    ("pmix", "4.2.2"): "935b2f492e4bc409017f1425a83366aa72a7039605ea187c9fac7bb1371cd73c",
    ("pmix", "5.0.7"): "b9e6ad482fcdcb58c9b9553ae56956b6d7df875d5605b6ecb96adaff16b2b07a",
    ("pmix", "5.0.8"): "bf5f0a341d0ec7f465627a7570f4dcda3b931bc859256428a35f6c72f13462d0",
    ("pmix", "5.0.9"): "38d0667636e35a092e61f97be2dd84481f4cf566bfca11bb73c6b3d5da993b7a",
    ("pmix", "5.0.10"): "78663f6b932589d68e24feaf7f8a948d60be68d91965f3effbacb4cd88cf9a95",
    ("gdrcopy", "2.4.4"): "8802f7bc4a589a610118023bdcdd83c10a56dea399acf6eeaac32e8cc10739a8",
    ("gdrcopy", "2.5.1"): "c6d5ebb7dabb89d798f27609511735595004da73af28d93ac041bb5290c4cbec",
    ("nccl", "2.23.4-1"): "6b946b70a9d2d01871842cbd15ec56488d358abe9a0f3767e372fddc3e241ba7",
    ("nccl", "2.28.9-1"): "f349860336c6b7fb97b22bed9c729142f3531a0e82826c1204d01e44af8b9cb9",
    ("nccl", "2.29.7-1"): "e67239212c395bfdb398a7519491840d06fdf6b599c299f97c7ed0109777bba1",
    ("nccl-tests", "2.17.6"): "38974e70342150ede0e3fb8fd24bfe60ccbde90fa20241716ba8bb338e6b61a0",
    # GitHub's tag archive of NVIDIA/nvbandwidth v0.8, as Spack pins it.
    ("nvbandwidth", "0.8"): "b3622945eb7fce2b4e1aea7d13de04f415f4d998db602893201a904320cf2d39",
    # libfabric's release files (releases/download/vX/libfabric-X.tar.bz2), as Spack pins them.
    ("libfabric", "1.22.0"): "485e6cafa66c9e4f6aa688d2c9526e274c47fda3a783cf1dd8f7c69a07e2d5fe",
    ("libfabric", "2.1.0"): "97df312779e2d937246d2f46385b700e0958ed796d6fed7aae77e2d18923e19f",
    ("libfabric", "2.2.0"): "ff6d05240b4a9753bb3d1eaf962f5a06205038df5142374a6ef40f931bb55ecc",
    ("libfabric", "2.3.1"): "2e939f17ce4d30a999d0445f741d3055b19dfd894eff70450e23470fe774f35a",
    ("libfabric", "2.4.0"): "13f508e1d770c44f872c4117d9bcbfc102dc9d7532d3292455e0e0e5ef7b3bba",
    ("libfabric", "2.5.0"): "276019edca708dc0569cf3064a412e395ba7b1883299781caed120594f850995",
    # Not in Spack: GitHub's tag archives (archive/vX.tar.gz) are `git archive --prefix=nccl-tests-X/ vX
    # | gzip -n`, which reproduces Spack's pins for 2.13.6, 2.16.3 and 2.17.6 byte for byte; these two
    # were made the same way from NVIDIA/nccl-tests's tags (v2.19.6 a0b82b2, v2.13.11 8dfeab9).
    ("nccl-tests", "2.19.6"): "adbd3d27ba6c00bd7b7cf98cc8811c6ad860427ecd5de59527466b21472c0d93",
    ("nccl-tests", "2.13.11"): "fc8477dd830aa331533482cffe63bfb2ed85d9b12aacbe01d7638fe598261952",
}



class UpstreamSourceError(ImagekitError):
    """A missing mirror file or a checksum mismatch: names the component, URL and mirror path."""

    exit_code = 2


def site_path(site: Site | None = None) -> str | None:
    """The site pins file in force (``site``'s: --site, else $IMAGEKIT_SITE), else none."""
    pins = site_or_env(site).pins_file
    return str(pins) if pins else None


# Far more than any pins file; a bigger YAML is not one (and is not read whole to find out).
_MAX_PINS_BYTES = 1 << 20
_SITE_CACHE: dict[tuple[str, float], dict[tuple[str, str], str]] = {}


def site_pins(pinnable: Collection[str], site: Site | None = None) -> dict[tuple[str, str], str]:
    """(component, version) -> sha256 from the site pins file, validated (file, line and key on errors);
    ``pinnable``: the components with upstream release files (the caller knows them: this module
    sits below the components and does not import them)."""
    path = site_path(site)
    if not path:
        return {}
    try:
        stamp = os.stat(path).st_mtime
    except OSError:
        raise StackError("site pins file not found", file=path,
                         hint=f"give an existing file with --site or ${SITE_ENV}, or unset it") from None
    key = (str(Path(path).resolve()), stamp)
    if key not in _SITE_CACHE:
        _SITE_CACHE[key] = _read_site(Path(path), pinnable)
    return _SITE_CACHE[key]


def is_pins_file(path: Path) -> bool:
    """Whether ``path`` is a site pins file rather than a stack: its only top-level key is ``pins``
    (a stack has no such key). Unreadable or unbounded files are the stack loader's to report (the
    bounded parser: a file nested past its depth must fail as one error, not a RecursionError here)."""
    try:
        doc = yamlpos.load(path, max_bytes=_MAX_PINS_BYTES)
    except (OSError, StackError):
        return False
    return isinstance(doc, dict) and set(doc) == {"pins"}


def _read_site(path: Path, pinnable: Collection[str]) -> dict[tuple[str, str], str]:
    data = yamlpos.load(path)
    example = 'pins: {ucx: {"1.18.1": "<sha256 of ucx-1.18.1.tar.gz>"}}'
    if not isinstance(data, dict):
        raise StackError("a site pins file is a mapping with `pins:`", file=str(path),
                         line=getattr(data, "line", 1), hint=example)
    for top in data:
        if top != "pins":
            raise schema.unknown_key(data, top, ["pins"], "")
    pins = data.get("pins") or {}
    if not isinstance(pins, dict):
        file, line = data.pos("pins")
        raise StackError("expected component -> {version: sha256}", file=file, line=line, key="pins", hint=example)
    out: dict[tuple[str, str], str] = {}
    for component, versions in pins.items():
        file, line = pins.pos(component)
        if component not in pinnable:
            raise schema.unknown_key(pins, component, sorted(pinnable), "pins")
        if not isinstance(versions, dict):
            raise StackError("expected a mapping of version -> sha256", file=file, line=line,
                             key=f"pins.{component}", hint=example)
        for version, digest in versions.items():
            vfile, vline = versions.pos(version) if hasattr(versions, "pos") else (file, line)
            where = f"pins.{component}.{version}"
            if not re.fullmatch(r"\d+(\.\d+)*(-\d+)?", version):
                raise StackError(f"{version!r} is not a release version", file=vfile, line=vline, key=where,
                                 hint='write it as the stack does, quoted: "1.18.1" (NCCL: "2.28.9-1")')
            if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise StackError(f"{digest!r} is not a sha256 digest", file=vfile, line=vline, key=where,
                                 hint="write the 64 lowercase hex digits `sha256sum FILE` prints")
            out[(component, version)] = digest
    return out


def pin(component: str, version: str, pinnable: Collection[str], site: Site | None = None) -> tuple[str | None, str]:
    """(sha256, where it comes from) for an upstream release file: the site pins file, then imagekit's
    own pins of upstream's files; (None, ...) when neither has it."""
    pinned = site_pins(pinnable, site).get((component, version))
    if pinned:
        return pinned, f"the site pins file {site_path(site)}"
    if (component, version) in PINS:
        return PINS[(component, version)], "imagekit's pin of upstream's release file"
    return None, "no pin"


@dataclass(frozen=True)
class Artifact:
    component: str
    filename: str      # the upstream release file name, as a mirror stores it
    url: str           # where upstream publishes it
    sha256: str | None
    origin: str = "imagekit's pin of upstream's release file"  # where the pin came from, for errors
    version: str = ""  # the key a site pins file uses for it

    def check_command(self, mirrored: bool) -> str:
        """The in-build check of the copied (mirror) or downloaded (URL) file; fails the step on a mismatch."""
        name = self.filename if mirrored else self.url.rsplit("/", 1)[-1]
        return f"echo '{self.sha256}  {BUILD_DIR}/{name}' | sha256sum -c -"


def resolve_mirror(stack_file: str | None, value: str | None, override: str | None = None) -> str | None:
    """The mirror in force: ``override`` (--mirror), else $IMAGEKIT_MIRROR, else the stack's own.

    A relative directory in a stack file is relative to that file; on the command line, to the
    current directory.
    """
    for candidate, base in ((override, Path.cwd()), (os.environ.get(MIRROR_ENV), Path.cwd()),
                            (value, Path(stack_file).parent if stack_file else Path.cwd())):
        if candidate:
            if _is_url(candidate):
                return candidate.rstrip("/")
            return str((base / candidate).resolve())
    return None


def _is_url(value: str) -> bool:
    return urllib.parse.urlparse(value).scheme in ("http", "https", "file")


def mirror_location(mirror: str, artifact: Artifact) -> str:
    return f"{mirror}/{artifact.filename}" if _is_url(mirror) else str(Path(mirror) / artifact.filename)


def sha256_file(path: str | os.PathLike) -> str:
    return digests.sha256_file(path)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "imagekit" / "sources"


def fetch(artifact: Artifact, mirror: str) -> Path:
    """The artifact's verified local file: the mirror's own file, or a verified download in the cache."""
    where = mirror_location(mirror, artifact)
    if not _is_url(mirror):
        path = Path(where)
        if not path.is_file():
            # One line: the file, the mirror, and who asked for it (a site pin for a file the mirror
            # lacks is the usual cause); upstream's URL goes with the fix.
            raise UpstreamSourceError(
                f"{artifact.component} {artifact.version}: {artifact.filename} is not in the mirror {mirror} "
                f"(pinned by {artifact.origin})",
                f"put upstream's {artifact.filename} ({artifact.url}) at {where}, pin a version the mirror has, "
                "or build without the mirror")
        _verify(artifact, path, where)
        return path
    cached = cache_dir() / artifact.sha256 / artifact.filename
    if cached.is_file():
        return cached  # stored under its verified checksum
    cached.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{artifact.filename}.", suffix=".part", dir=cached.parent)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(where, timeout=120) as response:
            shutil.copyfileobj(response, out, 1 << 20)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UpstreamSourceError(
            f"{artifact.component}: cannot fetch {artifact.filename} from the mirror ({exc})\n"
            f"  upstream: {artifact.url}\n  mirror:   {where}",
            "check the mirror URL (--mirror, $IMAGEKIT_MIRROR or the stack's `mirror:`)") from None
    try:
        _verify(artifact, Path(tmp), where)
        os.replace(tmp, cached)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return cached


def _verify(artifact: Artifact, path: Path, where: str) -> None:
    found = sha256_file(path)
    if found != artifact.sha256:
        raise UpstreamSourceError(
            f"{artifact.component}: checksum mismatch for {artifact.filename}\n"
            f"  upstream: {artifact.url}\n  mirror:   {where}\n"
            f"  expected: {artifact.sha256} ({artifact.origin})\n  got:      {found}",
            f"replace the mirror's file with upstream's; or, if the site made this file deliberately, pin it "
            f"for every stack in the site pins file (--site FILE or ${SITE_ENV}): "
            f"`pins: {{{artifact.component}: {{\"{artifact.version}\": \"{found}\"}}}}`, or for one stack with "
            f"`sha256: \"{found}\"` on {artifact.component}")


def artifacts(stack) -> list[Artifact]:
    return [a for component in stack.components.values() for a in component.artifacts()]


def stage(stack, context: str | os.PathLike) -> list[Path]:
    """Verify every artifact of ``stack`` from its mirror and link it into ``context``/sources.

    Runs before the build, so a missing file or a mismatch stops it before any long step.
    """
    if not stack.mirror:
        return []
    dest = Path(context) / CONTEXT_DIR
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for artifact in artifacts(stack):
        src = fetch(artifact, stack.mirror)
        target = dest / artifact.filename
        target.unlink(missing_ok=True)  # an earlier staging's link: linking over it would fail
        try:
            os.link(src, target)
        except OSError:  # another filesystem: copy (the mirror may be read-only NFS)
            shutil.copyfile(src, target)
        out.append(target)
    return out


def block_source(stack, artifact: Artifact) -> dict:
    """Keyword arguments for an HPCCM generic block: the mirror's file from the context, or the URL,
    and the pin check that runs in the build before anything is configured."""
    where = {"package": f"{CONTEXT_DIR}/{artifact.filename}"} if stack.mirror else {"url": artifact.url}
    return {**where, "preconfigure": [artifact.check_command(bool(stack.mirror))]}
