"""Who owns a temporary thing imagekit made, and sweeping what a dead owner left behind.

Every throwaway container and network imagekit creates carries the label
``io.imagekit.owner``, and every temporary file beside an output carries the
same token in its name: this host, the process id, and the process's start
time (so that a recycled pid is never mistaken for the owner). A process
killed with SIGKILL cleans nothing; the next imagekit command that talks to
the engine, or writes the same output, removes what such owners left. Things
owned by live processes, or by another host (a shared filesystem), are never
touched, so concurrent runs keep each other's work.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path

LABEL = "io.imagekit.owner"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), or None when
    there is no such process or it is a zombie (killed, not yet reaped: it will never clean up)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]


@functools.lru_cache(maxsize=1)
def me() -> str:
    return f"{socket.gethostname()}+{os.getpid()}+{_start_time(os.getpid()) or 0}"


def of(pid: int) -> str | None:
    """What ``me()`` is in the running process ``pid`` of this host (None when there is none): a
    parent's handle on exactly what its child owns."""
    start = _start_time(pid)
    return None if start is None else f"{socket.gethostname()}+{pid}+{start}"


def alive(owner: str) -> bool:
    """False only when the owner certainly is gone: same host, and no process with that pid and start."""
    try:
        host, pid, start = owner.rsplit("+", 2)
        pid_n = int(pid)
    except ValueError:
        return True  # not ours to judge
    if host != socket.gethostname():
        return True
    return _start_time(pid_n) == start


def labels() -> dict[str, str]:
    return {LABEL: me()}


def label_args() -> list[str]:
    """The docker CLI arguments that mark a container as ours."""
    return ["--label", f"{LABEL}={me()}"]


def sweep_engine(client) -> list[str]:
    """Remove containers and networks whose owner is dead; returns what was removed."""
    removed = []
    # sparse: the list itself, without inspecting each container, which fails for one removed meanwhile.
    for container in client.containers.list(all=True, filters={"label": LABEL}, sparse=True):
        if not alive((container.attrs.get("Labels") or {}).get(LABEL, "")):
            try:
                container.remove(force=True)
                removed.append(f"container {(container.attrs.get('Names') or [container.id])[0].lstrip('/')}")
            except Exception:  # noqa: BLE001 - gone already, or a concurrent sweep got it
                pass
    for network in client.networks.list(filters={"label": LABEL}):
        if not alive(network.attrs.get("Labels", {}).get(LABEL, "")):
            try:
                network.remove()
                removed.append(f"network {network.name}")
            except Exception:  # noqa: BLE001 - still in use by a live container, or gone
                pass
    return removed


def part_prefix(final: Path) -> str:
    """The temporary name's prefix for ``final``: hidden, and naming its owner."""
    return f".{final.name}.{me()}."


def sweep_parts(final: Path) -> list[Path]:
    """Remove ``.NAME.<owner>.*.part`` files beside ``final`` whose owner is dead."""
    removed = []
    for path in final.parent.glob(f".{final.name}.*.part"):
        token = path.name[len(final.name) + 2:].rsplit(".", 2)[0]
        if token.count("+") >= 2 and not alive(token):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
