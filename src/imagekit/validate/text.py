"""Turn a raw job log into clean lines, each split into benchmark text and NCCL log text.

Real logs are messy: CRLF, ANSI colour, ``srun --label`` (``3: ``), ``mpirun
--tag-output`` (``[1,0]<stdout>:``), pdsh-style ``host: `` prefixes, and NCCL
INFO lines from other ranks written into the middle of a table row because
all ranks share one stdout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_PREFIXES = (
    re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?"),  # mpirun --tag-output
    re.compile(r"^\s*\d+:\s"),  # srun --label
    # pdsh/clush "host: " -- only when what follows looks like benchmark or NCCL output
    re.compile(r"^[A-Za-z][\w.-]{0,63}: (?=\s*(?:#|\d|[A-Za-z][\w.-]*:\d+:\d+ \[|NCCL ))"),
)
# "host:pid:tid [cudaDev] NCCL INFO ..."; the host must start with a letter so that a
# row fragment ending in "-1" (the root column) is not eaten by the match.
_NCCL_AT = re.compile(r"[A-Za-z][\w.-]*:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE|ERROR|ABORT)\b")
_NCCL_BARE = re.compile(r"^\s*NCCL (?:INFO|WARN|TRACE|ERROR|ABORT|version)\b")


@dataclass
class Line:
    no: int  # 1-based line number in the input
    text: str  # benchmark part, prefixes and escapes removed ("" if the line is only a log line)
    log: Optional[str] = None  # NCCL log part, if any


def decode(data: "bytes | str") -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data


def _strip_prefixes(line: str) -> str:
    changed = True
    while changed:
        changed = False
        for rx in _PREFIXES:
            new = rx.sub("", line, count=1)
            if new != line:
                line, changed = new, True
    return line


def normalize(data: "bytes | str") -> str:
    """Text with escapes removed and one kind of newline."""
    text = decode(data)
    return _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n").replace("\t", " ")


def wrap_widths(text: str, limit: int = 3) -> list[int]:
    """Likely terminal widths: lengths shared by several of the longest lines."""
    lengths: dict[int, int] = {}
    for line in text.split("\n"):
        if len(line) >= 40:
            lengths[len(line)] = lengths.get(len(line), 0) + 1
    common = sorted((n for n, c in lengths.items() if c >= 2), key=lambda n: (-lengths[n], -n))
    return common[:limit]


def unwrap(text: str, width: int) -> str:
    """Undo a terminal's hard wrap: a line exactly ``width`` long continues on the next line."""
    out: list[str] = []
    buf = ""
    for line in text.split("\n"):
        buf += line
        if len(line) != width:
            out.append(buf)
            buf = ""
    if buf:
        out.append(buf)
    return "\n".join(out)


def clean_lines(data: "bytes | str") -> list[Line]:
    text = normalize(data)
    out: list[Line] = []
    for no, raw in enumerate(text.split("\n"), start=1):
        line = _strip_prefixes(_CONTROL.sub("", raw)).rstrip()
        m = _NCCL_AT.search(line)
        if m:
            head, log = line[: m.start()], line[m.start():]
            if head.endswith("N/") and log.startswith("A"):  # "N/A" glued to a hostname
                head, log = head + "A", log[1:]
            out.append(Line(no, head.rstrip(), log))
        elif _NCCL_BARE.match(line):
            out.append(Line(no, "", line.strip()))
        else:
            out.append(Line(no, line))
    return out
