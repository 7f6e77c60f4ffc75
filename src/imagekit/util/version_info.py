"""The version imagekit reports: the package version plus the commit it came from.

``imagekit --version`` and the ``io.imagekit.version`` label of every image it builds carry the
same string, so an image names the exact imagekit that made it. Sources, in order:

- a git checkout this package's own files are tracked in (an editable install, ``PYTHONPATH=src``):
  its ``HEAD``, with ``.dirty`` when tracked files differ from it;
- an installed distribution whose PEP 610 ``direct_url.json`` records a VCS commit (``pip install
  git+…@commit``): the commit pip resolved at install time; a wheel or a plain directory records none;
- otherwise the package version alone.

The result is a PEP 440 version with a local part (``0.1.0+g1a2b3c4d5e6f.dirty``), so a tool that
parses versions still reads it. It must never reach a rendered recipe: recipe hashes (the recorded CI
tier, ``io.imagekit.recipe.sha256``) and layer caches would change with every commit. The build
passes it as a build-time label instead (:func:`imagekit.image_facts.writer.build_labels`).
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from importlib import metadata
from pathlib import Path

from imagekit import __version__

ABBREV = 12
_HEX = re.compile(r"^[0-9a-f]{7,64}$")
PACKAGE_DIR = Path(__file__).resolve().parent.parent


def with_commit(version: str, commit: str | None, dirty: bool = False) -> str:
    """``version`` with ``commit`` (abbreviated) and the dirty mark as a PEP 440 local part."""
    if not commit:
        return version
    return f"{version}+g{commit[:ABBREV]}" + (".dirty" if dirty else "")


def checkout_commit(package_dir: Path = PACKAGE_DIR) -> tuple[str, bool] | None:
    """``(commit, dirty)`` when ``package_dir`` is tracked in a git checkout, else None.

    The package's own ``__init__.py`` must be tracked: a wheel installed in a virtual environment
    that happens to sit inside some other repository must not report that repository's commit.
    """
    def git(*args: str) -> subprocess.CompletedProcess:
        # No optional locks: asking for the version must never write the index of someone's checkout.
        return subprocess.run(["git", "--no-optional-locks", "-C", str(package_dir), *args],
                              capture_output=True, text=True, timeout=10)

    try:
        if git("ls-files", "--error-unmatch", "__init__.py").returncode != 0:
            return None
        head = git("rev-parse", "--verify", "HEAD")
        if head.returncode != 0 or not _HEX.match(head.stdout.strip()):
            return None
        # Untracked files (build outputs, logs) leave the code as committed; only tracked changes count.
        status = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):   # no git on this machine, or it hung
        return None
    dirty = status.returncode != 0 or bool(status.stdout.strip())
    return head.stdout.strip(), dirty


def installed_commit(dist: str = "imagekit") -> str | None:
    """The commit PEP 610's ``direct_url.json`` recorded when ``dist`` was installed from a VCS URL."""
    try:
        text = metadata.distribution(dist).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        commit = (json.loads(text or "{}").get("vcs_info") or {}).get("commit_id")
    except (ValueError, AttributeError):
        return None
    return commit if isinstance(commit, str) and _HEX.match(commit) else None


@functools.lru_cache(maxsize=None)
def full_version() -> str:
    """The version ``imagekit --version`` prints and builds label images with (computed once)."""
    found = checkout_commit()
    if found is not None:
        return with_commit(__version__, *found)
    return with_commit(__version__, installed_commit())
