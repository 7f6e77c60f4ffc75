"""HTTP servers the registry tests make: recording fronts for the real registry, and stand-ins.

:class:`Server` is a threaded ``http.server`` on a loopback address, optionally with TLS. It
records every request (method, path, headers, body) before the test's handler answers, so a
test asserts what was sent where, never how long anything took. ``127.0.0.2`` plays "another
host": a different origin (scheme, host, port) that is still on this machine, as in the
red-team reproducers.

:func:`forward` passes a request unchanged to the real docker-registry (tests/helpers/local_registry.py),
so a front can add one misbehaviour (a redirect, a rewritten ``Location``, a ``Link``) to an
otherwise real exchange. A handler that answers everything itself is a stand-in; each test that
uses one says why the real registry cannot be made to misbehave that way.
"""

from __future__ import annotations

import base64
import http.client
import http.server
import ssl
import subprocess
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}


@dataclass
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]          # header names lower-cased
    body: bytes = b""

    @property
    def authorization(self) -> str | None:
        return self.headers.get("authorization")

    def basic(self) -> tuple[str, str] | None:
        """The Basic credential it carried, decoded, if any."""
        value = self.authorization or ""
        if not value.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(value[6:]).decode().partition(":")
        return user, password


@dataclass
class Reply:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | Iterable[bytes] = b""
    # False: no Content-Length, the body ends when the connection closes (HTTP/1.1 allows it
    # with "Connection: close"); for bodies of unknown or hostile length.
    length: bool = True


Handler = Callable[[Seen, "Server"], Reply]


class Server:
    """``with Server(handler) as s``: serves on ``s.addr`` (``host:port``) until the block ends."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1",
                 tls: tuple[Path, Path] | None = None) -> None:
        self.handler, self.host, self.tls = handler, host, tls
        self.seen: list[Seen] = []
        self.stop = threading.Event()       # handlers that stall wait on it, so teardown ends them
        self._lock = threading.Lock()
        outer = self

        class RequestHandler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with outer._lock:
                    outer.seen.append(seen)
                reply = outer.handler(seen, outer)
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                chunks = [reply.body] if isinstance(reply.body, bytes) else reply.body
                if reply.length:
                    data = b"".join(chunks)
                    self.send_header("Content-Length", str(len(data)))
                    chunks = [data]
                else:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if self.command == "HEAD":
                    return
                try:
                    for chunk in chunks:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    self.close_connection = True  # the client gave up: that is what some tests want

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _any

        self._server = http.server.ThreadingHTTPServer((host, 0), RequestHandler)
        self._server.daemon_threads = True
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)

    @property
    def addr(self) -> str:
        return f"{self.host}:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.addr}"

    def requests(self, method: str | None = None, contains: str = "") -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if (method is None or s.method == method) and contains in s.path]

    def __enter__(self) -> Server:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self._server.shutdown()
        self._server.server_close()


def forward(upstream: str, seen: Seen, tls: ssl.SSLContext | None = None) -> Reply:
    """Send ``seen`` to the real registry at ``upstream`` (``host:port``) and return its answer.

    The ``Host`` header is kept, as a reverse proxy that preserves it does: the registry builds
    its ``Location`` URLs from it, so they name the front, not the registry behind it."""
    conn = (http.client.HTTPSConnection(upstream, timeout=60, context=tls) if tls
            else http.client.HTTPConnection(upstream, timeout=60))
    headers = {k: v for k, v in seen.headers.items() if k not in HOP_BY_HOP}
    conn.request(seen.method, seen.path, body=seen.body or None, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    out = {k: v for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP}
    conn.close()
    return Reply(resp.status, out, data)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and 127.0.0.2 (by IP SAN) and its key; also the CA bundle."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=imagekit-test-registry",
                    "-addext", "subjectAltName=IP:127.0.0.1,IP:127.0.0.2"],
                   check=True, capture_output=True)
    return cert, key


def drip(data: bytes, every: threading.Event, pause: float) -> Iterator[bytes]:
    """``data`` one byte at a time, ``pause`` seconds apart (a registry that trickles);
    stops early when the server shuts down."""
    for i in range(len(data)):
        if every.wait(pause):
            return
        yield data[i:i + 1]
