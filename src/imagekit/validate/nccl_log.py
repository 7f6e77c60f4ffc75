"""What NCCL_DEBUG=INFO lines say about the transports a job used.

The authoritative lines are the channel connections NCCL prints once per peer
and channel, e.g. ``Channel 00/0 : 0[0] -> 1[1] via P2P/IPC`` or ``Channel
01/0 : 1[1] -> 0[0] [send] via NET/IB/0/GDRDMA`` (older NCCL: ``Ring 00 : 0 -> 1
via ...``). ``Using network IB|Socket|<plugin>`` and ``NET/IB : Using
[0]mlx5_0:1/IB`` name the network; they do not prove it carried traffic.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Optional

from imagekit.validate.model import TransportInfo

TRANSPORTS = ("IB", "GDRDMA", "Socket", "P2P", "SHM", "NVLS", "CollNet")

_HOST = re.compile(r"^([A-Za-z][\w.-]*):\d+:\d+ \[\d+\] ")
_CHANNEL = re.compile(
    r"(?:Channel|Ring)\s+\d+(?:/\d+)?\s*:\s*(\d+)(?:\[[^\]]*\])?\s*->\s*(\d+)(?:\[[^\]]*\])?"
    r"(?:\s*\[(?:send|receive)\])?\s+via\s+(\S+(?: [A-Za-z]+/\S+)?)"
)
_USING_NETWORK = re.compile(r"Using network\s+(.+?)\s*$")
_NET_IB = re.compile(r"NET/IB\s*:\s*Using\s+(.*?)(?:\s*;\s*OOB.*)?$")
_NET_SOCKET = re.compile(r"NET/Socket\s*:\s*Using\s+(.*)$")
_GDR = re.compile(r"GPU Direct RDMA (Enabled|Disabled)")
_VERSION = re.compile(r"NCCL version\s+(\S+)")
_NRANKS = re.compile(r"\brank\s+\d+\s+nr?anks\s+(\d+)", re.IGNORECASE)
_WARN = re.compile(r"NCCL (?:WARN|ERROR)\s+(.*)$")
_ENV_ALGO = re.compile(r"NCCL_ALGO set by environment to\s+(\S+)")
# NCCL_DEBUG_SUBSYS=TUNING, rank 0: "AllReduce: 8589934592 Bytes -> Algo Ring proto Simple channel{Lo..Hi}=..."
_TUNING = re.compile(r"\b(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|AllToAll|SendRecv|Send|Recv):\s+"
                     r"(\d+) Bytes -> Algo (\w+)")
_FUNCS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
          "Broadcast": "broadcast", "Reduce": "reduce", "AllToAll": "alltoall", "SendRecv": "sendrecv",
          "Send": "sendrecv", "Recv": "sendrecv"}
# Sizes from which a tuning line says which algorithm carried the bandwidth range.
ALGO_FROM_SIZE = 64 << 20


def classify(via: str) -> list[str]:
    """Canonical transport names for one ``via`` text.

    >>> classify("NET/IB/0/GDRDMA")
    ['IB', 'GDRDMA']
    """
    head = via.split("/", 1)[0].upper()
    parts = via.split("/")
    out: list[str] = []
    if head == "P2P":
        out.append("P2P")
    elif head == "SHM":
        out.append("SHM")
    elif head == "NVLS":
        out.append("NVLS")
    elif head in ("COLLNET", "COLLNETDIRECT", "COLLNETCHAIN"):
        out.append("CollNet")
    elif head == "NET" and len(parts) > 1:
        plugin = parts[1]
        if plugin.upper().startswith("IB"):  # "IB" and the IBext_vN plugin
            out.append("IB")
        elif plugin.lower() == "socket":
            out.append("Socket")
        else:
            out.append(f"NET:{plugin}")
    else:
        out.append(via)
    if any(p.upper() in ("GDRDMA", "GDR") for p in parts[1:]):
        out.append("GDRDMA")
    return out


def canonical(name: str) -> Optional[str]:
    """User spelling -> canonical transport (``ib`` -> ``IB``, ``gdr`` -> ``GDRDMA``)."""
    key = name.strip().lower()
    aliases = {"ib": "IB", "infiniband": "IB", "roce": "IB", "gdr": "GDRDMA", "gdrdma": "GDRDMA",
               "socket": "Socket", "tcp": "Socket", "p2p": "P2P", "nvlink": "P2P", "shm": "SHM",
               "nvls": "NVLS", "collnet": "CollNet"}
    if key in aliases:
        return aliases[key]
    if key.startswith("net:"):
        return "NET:" + name.strip()[4:]
    return None


def algorithm_for(info: TransportInfo, collective: str) -> "tuple[Optional[str], str]":
    """(algorithm, where it was read) for a collective's bandwidth range, or (None, "")."""
    env = info.env_algorithm
    if env and not env.startswith("^") and "," not in env and ":" not in env:
        return env, f"NCCL_ALGO set by environment to {env}"
    counts = {k.split(":", 1)[1]: n for k, n in info.algorithms.items() if k.split(":", 1)[0] == collective}
    if counts:
        algo = max(counts, key=lambda a: counts[a])
        return algo, f"NCCL's tuning log chose {algo} for {collective} at sizes >= 64 MiB"
    return None, ""


class NcclLogParser:
    def __init__(self) -> None:
        self.info = TransportInfo()
        self._counts: Counter = Counter()
        self._vias: Counter = Counter()
        self._hosts: set[str] = set()

    def feed(self, log: str) -> None:
        info = self.info
        info.info_lines += 1
        if (m := _HOST.match(log)):
            self._hosts.add(m.group(1))
        if (m := _CHANNEL.search(log)):
            via = m.group(3)
            self._vias[via] += 1
            for t in classify(via):
                self._counts[t] += 1
            return
        if (m := _USING_NETWORK.search(log)):
            if m.group(1) not in info.networks:
                info.networks.append(m.group(1))
        elif (m := _NET_IB.search(log)):
            for dev in m.group(1).split():
                if dev not in info.ib_devices:
                    info.ib_devices.append(dev)
        elif (m := _NET_SOCKET.search(log)):
            for dev in m.group(1).split():
                if dev not in info.socket_devices:
                    info.socket_devices.append(dev)
        if (m := _GDR.search(log)):
            enabled = m.group(1) == "Enabled"
            info.gdr_enabled = enabled or bool(info.gdr_enabled)
        if info.nccl_version is None and (m := _VERSION.search(log)):
            info.nccl_version = m.group(1)
        if (m := _NRANKS.search(log)):
            info.nranks = max(info.nranks or 0, int(m.group(1)))
        if (m := _ENV_ALGO.search(log)):
            info.env_algorithm = m.group(1).rstrip(".")
        if (m := _TUNING.search(log)) and int(m.group(2)) >= ALGO_FROM_SIZE:
            key = f"{_FUNCS[m.group(1)]}:{m.group(3)}"
            info.algorithms[key] = info.algorithms.get(key, 0) + 1
        if (m := _WARN.search(log)) and len(info.warnings) < 20:
            info.warnings.append(m.group(1).strip())

    def finish(self) -> TransportInfo:
        info = self.info
        info.counts = dict(self._counts)
        info.vias = dict(self._vias)
        info.transports = [t for t in TRANSPORTS if t in self._counts] + sorted(
            t for t in self._counts if t not in TRANSPORTS)
        info.hosts = sorted(self._hosts)
        return info
