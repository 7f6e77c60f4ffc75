"""What imagekit prints reaches a terminal: someone else's text in it never drives that terminal.

Image labels, registry answers, container and check output are other people's text. Printed raw, an
escape sequence in a label sets the window title, clears the screen, or moves the cursor back over a
line and writes "verified: signed by ci" there (security-4 H9). So every control character in what
imagekit prints is shown as an escape instead (``\\x1b``, ``\\r``, ``\\u202e``): C0 but the newline,
DEL, C1, and Unicode's format and line/paragraph separators (bidirectional overrides, zero-width
characters), which can make a line read as another. The CLI prints everything through
:func:`escaped_output`; the importer's log through :func:`printable`. Only imagekit's own progress
line writes a control sequence, to :func:`unescaped` of its stream.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import unicodedata
from typing import Iterator, TextIO

KEEP = "\n"


@functools.lru_cache(maxsize=4096)
def _escape(ch: str) -> str:
    if ch in KEEP or ch == " ":
        return ch
    code = ord(ch)
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return {"\t": "\\t", "\r": "\\r"}.get(ch, f"\\x{code:02x}")
    if unicodedata.category(ch) in ("Cf", "Zl", "Zp", "Cc"):
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    return ch


# What may need escaping: everything but the newline and printable ASCII (C1 and the Unicode categories
# are decided one character at a time, cached). Written negated: a range up to U+10FFFF takes the
# regex compiler milliseconds, which every importer start would pay.
_SUSPECT = re.compile(r"[^\n\x20-\x7e]")


def printable(text: str) -> str:
    """``text`` with every control character escaped (the module docstring); the newline stays."""
    return _SUSPECT.sub(lambda m: _escape(m.group()), text)


class EscapingStream:
    """A text stream that writes :func:`printable` text to ``stream``; every other attribute is the stream's
    (``encoding``, ``isatty``, ``buffer``: bytes written there are data, not text for a terminal)."""

    def __init__(self, stream: TextIO) -> None:
        self.unescaped = stream

    def write(self, text: str) -> int:
        self.unescaped.write(printable(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self.unescaped, name)


def unescaped(stream: TextIO) -> TextIO:
    """The stream under an :class:`EscapingStream` (imagekit's own control sequences), else ``stream``."""
    return getattr(stream, "unescaped", stream) if isinstance(stream, EscapingStream) else stream


@contextlib.contextmanager
def escaped_output() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` escape control characters while the block runs."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapingStream(sys.stdout), EscapingStream(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
