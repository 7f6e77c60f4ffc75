"""Errors that the CLI turns into one clear line and an exit code.

Every command, and the Pyxis importer, exits by one table (`imagekit --help` prints it from
:data:`EXIT_CODES`): one code per kind of failure, wherever it happens. An error class carries its
kind's code; the CLI prints ``imagekit: error: MESSAGE`` and ``  fix: HINT`` and exits with it.
"""

from __future__ import annotations

# code -> the kind of failure; `imagekit --help` shows this table.
EXIT_CODES: dict[int, str] = {
    0: "success",
    1: "it ran and failed: a build step, a check, a preflight check, a validation gate (slow)",
    2: "bad input: a stack file, an option, a reference, an output that cannot be written; nothing written",
    3: "the container engine (Docker, Podman) is missing or refused",
    4: "the registry is unreachable or refused a request",
    5: "no export artifact was pushed for the image",
    6: "integrity: bytes do not match their digest, or an image file is truncated or corrupt; nothing kept",
    7: "credentials unreadable, missing or rejected",
    8: "not enough space for the output or the store; nothing half-written kept",
    9: "validation: the run ran wrong (wrong results, transport, NCCL)",
    10: "not found: the image, tag or file named does not exist",
    11: "nothing checked: preflight or check could not check anything asked",
    12: "signature: unsigned, a signer not accepted, a revoked or expired key, or statements that do not "
        "name what is served",
    130: "interrupted (Ctrl-C, SIGINT); SIGTERM gives 143, SIGHUP 129; temporary files are removed",
}
NOT_FOUND = 10
NOTHING_CHECKED = 11
NOT_VERIFIED = 12
INTERRUPTED = 130


class ImagekitError(Exception):
    """A failure the user can act on: ``message`` says what, ``hint`` says the fix."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  fix: {self.hint}"


class UsageError(ImagekitError):
    """Bad input (a stack file, an option value): exit code 2, nothing written."""

    exit_code = 2


class StackError(UsageError):
    """A stack file problem, located at file:line and key."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None, hint: str | None = None) -> None:
        # No file: the error names the stack itself ("unknown stack 'x'"); a placeholder said nothing.
        where = (file or "") + (f":{line}" if file and line is not None else "")
        prefix = (f"{where}: " if where else "") + (f"{key}: " if key else "")
        super().__init__(prefix + message, hint)
        self.file, self.line, self.key = file, line, key


class EngineError(ImagekitError):
    """The Docker engine is missing or refused a request."""

    exit_code = 3


# Distribution errors (store, registry artifacts, the Pyxis importer). Each has its own exit code
# so that a site's script (or Pyxis's log) can tell "make the artifact" from "fix the credentials".
class RegistryError(ImagekitError):
    """The registry is unreachable, or refused a request (for example an artifact's media type)."""

    exit_code = 4


class ArtifactMissing(ImagekitError):
    """No export artifact was pushed for this image digest."""

    exit_code = 5


class IntegrityError(ImagekitError):
    """Downloaded or stored bytes do not match their recorded digest; nothing was kept."""

    exit_code = 6


class CredentialsError(ImagekitError):
    """Registry credentials are unreadable, or the registry rejected them."""

    exit_code = 7


class NoSpaceError(ImagekitError):
    """The store or output file system is (or would become) full; nothing half-written was kept."""

    exit_code = 8


class VerificationError(ImagekitError):
    """An image, file or statement failed a signature check: unsigned, a signer the policy does not
    accept, a revoked or expired key, or subjects that do not name what is being served."""

    exit_code = NOT_VERIFIED


class NotFoundError(ImagekitError):
    """What the command was asked to read does not exist: an engine image, a registry tag, a file,
    a tag inside an archive. Subclasses of other kinds (ImageMissing is an EngineError) set this
    code too, so that "not found" is one exit code wherever it is found out."""

    exit_code = NOT_FOUND


class OutputError(UsageError):
    """An output cannot be written: a read-only file system, permission denied, not a directory."""


class NothingChecked(ImagekitError):
    """Preflight or check was asked to check an image and could check nothing."""

    exit_code = NOTHING_CHECKED
