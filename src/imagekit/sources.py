"""Upstream source artifacts: where each comes from, its sha256 pin, and a site mirror.

A component that builds from an upstream release names its artifacts (file
name, upstream URL, sha256). Without a mirror the recipe downloads the URL in
the build; with a mirror (stack ``mirror:``, ``--mirror`` or
``IMAGEKIT_MIRROR``: a directory or an http(s)/file URL) every artifact is
taken from the mirror instead, verified on the host before the build starts,
and handed to the build through its context (``sources/FILE``). Either way
the build itself checks the pin again before it configures anything, so a
recipe rendered by plain HPCCM is checked too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import ImagekitError

MIRROR_ENV = "IMAGEKIT_MIRROR"
CONTEXT_DIR = "sources"  # inside the build context (and beside a rendered recipe)
BUILD_DIR = "/var/tmp"   # where HPCCM's generic blocks unpack


# sha256 of upstream's published release files (the URLs in each component's ``upstream_file``),
# keyed by (component, version); a stack's `sha256:` replaces them. Read from Spack's package
# recipes (spack/spack-packages 1e8cf05, repos/spack_repo/builtin/packages/<name>/package.py), which
# verify them on every download; cross-checked against older spack/spack copies.
PINS: dict[tuple[str, str], str] = {
    ("openmpi", "4.1.7"): "54a33cb7ad81ff0976f15a6cc8003c3922f0f3d8ceed14e1813ef3603f22cd34",
    ("openmpi", "4.1.4"): "92912e175fd1234368c8730c03f4996fe5942e7479bb1d10059405e7f2b3930d",
    ("openmpi", "5.0.7"): "119f2009936a403334d0df3c0d74d5595a32d99497f9b1d41e90019fee2fc2dd",
    ("ucx", "1.17.0"): "34658e282f99f89ce7a991c542e9727552734ac6ad408c52f22b4c2653b04276",
    ("ucx", "1.18.1"): "8018dd75f11b5e8d6e57dcdb5b798d2c1f000982c353efde1f3170025c6c3b4c",
    ("ucx", "1.13.1"): "efc37829b68e131d2acc82a3fd4334bfd611156a756837ffeb650ab9a9dd3828",
    ("pmix", "4.2.9"): "6b11f4fd5c9d7f8e55fc6ebdee9af04b839f44d06044e58cea38c87c168784b3",
    ("pmix", "4.2.2"): "935b2f492e4bc409017f1425a83366aa72a7039605ea187c9fac7bb1371cd73c",
    ("pmix", "5.0.7"): "b9e6ad482fcdcb58c9b9553ae56956b6d7df875d5605b6ecb96adaff16b2b07a",
    ("gdrcopy", "2.4.4"): "8802f7bc4a589a610118023bdcdd83c10a56dea399acf6eeaac32e8cc10739a8",
    ("gdrcopy", "2.5.1"): "c6d5ebb7dabb89d798f27609511735595004da73af28d93ac041bb5290c4cbec",
    ("nccl", "2.23.4-1"): "6b946b70a9d2d01871842cbd15ec56488d358abe9a0f3767e372fddc3e241ba7",
    # nccl-tests 2.17.6: a Spack overlay of builtin nccl_tests (the builtin lists the version).
    ("nccl-tests", "2.17.6"): "38974e70342150ede0e3fb8fd24bfe60ccbde90fa20241716ba8bb338e6b61a0",
}


class SourceError(ImagekitError):
    """A missing mirror file or a checksum mismatch: names the component, URL and mirror path."""

    exit_code = 2


@dataclass(frozen=True)
class Artifact:
    component: str
    filename: str      # the upstream release file name, as a mirror stores it
    url: str           # where upstream publishes it
    sha256: str | None

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
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "imagekit" / "sources"


def fetch(artifact: Artifact, mirror: str) -> Path:
    """The artifact's verified local file: the mirror's own file, or a verified download in the cache."""
    where = mirror_location(mirror, artifact)
    if not _is_url(mirror):
        path = Path(where)
        if not path.is_file():
            raise SourceError(
                f"{artifact.component}: {artifact.filename} is not in the mirror\n"
                f"  upstream: {artifact.url}\n  mirror:   {where}",
                f"put upstream's {artifact.filename} at {where}, or build without the mirror")
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
        raise SourceError(
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
        raise SourceError(
            f"{artifact.component}: checksum mismatch for {artifact.filename}\n"
            f"  upstream: {artifact.url}\n  mirror:   {where}\n"
            f"  pinned:   {artifact.sha256}\n  found:    {found}",
            f"replace the mirror's file with upstream's, or pin this file with "
            f"`sha256: \"{found}\"` on {artifact.component} if your site rebuilt it deliberately")


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
