"""HTTP(S) for the registry client, with the standard library alone (``http.client`` and ``ssl``).

The client (:mod:`imagekit.registry.client`) decides everything that matters for safety itself: it
follows no redirect here, sends credentials only to their origin, streams every body and reads it
under a byte cap and a deadline. What it needs below that is one request at a time on a kept-alive
connection, a proxy where the environment names one, and TLS checked against the CA bundle it names.
The ``requests`` package did this before; importing it (with urllib3, idna, charset_normalizer) cost
about 0.1 s, most of a warm Pyxis importer hit, which must resolve a tag on every job step.

The objects here answer as much of ``requests``' interface as the client uses: a :class:`Session`
whose ``request(...)`` returns a :class:`Response` (``status_code``, case-insensitive ``headers``,
``url``, ``links``, ``raw.read1(n, decode_content=True)``, ``raw.release_conn()``, ``close()``).
Errors are :class:`TransportError` (an OSError), :class:`TLSFailure` and :class:`TransportTimeout`,
with the socket's or the TLS library's own reason in their text.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import socket
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping
from urllib.parse import unquote, urlsplit

# http.client (and the email and ssl packages it loads) is imported by the functions that talk HTTP,
# when the first request is made: code that imports the registry client and never asks a registry (an
# export store hit) does not pay for it.
if TYPE_CHECKING:
    import http.client
    import ssl

USER_AGENT = "imagekit"
BLOCK = 1 << 20        # an upload's body goes out in pieces this large (http.client's default is 8 KiB)


class TransportError(OSError):
    """A connection that could not be made, or broke."""


class TLSFailure(TransportError):
    """The TLS handshake or the certificate check failed."""


class TransportTimeout(TransportError):
    """Connecting, or waiting for the next bytes, took longer than the timeout."""


def _wrap(exc: BaseException, when: str) -> TransportError:
    import http.client
    import ssl

    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, (ssl.SSLError, ssl.CertificateError)):
        return TLSFailure(str(exc))
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return TransportTimeout("Read timed out" if when == "read" else "Connection timed out")
    if isinstance(exc, http.client.HTTPException):
        return TransportError(f"{type(exc).__name__}: {exc}")
    return TransportError(str(exc) or type(exc).__name__)


class Headers:
    """A response's headers, looked up whatever their case; repeated ones joined with ", "."""

    def __init__(self, message: http.client.HTTPMessage) -> None:
        self._message = message

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self._message.get_all(name)
        return ", ".join(values) if values else default

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._message.get(name) is not None

    def items(self) -> list[tuple[str, str]]:
        return list(self._message.items())


@dataclass(frozen=True)
class Sent:
    """What was asked: the method (a HEAD response has no body)."""

    method: str
    url: str


class Body:
    """A response body as it arrives: ``read1``/``read`` (decoding gzip or deflate, as urllib3's
    ``decode_content``), and ``release_conn`` to give the connection back once nothing is left."""

    def __init__(self, resp: http.client.HTTPResponse, release: Any) -> None:
        self._resp, self._release = resp, release
        encoding = (resp.getheader("Content-Encoding") or "").strip().lower()
        self._inflate = (zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding in ("gzip", "x-gzip")
                         else zlib.decompressobj() if encoding == "deflate" else None)

    def _pull(self, reader: Any, n: int, decode_content: bool) -> bytes:
        import http.client

        while True:
            try:
                data = reader(n if n and n > 0 else 1 << 16)
            except (OSError, http.client.HTTPException) as exc:
                raise _wrap(exc, "read") from None
            missing = self._resp.length
            if not data and missing:     # http.client ends quietly where the connection closed early
                raise TransportError(f"IncompleteRead: the connection closed {missing} bytes before the "
                                     "Content-Length it announced")
            if self._inflate is None or not decode_content:
                return data
            if not data:
                return self._inflate.flush()
            try:
                out = self._inflate.decompress(data)
            except zlib.error as exc:
                raise TransportError(f"the body does not decode as its Content-Encoding says ({exc})") from None
            if out:
                return out

    def read1(self, n: int = -1, decode_content: bool = True) -> bytes:
        """What has arrived, at most ``n`` bytes (waits only when nothing has)."""
        return self._pull(self._resp.read1, n, decode_content)

    def read(self, n: int = -1, decode_content: bool = True) -> bytes:
        if n is None or n < 0:
            chunks = []
            while chunk := self._pull(self._resp.read1, 1 << 16, decode_content):
                chunks.append(chunk)
            return b"".join(chunks)
        return self._pull(self._resp.read, n, decode_content)

    def release_conn(self) -> None:
        self._release()


