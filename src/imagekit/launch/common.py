"""Small pieces every launcher shares: validation, job ids, mounts, env, atomic writes.

Launch values end up in scripts (sbatch files, rank wrappers, run.sh) and manifests; every
job checks them here once, through :mod:`imagekit.util.quoting`, and the writers quote them.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from imagekit.util import quoting
from imagekit.util.errors import ImagekitError, UsageError
from imagekit.util.atomic import write_text

JOB_LABEL = "io.imagekit.job"
# The program that starts Open MPI's ranks (the host's, or the image's inside its containers).
MPIRUN = "mpirun"
# Variables the MPI runtime hands to each rank; a container must see them to join the job.
MPI_ENV_PREFIXES = ("OMPI_", "PMIX_", "OPAL_")
SLURM_ENV_PREFIXES = ("SLURM_", "PMI_")
# The tuning a user sets on the host for a component (NCCL_IB_HCA, UCX_TLS, FI_PROVIDER, ...), which
# outside-in wrappers forward into rank containers. Each component declares its own (``forward_env``);
# the run side never loads the components (HPCCM, the registry), so the union is kept here, in the
# registry's order, and tests/components/test_forward_env.py fails when a component adds one.
COMPONENT_ENV_PREFIXES = ("UCX_", "HCOLL_", "SHARP_", "UCC_", "NCCL_", "FI_", "OFI_NCCL_")
_TOKEN = re.compile(r"[A-Za-z0-9_.-]+")
WHERE = "launch"


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
    if cmd[0].startswith("-"):
        # srun, mpirun and docker would read it as one of their own options.
        raise quoting.UnsafeValue(WHERE, "command", cmd[0], "starts with '-'",
                                  "the command comes first after `--`: a program, then its arguments")
    check_words("command", cmd)
    return list(cmd)


def check_words(what: str, words: tuple[str, ...] | list[str]) -> list[str]:
    """Arguments (quoted when written): only a NUL cannot be passed."""
    for i, word in enumerate(words):
        quoting.valid_text(word, WHERE, f"{what}[{i}]")
    return list(words)


def check_line(what: str, value: str | None) -> str | None:
    """A name or path (image, workdir): one line of text."""
    return None if value is None else quoting.no_control(value, WHERE, what)


def check_token(what: str, value: str) -> str:
    """Job ids, host and container names: letters, digits, '.', '_' and '-'."""
    quoting.valid_text(value, WHERE, what)
    if not _TOKEN.fullmatch(value):
        raise quoting.UnsafeValue(WHERE, what, value, "is not a plain name",
                                  "use letters, digits, '.', '_' and '-'")
    return value


def check_job(*, command: list[str], image: str, env: dict[str, str], job_id: str | None = None,
              workdir: str | None = None) -> None:
    """Refuse what a job's command, image, environment, id and working directory cannot carry into a
    script."""
    check_command(command)
    check_line("image", image)
    if image.startswith("-"):
        # docker run, enroot start|create and apptainer exec would read it as one of their options.
        raise quoting.UnsafeValue(WHERE, "image", image, "starts with '-'",
                                  "name an image (site/app:1) or a file by a path (./-x.sqsh)")
    check_line("--workdir", workdir)
    check_env(env)
    if job_id is not None:
        check_token("job id", job_id)


def check_env(env: dict[str, str]) -> dict[str, str]:
    quoting.env_sizes([f"{k}={v}" for k, v in env.items()], WHERE, "--env")
    for name, value in env.items():
        quoting.env_name(name, WHERE, "--env name")
        quoting.valid_text(value, WHERE, f"--env {name} value")
    return env


# --- what an image asks for -------------------------------------------------------------------
#
# An image's values (the benchmark label's command and environment) take effect only inside a
# container of that image: the rank wrappers hand the environment to the runtime as arguments
# (`docker run -e NAME=VALUE`, `enroot start|exec --env NAME=VALUE`) or under the runtime's own
# prefix (`APPTAINERENV_NAME`, which no host program reads), never as an `export` in a script
# the host runs. Pyxis alone takes a container's variables from the job's environment
# (`--container-env=NAME`), which the sbatch script, srun, slurmstepd, Pyxis and the Enroot it runs
# (bash scripts and hooks, on the host) all carry: only these names may travel that way. Each
# prefix is read by a library that runs only inside the container, never by a program on the
# job's host path (bash, srun, slurmstepd, Pyxis, Enroot and its hooks):
HOST_ENV_PREFIXES = (
    "NCCL_",              # NCCL and its network plugins
    "UCX_", "UCC_",       # UCX and UCC (Slurm's pmix plugin configures its UCX from slurmd's own environment)
    "HCOLL_", "SHARP_",   # HPC-X collectives; Enroot's SHARP hook only greps its environment file for them
    "FI_", "OFI_NCCL_",   # libfabric and the OFI NCCL net plugin
    "OMPI_MCA_",          # Open MPI in the container; under Pyxis no host mpirun reads them
)
# ...but not a name with one of these words: its value is a program, arguments, a library or a
# file that some tool runs, loads or opens (OMPI_MCA_plm_rsh_agent and orte_rsh_agent run a command
# for every remote daemon, plm_rsh_args can hold ssh's ProxyCommand, mca_base_component_path loads
# plugins, UCX_MODULE_DIR loads modules, UCX_GDB_COMMAND runs on an error, NCCL_NET_PLUGIN loads a
# library, UCX_LOG_FILE writes a file). Where such a value would be read, in the container or by
# a host mpirun, it is the image's code; it must not get there through the host's environment.
HOST_ENV_REFUSED_WORDS = frozenset({
    "AGENT", "ARGS", "CMD", "COMMAND", "EXEC", "PROGRAM", "SCRIPT", "SHELL",
    "PATH", "DIR", "DIRS", "FILE", "FILES", "PREFIX", "PRELOAD", "LIB", "LIBS", "LIBRARY",
    "PLUGIN", "PLUGINS", "MODULE", "MODULES", "COMPONENT", "COMPONENTS",
})


def host_env_problem(name: str) -> str | None:
    """Why an image's variable ``name`` may not pass through a host's environment, or None."""
    if not name.startswith(HOST_ENV_PREFIXES):
        return "is not one that may pass through the host's environment"
    words = set(name.upper().split("_"))
    bad = sorted(words & HOST_ENV_REFUSED_WORDS)
    if bad:
        return f"has the word {bad[0]}: its value is a program, library or file that a tool runs, loads or opens"
    return None


def check_image_env(image: str, env: dict[str, str], label: str, *, host: bool = False) -> dict[str, str]:
    """The environment an image's label ``label`` asks for: names a shell can export, values on one
    line (Enroot's and Pyxis's environment files are read a line a variable); with ``host`` (Pyxis),
    only names :func:`host_env_problem` lets through the job's environment."""
    where = f"image {image}"
    field = f"label {label} env"
    quoting.env_sizes([f"{k}={v}" for k, v in env.items()], where, field)
    for name, value in env.items():
        quoting.env_name(name, where, f"{field} name")
        quoting.no_control(value, where, f"{field} {name}",
                           "a variable's value must be one line for Enroot and Pyxis; give the command and "
                           "its environment yourself: --env NAME=VALUE -- COMMAND")
        problem = host_env_problem(name) if host else None
        if problem:
            raise quoting.UnsafeValue(
                where, f"{field} name", name, f"{problem}: Pyxis passes a container's variables through "
                "the job's environment on the host",
                f"Pyxis jobs take only {', '.join(p + '*' for p in HOST_ENV_PREFIXES)} from an image, and "
                "none with a word such as AGENT, PATH, FILE or PLUGIN; give the command and its "
                "environment yourself (--env NAME=VALUE -- COMMAND), or use --runtime enroot, which hands "
                "the image's environment to the container only")
    return env


