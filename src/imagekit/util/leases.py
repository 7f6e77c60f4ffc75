"""Leases: who owns a temporary thing imagekit made, and sweeping what a dead owner left behind.

A temporary is leased to the process that made it for as long as that process lives (not the
files' owners, which :mod:`imagekit.export.store.trust` checks).

Every throwaway container and network imagekit creates carries the label
``io.imagekit.owner``, and every temporary file beside an output carries the
same token in its name: ``WHERE+PID+START``. WHERE names the PID namespace the
pid means something in: the host name, the namespace's inode and the boot id
(``node1.ns4026531836.b1f0c2a9e``), because one host name can hold several PID
namespaces (a container with host networking, a CI runner) and a pid of one is
meaningless in another, and pids start again after a reboot. START is the
process's start time, so that a recycled pid is never mistaken for the owner.
A process killed with SIGKILL cleans nothing; the next imagekit command that
talks to the engine, or writes the same output, removes what such owners left.
Only an owner of this very namespace and boot can be judged dead; things owned
by live processes, by another namespace or by another host (a shared
filesystem) are never touched by this rule, so concurrent runs keep each
other's work.
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


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:8] or "0"
    except OSError:
        return "0"


def _where(pid: int | str = "self") -> str | None:
    """``HOST.nsINODE.bBOOT``: the PID namespace (of ``pid``) on this boot of this host; None when
    the process is gone. Host names never contain ``+`` or ``@``, so a token splits unambiguously."""
    try:
        ns = os.stat(f"/proc/{pid}/ns/pid").st_ino
    except FileNotFoundError:
        return None
    except OSError:
        ns = 0          # no permission to look (another user's process): judged by start time alone
    return f"{socket.gethostname()}.ns{ns}.b{_boot_id()}"


@functools.lru_cache(maxsize=1)
def where() -> str:
    """This process's WHERE: the namespace its pids mean something in."""
    return _where() or f"{socket.gethostname()}.ns0.b{_boot_id()}"


@functools.lru_cache(maxsize=1)
def me() -> str:
    return f"{where()}+{os.getpid()}+{_start_time(os.getpid()) or 0}"


def of(pid: int) -> str | None:
    """What ``me()`` is in the running process ``pid`` of this namespace (None when there is none): a
    parent's handle on exactly what its child owns."""
    start = _start_time(pid)
    place = _where(pid)
    return None if start is None or place is None else f"{place}+{pid}+{start}"


def local(owner: str) -> bool:
    """True when ``owner`` is a token of this PID namespace on this boot: only then do its pid and
    start time mean something here. Tokens of another namespace, boot or host (or of an older
    imagekit, which wrote a bare host name) are not: those are judged by age, never by /proc."""
    return owner.count("+") >= 2 and owner.rsplit("+", 2)[0] == where()


def alive(owner: str) -> bool:
    """False only when the owner certainly is gone: this namespace, and no process with that pid and start."""
    if not local(owner):
        return True  # not ours to judge
    _, pid, start = owner.rsplit("+", 2)
    try:
        pid_n = int(pid)
    except ValueError:
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
