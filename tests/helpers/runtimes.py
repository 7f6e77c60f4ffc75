"""Helpers for the tests under the real runtimes: what an image declares, and what a runtime shows.

A probe script runs inside a container and prints the container's environment (``env -0``, base64)
and where each named tool resolves on its PATH; :func:`parse` reads it back. The same probe runs
under Docker, Enroot, Pyxis and Apptainer, so their answers compare one to one.
"""

from __future__ import annotations

import base64
import json
import subprocess
from dataclasses import dataclass, field

DOCKER = "/usr/bin/docker"
# Directories every base has on its PATH: tools there are found whatever a profile does to PATH.
SYSTEM_DIRS = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
# Every MPI image's launch tools, wherever they live.
MPI_TOOLS = ("mpirun", "ompi_info", "ucx_info", "imagekit-mpi-ring")
# Set by the runtime or the shell, whatever the image says.
RUNTIME_OWN = {"HOSTNAME", "HOME", "PWD", "OLDPWD", "SHLVL", "_", "TERM", "USER", "LOGNAME", "SHELL"}


def probe_script(tools: list[str]) -> str:
    """POSIX sh: ``ENV <base64 of env -0>`` then ``TOOL name path`` a line (``-`` when not found)."""
    names = " ".join(tools)
    return ("printf 'ENV %s\\n' \"$(env -0 | base64 -w0)\"\n"
            f"for t in {names}; do printf 'TOOL %s %s\\n' \"$t\" \"$(command -v \"$t\" || echo -)\"; done\n")


@dataclass
class Seen:
    env: dict[str, str] = field(default_factory=dict)
    tools: dict[str, str] = field(default_factory=dict)


def parse(output: str) -> Seen:
    seen = Seen()
    for line in output.splitlines():
        if line.startswith("ENV "):
            raw = base64.b64decode(line[4:].strip()).decode(errors="replace")
            seen.env = dict(e.partition("=")[::2] for e in raw.split("\0") if "=" in e)
        elif line.startswith("TOOL "):
            _, name, path = line.split(" ", 2)
            seen.tools[name] = path
    return seen


@dataclass
class Declared:
    """What an engine image declares: its Env, and where its tools are (found by Docker)."""

    image: str
    env: dict[str, str]
    tools: dict[str, str]

    @classmethod
    def read(cls, image: str) -> "Declared":
        config = json.loads(subprocess.run([DOCKER, "image", "inspect", "--format", "{{json .Config}}", image],
                                           check=True, capture_output=True, text=True).stdout)
        env = dict(e.partition("=")[::2] for e in config.get("Env") or [])
        extra = [d for d in env.get("PATH", "").split(":") if d and d not in SYSTEM_DIRS]
        # The stack's own tools: every executable in its PATH directories outside the system ones.
        listing = subprocess.run([DOCKER, "run", "--rm", "--entrypoint", "sh", image, "-c",
                                  'for d in "$@"; do for f in "$d"/*; do [ -f "$f" ] && [ -x "$f" ] && '
                                  'echo "${f##*/}"; done; done; true', "sh", *extra],
                                 check=True, capture_output=True, text=True).stdout.split()
        names = sorted(set(listing) | set(MPI_TOOLS))
        out = subprocess.run([DOCKER, "run", "--rm", "--entrypoint", "sh", image, "-c", probe_script(names)],
                             check=True, capture_output=True, text=True).stdout
        tools = {k: v for k, v in parse(out).tools.items() if v != "-"}
        return cls(image, env, tools)

    def expected_env(self, overrides: dict[str, str] | None = None) -> dict[str, str]:
        return {**{k: v for k, v in self.env.items() if k not in RUNTIME_OWN}, **(overrides or {})}


def differences(expected: dict[str, str], seen: Seen, declared: Declared) -> list[str]:
    """What ``seen`` gets wrong: declared variables with another value, tools not found where Docker finds them."""
    out = [f"{k}: {seen.env.get(k, '<unset>')!r}, declared {v!r}" for k, v in expected.items()
           if seen.env.get(k) != v]
    out += [f"tool {t}: {seen.tools.get(t, '<not probed>')!r}, Docker finds {p!r}"
            for t, p in declared.tools.items() if seen.tools.get(t) != p]
    return out