class Response:
    """One response, its body not yet read (every request streams)."""

    def __init__(self, resp: http.client.HTTPResponse, sent: Sent, release: Any, close: Any) -> None:
        self.status_code = resp.status
        self.headers = Headers(resp.msg)
        self.url = sent.url
        self.request = sent
        self.raw = Body(resp, release)
        self._close = close

    @property
    def links(self) -> dict[str, dict[str, str]]:
        """The ``Link`` header by ``rel`` (``{"next": {"url": …, "rel": "next"}}``), as requests parses it."""
        found: dict[str, dict[str, str]] = {}
        for part in _split_links(self.headers.get("Link") or ""):
            url, _, params = part.partition(";")
            link = {"url": url.strip(" <>'\"")}
            for param in params.split(";"):
                key, _, value = param.partition("=")
                if key.strip():
                    link[key.strip().lower()] = value.strip(" '\"")
            found[link.get("rel") or link["url"]] = link
        return found

    def close(self) -> None:
        self._close()

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _split_links(value: str) -> list[str]:
    """The comma-separated links of a ``Link`` header (a comma inside <…> belongs to the URL)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(value):
        depth += ch == "<"
        depth -= ch == ">" and depth > 0
        if ch == "," and depth == 0:
            parts.append(value[start:i])
            start = i + 1
    parts.append(value[start:])
    return [p.strip() for p in parts if p.strip()]


def bypasses_proxy(url: str, no_proxy: str) -> bool:
    """Whether ``no_proxy`` (comma-separated hosts, domains, ``.domain``, ``host:port``, CIDR networks,
    or ``*``) exempts ``url`` from the proxy, by the rules requests and curl follow."""
    parts = urlsplit(url)
    host, port = (parts.hostname or "").lower(), parts.port
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (e.strip().lower() for e in no_proxy.replace(" ", ",").split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if address is not None and "/" in entry:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name, _, entry_port = entry.partition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and (not entry_port.isdigit() or int(entry_port) != port):
            continue
        name = name.lstrip(".")
        if host == name or host.endswith("." + name):
            return True
    return False


class Session:
    """Requests to any origin, one at a time, with an idle connection kept per origin and proxy."""

    def __init__(self) -> None:
        self.verify: bool | str = True      # True: the CA bundle requests used (certifi), else the system's
        self.headers: dict[str, str] = {}
        self.trust_env = False              # never read: nothing here looks at ~/.netrc or the environment
        self._idle: dict[tuple, http.client.HTTPConnection] = {}
        self._tls: ssl.SSLContext | None = None

    def _context(self) -> ssl.SSLContext:
        import ssl

        if self._tls is None:
            if self.verify is False:
                context = ssl._create_unverified_context()   # noqa: S323 - only when a caller asks for it
            elif isinstance(self.verify, str):
                context = ssl.create_default_context(**({"capath": self.verify} if os.path.isdir(self.verify)
                                                        else {"cafile": self.verify}))
            else:
                context = ssl.create_default_context(cafile=_certifi())
            self._tls = context
        return self._tls

    def _connect(self, scheme: str, host: str, port: int, proxy: str | None,
                 connect_timeout: float) -> tuple[http.client.HTTPConnection, dict[str, str]]:
        """A new connection (through ``proxy`` when given) and the headers the proxy needs per request."""
        import http.client

        extra: dict[str, str] = {}
        if proxy:
            p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            if p.scheme not in ("http", ""):
                raise TransportError(f"the proxy {p.scheme}://{p.hostname} is not an http:// proxy")
            auth = {}
            if p.username:
                token = base64.b64encode(f"{unquote(p.username)}:{unquote(p.password or '')}".encode()).decode()
                auth = {"Proxy-Authorization": f"Basic {token}"}
            if scheme == "https":
                conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                    p.hostname or "", p.port or 80, timeout=connect_timeout, context=self._context(), blocksize=BLOCK)
                conn.set_tunnel(host, port, headers=auth)
            else:
                conn = http.client.HTTPConnection(p.hostname or "", p.port or 80, timeout=connect_timeout,
                                                  blocksize=BLOCK)
                extra = auth
        elif scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=connect_timeout, context=self._context(),
                                               blocksize=BLOCK)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=connect_timeout, blocksize=BLOCK)
        try:
            conn.connect()
        except BaseException as exc:
            conn.close()
            if isinstance(exc, (OSError, http.client.HTTPException)):
                raise _wrap(exc, "connect") from None
            raise
        return conn, extra

    def request(self, method: str, url: str, headers: Mapping[str, str] | None = None, data: Any = None,
                timeout: tuple[float, float] = (30.0, 60.0), allow_redirects: bool = False, stream: bool = True,
                proxies: Mapping[str, str] | None = None) -> Response:
        """Send one request and return its response with the body unread. Redirects are the caller's
        (``allow_redirects`` must be False); ``data``: bytes, or a file object with a Content-Length
        header given."""
        import http.client

        if allow_redirects or not stream:
            raise ValueError("this transport streams every body and follows no redirect")
        parts = urlsplit(url)
        scheme = parts.scheme
        if scheme not in ("http", "https") or not parts.hostname:
            raise TransportError(f"not an http(s) URL: {scheme}://{parts.hostname or ''}")
        port = parts.port or (443 if scheme == "https" else 80)
        proxy = (proxies or {}).get(scheme)
        key = (scheme, parts.hostname, port, proxy)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if proxy and scheme == "http":
            target = url.split("#", 1)[0]          # a plain-HTTP proxy takes the absolute form
        sent_headers = {"User-Agent": USER_AGENT, **self.headers, **dict(headers or {})}
        conn = self._idle.pop(key, None)
        for attempt in (1, 2):
            fresh = conn is None
            if conn is None:
                conn, extra = self._connect(scheme, parts.hostname, port, proxy, timeout[0])
                sent_headers.update(extra)
            try:
                if conn.sock is not None:
                    conn.sock.settimeout(timeout[1])
                conn.request(method, target, body=data, headers=sent_headers)
                resp = conn.getresponse()
                break
            except BaseException as exc:
                conn.close()
                conn = None
                # A kept-alive connection the server closed meanwhile: once more, on a new one (only a
                # body that can be sent again: bytes or none).
                retry = (not fresh and attempt == 1 and isinstance(data, (bytes, type(None)))
                         and isinstance(exc, (ConnectionError, http.client.RemoteDisconnected,
                                              http.client.BadStatusLine)))
                if retry:
                    continue
                if isinstance(exc, (OSError, http.client.HTTPException)):
                    raise _wrap(exc, "read") from None
                raise
        held = conn

        def release() -> None:
            nonlocal held
            if held is None:
                return
            if (method == "HEAD" or resp.isclosed() or resp.length == 0) and not resp.will_close:
                resp.close()
                old = self._idle.pop(key, None)
                if old is not None:
                    old.close()
                self._idle[key] = held
            else:
                held.close()
            held = None

        def close() -> None:
            nonlocal held
            if held is None:
                return
            if resp.isclosed() and not resp.will_close:
                release()
            else:
                resp.close()
                held.close()
                held = None

        return Response(resp, Sent(method, url), release, close)

    def close(self) -> None:
        for conn in self._idle.values():
            conn.close()
        self._idle.clear()


def _certifi() -> str | None:
    """certifi's bundle (what requests verified with), where it is installed; else the system's."""
    try:
        import certifi
    except ImportError:
        return None
    return certifi.where()
