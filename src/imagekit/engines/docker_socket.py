"""The Docker engine's API on its local unix socket, with the standard library alone.

Two paths must not pay for the ``docker`` package (its import, a ping and a sweep cost more than
a store hit may take) nor for the ``docker`` CLI (a Go process that copies every byte of an export
through user space, about a second of CPU per GB): the export store's hit, which needs an image's
ID, and the export stream itself. Both talk HTTP/1.0 here: the engine then sends the body as it is
and closes the connection, so there is no chunked encoding to undo and an export's bytes can go
from the socket to the squashfs tool's pipe in the kernel (splice(2), :mod:`imagekit.export.tarstream`).

Only a local unix socket is spoken to, and never with TLS: any other ``DOCKER_HOST`` (tcp, ssh,
TLS) returns None from :func:`socket_path`, and the caller takes the ``docker`` package or CLI path,
which know those.
"""

from __future__ import annotations

import io
import json
import os
import socket
from typing import Any, BinaryIO
from urllib.parse import quote, urlencode

from imagekit.util.errors import EngineError

DEFAULT_HOST = "unix:///var/run/docker.sock"
TIMEOUT = 60.0            # one API call (create, remove, inspect); a stream has none
STREAM_BUFFER = 1 << 20   # the export's one read buffer (the filter splices past it)
MAX_HEADER_LINES = 100


class EngineRefused(EngineError):
    """The engine answered a call with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def socket_path(env: dict[str, str] | None = None) -> str | None:
    """The engine's local socket, or None where it is reached another way (tcp, ssh, TLS)."""
    env = os.environ if env is None else env
    host = env.get("DOCKER_HOST") or DEFAULT_HOST
    if not host.startswith("unix://") or env.get("DOCKER_TLS_VERIFY"):
        return None
    return host[len("unix://"):]


def path(*parts: str, **query: Any) -> str:
    """An API path with its parts quoted (an image name keeps its ``/``, ``:`` and ``@``)."""
    text = "/" + "/".join(quote(p, safe="/:@") for p in parts)
    return text + ("?" + urlencode(query) if query else "")


def _connect(sock_path: str, timeout: float | None) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(sock_path)
    except OSError:
        sock.close()
        raise
    return sock


def _send(sock: socket.socket, method: str, target: str, body: dict[str, Any] | None) -> None:
    data = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {target} HTTP/1.0\r\nHost: docker\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    sock.sendall(head.encode() + b"\r\n" + data)


def _status(reader: BinaryIO) -> int:
    """Read the status line and the headers; the body follows in ``reader``."""
    line = reader.readline(1024)
    try:
        status = int(line.split(b" ", 2)[1])
    except (IndexError, ValueError):
        raise EngineError(f"the engine's socket did not answer in HTTP ({line[:60]!r})") from None
    for _ in range(MAX_HEADER_LINES):
        if reader.readline(8192) in (b"\r\n", b"\n", b""):
            return status
    raise EngineError("the engine's answer has too many header lines")


def _message(status: int, body: bytes) -> str:
    try:
        return str(json.loads(body).get("message") or f"status {status}")
    except (ValueError, AttributeError):
        return body.decode("utf-8", "replace").strip()[:300] or f"status {status}"


def call(sock_path: str, method: str, target: str, body: dict[str, Any] | None = None, *,
         timeout: float = TIMEOUT) -> tuple[int, bytes]:
    """(status, body) of one API call; OSError when nothing answers on the socket."""
    with _connect(sock_path, timeout) as sock:
        _send(sock, method, target, body)
        with sock.makefile("rb") as reader:
            status = _status(reader)
            return status, reader.read()


def json_call(sock_path: str, method: str, target: str, body: dict[str, Any] | None = None,
              ok: tuple[int, ...] = (200,)) -> Any:
    """The JSON answer of one call; :class:`EngineRefused` with the engine's message on another status."""
    status, data = call(sock_path, method, target, body)
    if status not in ok:
        raise EngineRefused(status, _message(status, data))
    return json.loads(data) if data.strip() else None


def stream(sock_path: str, target: str) -> BinaryIO:
    """The body of a GET as one buffered file over the socket's descriptor, read to the connection's
    end (HTTP/1.0): a FileIO under a single buffer, so that a reader may splice from the descriptor
    once the buffer is drained. :class:`EngineRefused` when the engine answers with an error."""
    sock = _connect(sock_path, TIMEOUT)
    try:
        _send(sock, "GET", target, None)
        sock.settimeout(None)         # an export may pause for as long as the engine's disk does
        reader = io.open(sock.detach(), "rb", buffering=STREAM_BUFFER)
    except BaseException:
        sock.close()
        raise
    try:
        status = _status(reader)
        if status != 200:
            raise EngineRefused(status, _message(status, reader.read(1 << 16)))
    except BaseException:
        reader.close()
        raise
    return reader