def check_image_command(image: str, command: list[str], label: str) -> list[str]:
    """A command an image's label names (run inside its containers, after the launcher's own options)."""
    where = f"image {image}"
    if not command:
        raise quoting.UnsafeValue(where, f"label {label} command", "", "is empty",
                                  "give the command after `--`")
    if command[0].startswith("-"):
        raise quoting.UnsafeValue(where, f"label {label} command[0]", command[0],
                                  "starts with '-', which srun, mpirun and docker would read as their own option",
                                  "give the command after `--`")
    for i, word in enumerate(command):
        quoting.valid_text(word, where, f"label {label} command[{i}]")
    return list(command)


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

    def __post_init__(self) -> None:
        for what, path in (("mount source", self.src), ("mount target", self.dst)):
            quoting.no_control(path, WHERE, what)
            if ":" in path or not path:
                raise quoting.UnsafeValue(WHERE, what, path, "is empty or contains ':'",
                                          "Docker, Enroot and Apptainer separate SRC:DST[:FLAGS] with ':'")

    def check_fstab(self, runtime: str) -> "Mount":
        """Enroot (and Pyxis, through it) writes mounts as fstab lines: whitespace splits a field."""
        for what, path in (("mount source", self.src), ("mount target", self.dst)):
            if any(c.isspace() for c in path) or "," in path:
                raise quoting.UnsafeValue(WHERE, what, path, f"contains whitespace or ',', which {runtime} "
                                          "mounts cannot carry", "rename the path or bind a parent directory")
        return self

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
        if not quoting.ENV_NAME.fullmatch(name):
            raise UsageError(f"bad environment variable {quoting.shown(item)}", "write NAME=VALUE")
        if not sep:
            if name not in os.environ:
                raise UsageError(f"{name} is not set here", f"write {name}=VALUE")
            value = os.environ[name]
        env[name] = value
    return env


def quote(args: list[str]) -> str:
    return " ".join(quoting.sh_arg(a, WHERE) for a in args)


def write_atomic(path: Path, text: str, mode: int = 0o755) -> Path:
    """Scripts and key files: written whole or not at all (see imagekit.util.atomic)."""
    return write_text(path, text, mode)
