"""Small pieces every launcher shares: validation, job ids, mounts, env, atomic writes."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import ImagekitError, UsageError

JOB_LABEL = "io.imagekit.job"
# Variables the MPI runtime hands to each rank; a container must see them to join the job.
MPI_ENV_PREFIXES = ("OMPI_", "PMIX_", "OPAL_")
SLURM_ENV_PREFIXES = ("SLURM_", "PMI_")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def new_job_id() -> str:
    """A short id that names and labels everything one launch creates (for cleanup)."""
    return "ik" + secrets.token_hex(4)


def check_choice(what: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise UsageError(f"unknown {what} {value!r}", f"use one of: {', '.join(choices)}")
    return value


def check_count(what: str, value: int, minimum: int = 1) -> int:
    if value < minimum:
        raise UsageError(f"{what} must be >= {minimum}, got {value}", f"pass {what} {max(minimum, 1)} or more")
    return value


def check_command(cmd: tuple[str, ...] | list[str]) -> list[str]:
    if not cmd:
        raise UsageError("no command to run", "put the command after `--`, e.g. `-- python3 train.py`")
    return list(cmd)


def require_tool(name: str, hint: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ImagekitError(f"`{name}` not found on this host's PATH", hint)
    return found


@dataclass(frozen=True)
class Mount:
    """``SRC:DST[:ro]`` — a host path bound into every rank's container."""

    src: str
    dst: str
    readonly: bool = False

    @classmethod
    def parse(cls, text: str) -> "Mount":
        parts = text.split(":")
        if len(parts) == 1:
            parts = [parts[0], parts[0]]
        if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
            raise UsageError(f"bad mount {text!r}", "write SRC:DST or SRC:DST:ro (DST an absolute path)")
        if len(parts) == 3 and parts[2] not in ("ro", "rw"):
            raise UsageError(f"bad mount flag {parts[2]!r} in {text!r}", "use :ro or :rw")
        if not parts[1].startswith("/"):
            raise UsageError(f"mount target {parts[1]!r} is not absolute", "write SRC:/absolute/path")
        return cls(parts[0], parts[1], len(parts) == 3 and parts[2] == "ro")


def parse_mounts(items: tuple[str, ...] | list[str]) -> list[Mount]:
    """Accepts repeated options and comma-separated lists (the Pyxis habit)."""
    out: list[Mount] = []
    for item in items:
        out += [Mount.parse(piece) for piece in item.split(",") if piece]
    return out


def parse_env(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``NAME=VALUE`` pairs; a bare ``NAME`` takes the value from the current environment."""
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not _ENV_NAME.match(name):
            raise UsageError(f"bad environment variable {item!r}", "write NAME=VALUE")
        if not sep:
            if name not in os.environ:
                raise UsageError(f"{name} is not set here", f"write {name}=VALUE")
            value = os.environ[name]
        env[name] = value
    return env


def quote(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


def write_atomic(path: Path, text: str, mode: int = 0o755) -> Path:
    """Scripts and key files: written whole or not at all (see imagekit.atomic)."""
    from imagekit.atomic import write_text

    return write_text(path, text, mode)
