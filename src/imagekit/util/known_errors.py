"""The errors a site meets, as one catalogue: what the site did, the line imagekit prints, the fix and
the exit code.

The code that finds one of these raises it from here (``known_errors.DAMAGED_SQUASHFS.error(...)``), so
the message cannot drift from docs/errors.md, which scripts/gen_docs.py writes from :data:`CATALOGUE`;
tests/test_known_errors.py makes each one happen for real and holds its message, its exit code and that
nothing was left half-written. An entry names its file, reference or option in ``message`` (``{...}``
fields the raiser fills) and what to do in ``fix``.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagekit.util.errors import EngineError, ImagekitError, IntegrityError, StackError, UsageError


class DamagedImage(IntegrityError):
    """An image file (.sqsh, .sif) whose bytes are cut short or are not what its format says: exit 6."""


@dataclass(frozen=True)
class Known:
    """One error a site meets. ``message`` and ``fix`` are ``str.format`` templates."""

    id: str
    situation: str                       # what the site did, in its own words
    kind: type[ImagekitError]
    message: str
    fix: str

    @property
    def exit_code(self) -> int:
        return self.kind.exit_code

    def text(self, **fields: object) -> tuple[str, str]:
        """(message, fix) with ``fields`` filled in: for a raiser that locates the error itself (a
        component's ``self.error(key, ...)``)."""
        return self.message.format(**fields), self.fix.format(**fields)

    def error(self, as_kind: type[ImagekitError] | None = None, **fields: object) -> ImagekitError:
        """The exception to raise; a StackError entry takes ``file`` (and ``line``, ``key``) as its place.
        ``as_kind``: a subclass of the entry's kind that a module above this one defines (SifFormatError)."""
        message, fix = self.text(**fields)
        kind = as_kind or self.kind
        assert issubclass(kind, self.kind), f"{kind.__name__} is not a {self.kind.__name__}"
        if issubclass(kind, StackError):
            err: ImagekitError = kind(message, file=str(fields["file"]), line=fields.get("line"),  # type: ignore[call-arg]
                                      key=fields.get("key"), hint=fix)
        else:
            err = kind(message, fix)
        err.known = self.id  # type: ignore[attr-defined]
        return err


_ENGINE_FREE = "`imagekit report|check|preflight` read a .sqsh, .sif or docker://REF without an engine"

ENGINE_NO_GROUP = Known(
    "engine-no-group", "a user outside the docker group runs build, check, export or push",
    EngineError, "no Docker engine answers at {host}: permission denied (this user is neither root nor in the "
    "docker group)",
    "the engine runs, but only root and the docker group may use it: ask for the group (`usermod -aG docker "
    "USER`, then log in again), or build and check as yourself with no daemon: --engine podman (or "
    "IMAGEKIT_ENGINE=podman; docs/build.md); " + _ENGINE_FREE)

ENGINE_DOWN = Known(
    "engine-down", "no Docker engine runs (or DOCKER_HOST names no socket)",
    EngineError, "no Docker engine answers at {host}: {why}",
    "start the Docker engine (`systemctl start docker`; in an imagekit checkout `bash scripts/setup-engine.sh` "
    "installs Debian's docker.io and starts it), or use --engine podman; " + _ENGINE_FREE)

DAMAGED_SQUASHFS = Known(
    "damaged-sqsh", "a truncated or corrupt .sqsh (a copy cut short by a quota, an interrupted rsync)",
    DamagedImage, "{path}: {problem}: the file is damaged, not an image Enroot or Pyxis can start",
    "copy it again from where it was made, or export it again (imagekit export IMAGE --to enroot -o {path} "
    "--force); compare `sha256sum {path}` with the sha256 the export or push printed")

DAMAGED_SIF = Known(
    "damaged-sif", "a truncated or corrupt .sif",
    DamagedImage, "{path}: {problem}: the file is damaged, not a SIF Apptainer can start",
    "copy it again from where it was made, or export it again (imagekit export IMAGE --to sif -o {path} "
    "--force); compare `sha256sum {path}` with the sha256 the export or push printed")

EXPORT_FROM_FILE = Known(
    "export-from-file", "an exported file (.sqsh, .sif) given as what to export, e.g. .sqsh -> SIF",
    UsageError, "{path} is an exported file ({kind}), not an image: export reads an image's layers and "
    "config, which an exported file no longer has",
    "export the image it was made from: imagekit export IMAGE --to {fmt} (IMAGE: the engine image, or "
    "docker://REGISTRY/REPO:TAG where it was pushed; `imagekit report {path}` names its stack)")

PINS_FILE_AS_STACK = Known(
    "pins-as-stack", "a site pins file given where a stack is expected",
    StackError, "a site pins file, not a stack",
    "pass it with --site {file} (or $IMAGEKIT_SITE), or name it pins.yaml in the first stack directory; "
    "build a stack: imagekit stacks lists them")

NOT_A_VERSION = Known(
    "not-a-version", "a component version that is no version at all",
    StackError, "{version!r} is not a version",
    'write it like "4.1.7", "2.23.4-1" or, for a wheel, "2.26.2.post1"')

WHEEL_VERSION_FROM_SOURCE = Known(
    "wheel-version-from-source", "a wheel's post-release or local version (2.26.2.post1) pinned for a "
    "package or source build",
    StackError, "{version!r} names a PyPI wheel; `source: {source}` takes an NCCL release",
    'write "{release}" for source: {source}, or use `source: pypi`')

CATALOGUE: tuple[Known, ...] = (ENGINE_NO_GROUP, ENGINE_DOWN, DAMAGED_SQUASHFS, DAMAGED_SIF, EXPORT_FROM_FILE,
                                PINS_FILE_AS_STACK, NOT_A_VERSION, WHEEL_VERSION_FROM_SOURCE)
