"""Errors that the CLI turns into one clear line and an exit code."""

from __future__ import annotations


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
        where = file or "<stack>"
        if line is not None:
            where += f":{line}"
        prefix = f"{where}: " + (f"{key}: " if key else "")
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

    exit_code = 9
