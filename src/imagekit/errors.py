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
