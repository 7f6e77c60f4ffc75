"""A small client for the OCI distribution API (v2) over HTTP(S).

It does what imagekit's artifacts and the Pyxis importer need, and nothing more:
resolve a reference to its manifest digest (an index resolves to this platform's
manifest), read and write manifests, upload and stream blobs with their digests
verified, and list referrers (the 1.1 API, else the referrers tag schema).

Authentication follows the registry's ``WWW-Authenticate`` challenge: ``Bearer``
(a token from the realm, with credentials when there are any) or ``Basic``.
Credentials come from :mod:`imagekit.registry.credentials` (Enroot's file, Docker's
config.json) and nowhere else: ``~/.netrc`` is never read (proxies and the CA bundle are taken from
the environment explicitly). HTTP is :mod:`imagekit.registry.transport` (the standard library).
They are never logged.

What is sent where (an *origin* is scheme, host and port):

- The registry's credential, or the Bearer token bought with it, goes only to the
  registry's own origin: not after a redirect to another origin (a blob's storage),
  not to an upload ``Location`` or a referrers ``Link: next`` on another origin.
- A challenge is answered only when the registry's own origin sent it. Its token
  server (the realm) gets one Basic credential and nothing else: Enroot's entry for
  the realm's host when there is one (Enroot's curl ``--netrc-file`` rule), else the
  registry's credential (the rule of Docker's and containerd's clients: the registry
  named the realm, so the realm is its token service; Docker Hub's is auth.docker.io).
- Nothing goes from an HTTPS registry to a plain-HTTP URL, and plain HTTP is spoken
  only to an origin the user allowed it for (:func:`insecure_reason`).

Transport: HTTPS, except where :func:`insecure_reason` says why not: a loopback
*address* (127.0.0.0/8, ``::1``, or ``localhost`` when it resolves only to those, as
the Docker engine treats them), ``ENROOT_ALLOW_HTTP`` set like Enroot's, or the
registry named in ``IMAGEKIT_INSECURE_REGISTRIES`` (comma-separated ``host[:port]``).

Bounds: manifests, indexes and referrers pages up to 4 MiB each
(:data:`MAX_MANIFEST_BYTES`), referrers up to 100 pages and 16 MiB in all, a
``Link: next`` loop is an error, at most 10 redirects per request, a connect and a
read timeout on every request and a deadline on every document; blobs stream
through sha256 and stop at their descriptor's size.
"""

from __future__ import annotations

import base64
import hashlib
import io
import ipaddress
import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlencode, urljoin, urlsplit

from imagekit.util import digests, platforms, untrusted_json
from imagekit.util.errors import CredentialsError, IntegrityError, NotFoundError, RegistryError
from imagekit.registry import credentials as creds
from imagekit.registry import transport
from imagekit.registry.reference import Reference

if TYPE_CHECKING:
    from imagekit.registry.transport import Headers, Response

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
ACCEPT_ALL = ", ".join(INDEX_TYPES + MANIFEST_TYPES)

CHUNK = 1 << 20
FALSE_WORDS = {"", "0", "n", "no", "false", "off", "N", "NO", "No", "F", "FALSE", "False", "f"}

# --- bounds (issue 22, F12) ---------------------------------------------------------------------
# A manifest, an index and a referrers page are JSON documents read whole into memory. The OCI
# distribution spec asks clients and registries to "support manifest pushes of at least 4
# megabytes"; distribution (Docker's registry) stores no more than 4 MiB, oras-go reads at most
# 4 MiB and containerd 4*1048*1048 bytes. A referrers page is an image index, so the same cap.
MAX_MANIFEST_BYTES = 4 << 20
# All referrers pages together: ~30,000 descriptors, far above what one image collects (its
# exports, signatures, SBOMs), and a bound on memory whatever the page size.
MAX_REFERRERS_BYTES = 16 << 20
MAX_REFERRER_PAGES = 100
# A token response is a JWT or two in JSON, a few KiB; an error body is shown 200 characters.
MAX_TOKEN_BYTES = 1 << 20
MAX_ERROR_BYTES = 64 << 10
# Go's net/http default, which Docker's and containerd's registry clients inherit.
MAX_REDIRECTS = 10
# (connect, read): Enroot's default ENROOT_CONNECT_TIMEOUT is 30 s; the read timeout is the
# longest silence between two reads, so a registry that stops answering fails instead of hanging.
DEFAULT_TIMEOUT = (30.0, 60.0)
# A document (manifest, token, referrers page, error body) must arrive whole within this, so a
# registry cannot trickle one byte per read timeout for ever. 4 MiB at 1 Mbit/s takes 34 s.
DOCUMENT_DEADLINE = 120.0
# A blob may take as long as it needs, but not trickle: each BLOB_WINDOW seconds must bring at least
# BLOB_MIN_BYTES (about 1 KiB/s, curl's --speed-limit/--speed-time idea), or the download stops. A
# registry that sends a byte just inside every read timeout (a slow-loris) fails within two windows.
BLOB_WINDOW = 60.0
BLOB_MIN_BYTES = 64 << 10
REDIRECT_CODES = (301, 302, 303, 307, 308)


class NotFound(RegistryError, NotFoundError):
    """The registry answered 404 for a manifest, blob or tag."""

    exit_code = NotFoundError.exit_code


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def referrers_tag(digest: str) -> str:
    """The referrers tag schema: ``<alg[:32]>-<encoded[:64]>``, other characters as ``-``."""
    algorithm, _, encoded = digest.partition(":")
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", f"{algorithm[:32]}-{encoded[:64]}")


def host_platform() -> dict[str, str]:
    """This node's platform as an index entry names it (:func:`imagekit.util.platforms.host`)."""
    return platforms.host().as_dict()


def image_index(entries: list[dict[str, Any]], annotations: Mapping[str, str] | None = None) -> bytes:
    """An OCI image index of ``entries`` (descriptors with ``platform``), serialized canonically:
    the same images give the same index digest."""
    doc: dict[str, Any] = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": list(entries)}
    if annotations:
        doc["annotations"] = dict(annotations)
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _split_host_port(name: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` → (host without brackets, lower case; port)."""
    if name.startswith("["):
        host, _, rest = name[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = name.partition(":")
    return host.lower(), int(port) if port.isdigit() else None


def _loopback_address(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    # ::ffff:127.0.0.1 reaches 127.0.0.1; Python before 3.13 does not call it loopback.
    mapped = getattr(addr, "ipv4_mapped", None)
    return addr.is_loopback or (mapped is not None and mapped.is_loopback)


def is_loopback(host: str) -> bool:
    """True when ``host`` is a loopback *address*: a literal in 127.0.0.0/8 or ``::1`` (also
    IPv4-mapped), or ``localhost`` when every address it resolves to is one (RFC 6761 keeps that
    name off DNS). Any other name is not, whatever it resolves to now: ``127.example.org`` or
    ``127.0.0.1.nip.io`` are names on someone's DNS, and an answer can change between this check
    and the connection. Name such a registry in IMAGEKIT_INSECURE_REGISTRIES instead."""
    host = host.strip("[]").lower()
    try:
        return _loopback_address(ipaddress.ip_address(host.split("%", 1)[0]))
    except ValueError:
        pass
    if host.rstrip(".") != "localhost":
        return False
    try:
        infos = socket.getaddrinfo("localhost", None)
    except OSError:
        return False
    addresses = {ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos}
    return bool(addresses) and all(_loopback_address(a) for a in addresses)


def insecure_reason(registry: str, env: Mapping[str, str] | None = None) -> str | None:
    """Why ``registry`` (``host[:port]``) is spoken to over plain HTTP, or None for HTTPS.

    The three ways, checked in this order: a loopback address (:func:`is_loopback`); Enroot's
    ``ENROOT_ALLOW_HTTP`` set to anything but a false word (Enroot then allows HTTP everywhere);
    ``IMAGEKIT_INSECURE_REGISTRIES``, comma-separated ``host[:port]`` entries, each naming one
    registry (the port is part of the name; a bare host means port 80 over HTTP)."""
    env = os.environ if env is None else env
    host, port = _split_host_port(registry)
    if is_loopback(host):
        return f"{host} is a loopback address"
    if env.get("ENROOT_ALLOW_HTTP", "") not in FALSE_WORDS:
        return "ENROOT_ALLOW_HTTP is set"
    for entry in filter(None, (e.strip() for e in env.get("IMAGEKIT_INSECURE_REGISTRIES", "").split(","))):
        named_host, named_port = _split_host_port(entry)
        if named_host == host and (named_port or 80) == (port or 80):
            return "IMAGEKIT_INSECURE_REGISTRIES names it"
    return None


def plain_http_default(registry: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether imagekit speaks plain HTTP to ``registry`` unless told otherwise."""
    return insecure_reason(registry, env) is not None


class Origin(NamedTuple):
    """Where credentials are scoped: scheme, host (lower case, no brackets) and port."""

    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Origin:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        try:
            port = parts.port
        except ValueError:
            port = -1           # not a port: matches no origin
        return cls(scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme, 0))

    @property
    def hostport(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        default = {"http": 80, "https": 443}.get(self.scheme)
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}" if self.port == default else f"{self.scheme}://{self.hostport}"


@dataclass
class Manifest:
    digest: str
    media_type: str
    body: bytes

    @property
    def size(self) -> int:
        return len(self.body)

    def json(self) -> dict[str, Any]:
        return untrusted_json.loads(self.body)

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass
class Resolved:
    """A reference resolved to one platform's image manifest."""

    reference: Reference          # pinned to ``digest``
    digest: str                   # the image manifest's digest (what artifacts refer to)
    media_type: str
    size: int
    config_digest: str            # equals the image ID the Docker engine shows
    index_digest: str | None = None   # when the reference named a multi-platform index
    platform: platforms.Platform | None = None   # the index entry's; None for a plain manifest

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


class _Bounded(io.BytesIO):
    """A small document read into memory: refused once it grows past ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def write(self, data) -> int:  # type: ignore[override]
        if self.tell() + len(data) > self.limit:
            raise RegistryError(f"an image config over {self.limit} bytes; refusing to read it",
                                "an image config is a few KiB: this is not a container image")
        return super().write(data)


def _parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', rest)}
    return scheme.capitalize(), params


def _error_detail(body: bytes) -> tuple[str, list[str]]:
    """The registry's error codes and messages from its JSON error body, and the codes alone."""
    try:
        errors = untrusted_json.loads(body).get("errors") or []
        detail = "; ".join(f"{e.get('code', '?')}: {e.get('message', '')}" for e in errors)
        return detail, [str(e.get("code")) for e in errors]
    except (ValueError, AttributeError, TypeError):
        return body.decode("utf-8", "replace").strip()[:200], []


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


class _Reader:
    """A file object for an upload's body that reports bytes read (upload progress)."""

    def __init__(self, fh: IO[bytes], size: int, progress: Callable[[int], None] | None) -> None:
        self.fh, self.size, self.progress, self.done = fh, size, progress, 0

    def __len__(self) -> int:
        return self.size

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(n if n and n > 0 else CHUNK)
        self.done += len(data)
        if self.progress is not None and data:
            self.progress(self.done)
        return data


class RegistryClient:
    """One registry host; methods name the repository. Safe to reuse across calls.

    ``plain_http`` overrides :func:`insecure_reason` for the registry itself (True: plain HTTP,
    False: HTTPS). ``timeout`` is (connect, read) in seconds, or one number for both;
    ``document_deadline`` bounds the time one manifest, token or page may take to arrive;
    ``blob_window``/``blob_min_bytes`` the slowest a blob may arrive (:data:`BLOB_WINDOW`)."""

    def __init__(self, registry: str, *, user: str | None = None, plain_http: bool | None = None,
                 env: Mapping[str, str] | None = None,
                 timeout: float | tuple[float, float] = DEFAULT_TIMEOUT,
                 document_deadline: float = DOCUMENT_DEADLINE,
                 blob_window: float = BLOB_WINDOW, blob_min_bytes: int = BLOB_MIN_BYTES) -> None:
        self.registry = registry
        self.user = user
        self.env = os.environ if env is None else env
        if plain_http is None:
            self.insecure = insecure_reason(registry, self.env)
        else:
            self.insecure = "the caller asked for plain HTTP" if plain_http else None
        self.plain_http = self.insecure is not None
        self.base = f"{'http' if self.plain_http else 'https'}://{registry}"
        self.origin = Origin.of(self.base)
        self.timeout = (float(timeout), float(timeout)) if isinstance(timeout, (int, float)) \
            else (float(timeout[0]), float(timeout[1]))
        self.document_deadline = float(document_deadline)
        self.blob_window, self.blob_min_bytes = float(blob_window), int(blob_min_bytes)
        self.session = transport.Session()
        # Nothing reads ~/.netrc, which would send its entry for any host unasked, replacing the
        # Authorization header set here (F11). The proxies and the CA bundle are taken explicitly.
        # SSL_CERT_FILE/SSL_CERT_DIR: what Enroot's curl takes from enroot.conf (enroot_config).
        self.session.verify = (self.env.get("REQUESTS_CA_BUNDLE") or self.env.get("CURL_CA_BUNDLE")
                               or self.env.get("SSL_CERT_FILE") or self.env.get("SSL_CERT_DIR") or True)
        # Documents are read with a byte cap: ask for them uncompressed, so the cap is on what
        # the registry sent, not on what a small compressed body would expand to.
        self.session.headers["Accept-Encoding"] = "identity"
        self._auth: dict[str, str] = {}           # scope -> Authorization header, for self.origin only
        self._credential: creds.Credential | None = None     # the last one sent, for messages
        self._registry_credential_read = False
        self._registry_credential: creds.Credential | None = None
        self._realm_credentials: dict[str, creds.Credential | None] = {}

    @classmethod
    def for_reference(cls, ref: Reference, **kwargs: Any) -> RegistryClient:
        return cls(ref.registry, user=ref.user, **kwargs)

    # --- credentials ---------------------------------------------------------------------------

    def registry_credential(self) -> creds.Credential | None:
        """The credential for the registry itself: Enroot's entry for its host (the reference's
        USER@, else the first login for it), else Docker's config.json."""
        if not self._registry_credential_read:
            user = self.user or creds.enroot_user(self.registry, self.env)
            self._registry_credential = creds.lookup(self.registry, user, [self.registry], self.env)
            self._registry_credential_read = True
            if self._registry_credential is None and self.user:
                raise CredentialsError(
                    f"no password for user {self.user!r} at {self.registry}",
                    f"add it to {creds.describe_sources(self.env)}")
        return self._registry_credential

    def realm_credential(self, realm: Origin) -> creds.Credential | None:
        """The one credential the token server named by the registry's own challenge gets:
        Enroot's entry for the realm's host (as Enroot's curl --netrc-file sends it), else the
        registry's credential (as Docker's and containerd's clients send it: the registry chose
        this realm as its token service, e.g. registry-1.docker.io's auth.docker.io)."""
        if realm.host not in self._realm_credentials:
            host = f"[{realm.host}]" if ":" in realm.host else realm.host
            own = creds.from_enroot([host], self.user, self.env)
            self._realm_credentials[realm.host] = own or self.registry_credential()
        return self._realm_credentials[realm.host]

    @staticmethod
    def _basic(cred: creds.Credential) -> str:
        return "Basic " + base64.b64encode(f"{cred.user}:{cred.password}".encode()).decode()

    def _authenticate(self, challenge: str, scope: str, what: str) -> None:
        scheme, params = _parse_challenge(challenge)
        if scheme == "Basic":
            cred = self.registry_credential()
            if cred is None:
                raise CredentialsError(f"{self.registry} requires credentials for {what}",
                                       f"add them to {creds.describe_sources(self.env)}")
            self._credential = cred
            self._auth[scope] = self._basic(cred)
            return
        if scheme != "Bearer" or not params.get("realm"):
            raise RegistryError(f"{self.registry} asks for an authentication scheme imagekit does not "
                                f"speak ({scheme or 'none'})", "use a registry with Bearer or Basic auth")
        realm = params["realm"]
        realm_origin = Origin.of(realm)
        self._check_url(realm, f"its token server (realm) for {what}")
        cred = self.realm_credential(realm_origin)
        self._credential = cred
        query = {"service": params["service"]} if params.get("service") else {}
        query["scope"] = scope
        url = realm + ("&" if urlsplit(realm).query else "?") + urlencode(query)
        label = f"the token server {realm_origin} of {self.registry}"
        resp = self._exchange("GET", url, {}, None, (realm_origin, self._basic(cred)) if cred else None,
                              label, f"a token for {what}")
        if resp.status_code in (401, 403):
            self._discard(resp)
            raise self._rejected(cred, what)
        if resp.status_code != 200:
            detail, _ = _error_detail(self._read(resp, MAX_ERROR_BYTES, label, what, truncate=True))
            raise RegistryError(f"{label} answered {resp.status_code} to the token request for {what}"
                                + (f": {detail}" if detail else ""))
        body = self._read(resp, MAX_TOKEN_BYTES, label, f"the token for {what}")
        try:
            doc = untrusted_json.loads(body)
            token = doc.get("token") or doc.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not token or not isinstance(token, str):
            raise RegistryError(f"{label} returned no token for {what}")
        self._auth[scope] = f"Bearer {token}"

    def _rejected(self, cred: creds.Credential | None, what: str) -> CredentialsError:
        if cred is None:
            return CredentialsError(f"{self.registry} requires credentials for {what}",
                                    f"add them to {creds.describe_sources(self.env)}")
        return CredentialsError(f"{self.registry} rejected the credentials ({cred}) for {what}",
                                "check that entry's password; Enroot reads the same file")

    # --- transport -----------------------------------------------------------------------------

    def _check_url(self, url: str, why: str) -> None:
        """Refuse a URL that is not http(s), anything plain-HTTP from an HTTPS registry, and a
        plain-HTTP origin the user did not allow (loopback, ENROOT_ALLOW_HTTP, or named)."""
        target = Origin.of(url)
        if target.scheme not in ("http", "https") or not target.host or target.port < 0:
            raise RegistryError(f"{self.registry} sent imagekit to {url.split('?')[0]!r} for {why}, "
                                "which is not an http(s) URL", "the registry (or a proxy in front of it) "
                                "is misconfigured: report it to its administrator")
        if target.scheme == "https" or target == self.origin:
            return
        if not self.plain_http:
            raise RegistryError(f"{self.registry} is HTTPS but sent imagekit to {target} (plain HTTP) for "
                                f"{why}; nothing leaves an HTTPS registry over plain HTTP",
                                "the registry (or a proxy that rewrites its URLs) must name https:// "
                                "URLs: fix its external URL or its token realm")
        reason = insecure_reason(target.hostport, self.env)
        if reason is None:
            raise RegistryError(f"{self.registry} sent imagekit to {target} (plain HTTP) for {why}, "
                                "and plain HTTP is allowed only to loopback addresses and registries "
                                "the user names", f"if that host is meant to speak plain HTTP, add "
                                f"{target.hostport} to IMAGEKIT_INSECURE_REGISTRIES")

    def _proxies(self, url: str) -> dict[str, str]:
        """The environment's proxy for ``url`` by requests' and curl's rules (``<scheme>_proxy``,
        ``all_proxy``, ``no_proxy``; lower case first), read from this client's env."""
        def get(name: str) -> str | None:
            return self.env.get(name) or self.env.get(name.upper())

        scheme = urlsplit(url).scheme
        proxy = get(f"{scheme}_proxy") or get("all_proxy")
        if not proxy:
            return {}
        no_proxy = get("no_proxy")
        if no_proxy and transport.bypasses_proxy(url, no_proxy):
            return {}
        return {scheme: proxy}

    def _exchange(self, method: str, url: str, headers: dict[str, str], data: Any,
                  authorization: tuple[Origin, str] | None, label: str, what: str) -> Response:
        """One request, redirects followed here (a library's own would re-add credentials and
        follow any number): ``authorization`` goes only to its origin, every hop is checked
        by :meth:`_check_url`, and at most MAX_REDIRECTS are followed. Streams the response."""
        hops = 0
        while True:
            self._check_url(url, what)
            sent = dict(headers)
            if authorization is not None and Origin.of(url) == authorization[0]:
                sent["Authorization"] = authorization[1]
            try:
                resp = self.session.request(method, url, headers=sent, data=data, timeout=self.timeout,
                                            allow_redirects=False, stream=True, proxies=self._proxies(url))
            except transport.TLSFailure as exc:
                raise RegistryError(f"TLS failed talking to {label}: {_reason(exc)}",
                                    f"for a plain-HTTP registry set IMAGEKIT_INSECURE_REGISTRIES="
                                    f"{self.registry}, or ENROOT_ALLOW_HTTP yes in Enroot's enroot.conf "
                                    "(the Pyxis importer reads it too); for a private CA set "
                                    "REQUESTS_CA_BUNDLE or SSL_CERT_FILE") from None
            except transport.TransportTimeout as exc:
                raise RegistryError(f"{label} timed out ({_reason(exc)}) on {what}",
                                    f"is a registry answering at {Origin.of(url)}?") from None
            except OSError as exc:
                raise RegistryError(f"cannot reach {label}: {_reason(exc)}",
                                    f"is a registry listening at {Origin.of(url)}?"
                                    + (f" (plain HTTP: {self.insecure})" if self.plain_http else "")) from None
            location = resp.headers.get("Location")
            if resp.status_code not in REDIRECT_CODES or not location:
                return resp
            self._discard(resp)
            hops += 1
            if hops > MAX_REDIRECTS:
                raise RegistryError(f"{label} redirected more than {MAX_REDIRECTS} times on {what}",
                                    "the registry (or a proxy in front of it) redirects in a loop")
            # 301-303 turn a PUT into a GET (HTTP's rule); a body read from a file cannot be sent twice.
            if method not in ("GET", "HEAD") and (resp.status_code not in (307, 308)
                                                  or not isinstance(data, (bytes, type(None)))):
                raise RegistryError(f"{label} redirected the {method} of {what} ({resp.status_code})",
                                    "imagekit re-sends only in-memory bodies, on a 307 or 308")
            url = urljoin(url, location)

    def _read(self, resp: Response, limit: int, label: str, what: str, truncate: bool = False) -> bytes:
        """The body of ``resp``, at most ``limit`` bytes (more is a RegistryError naming the
        limit, or cut off with ``truncate``), arrived within the document deadline."""
        try:
            declared = int(resp.headers.get("Content-Length") or -1)
        except ValueError:
            declared = -1
        if declared > limit and not truncate:
            resp.close()
            raise self._too_large(limit, label, what, f"it announced {declared} bytes")
        raw = resp.raw
        # read1 returns what has arrived: the deadline is checked between reads.
        read = getattr(raw, "read1", None) or raw.read
        deadline = time.monotonic() + self.document_deadline
        body = bytearray()
        try:
            while True:
                chunk = read(min(64 << 10, limit + 1 - len(body)), decode_content=True)
                if not chunk:
                    break
                body += chunk
                if len(body) > limit:
                    if truncate:
                        del body[limit:]
                        break
                    raise self._too_large(limit, label, what, "it sent more")
                if time.monotonic() > deadline:
                    raise RegistryError(f"{what} from {label} did not arrive within "
                                        f"{self.document_deadline:g} s ({len(body)} bytes came)",
                                        "the registry is too slow or stalls: try again later")
        except OSError as exc:
            raise RegistryError(f"{label} broke off {what}: {_reason(exc)}",
                                "the registry stopped sending: try again") from None
        finally:
            resp.close()
        return bytes(body)

    def _discard(self, resp: Response) -> None:
        """Drop a response's body. A short one with a declared length is read (within the
        document deadline), so the connection goes back to the pool; any other is closed."""
        try:
            length = int(resp.headers.get("Content-Length") or -1)
        except ValueError:
            length = -1
        head = resp.request is not None and resp.request.method == "HEAD"
        if (head or length == 0) and resp.raw is not None:
            resp.raw.release_conn()     # nothing follows the headers: the connection is free
        elif 0 < length <= MAX_ERROR_BYTES:
            try:
                self._read(resp, MAX_ERROR_BYTES, self.registry, "a response body", truncate=True)
            except RegistryError:
                pass        # a body nobody wants: failing to read it only costs the connection
        resp.close()

    @staticmethod
    def _too_large(limit: int, label: str, what: str, how: str) -> RegistryError:
        return RegistryError(f"{label} sent more than {_size(limit)} for {what} ({how})",
                             f"manifests, indexes and referrers pages are at most {_size(limit)} (the "
                             "OCI distribution spec's size; registries store no larger ones): the "
                             "registry is broken or hostile" if limit == MAX_MANIFEST_BYTES else
                             "the registry is broken or hostile")

    def _request(self, method: str, url: str, *, repo: str, push: bool = False, what: str = "",
                 ok: Iterable[int] = (200,), headers: dict[str, str] | None = None,
                 replayable: bool = True, data: Any = None) -> Response:
        """Send one request (``url``: a path on the registry, or an absolute URL it gave) with the
        repository's authorization when it goes to the registry's origin; on a 401 from that
        origin, authenticate and send it again (``replayable`` is False for streamed bodies: those
        authenticate first). Returns the streamed response; callers read or close it."""
        scope = f"repository:{repo}:{'pull,push' if push else 'pull'}"
        what = what or f"{repo}"
        url = url if url.startswith(("http://", "https://")) else self.base + url
        for attempt in (1, 2):
            authorization = (self.origin, self._auth[scope]) if scope in self._auth else None
            resp = self._exchange(method, url, dict(headers or {}), data, authorization, self.registry, what)
            if resp.status_code == 401 and Origin.of(resp.url) != self.origin:
                # Another origin (a redirect, a Location) asking: the registry's credential is not its.
                self._discard(resp)
                raise RegistryError(f"{Origin.of(resp.url)}, where {self.registry} sent the request for "
                                    f"{what}, asks for credentials; imagekit sends the credentials for "
                                    f"{self.registry} only to {self.origin}",
                                    "the registry must hand out URLs that need no credentials (signed "
                                    "URLs), or URLs on its own origin")
            if resp.status_code == 401 and attempt == 1 and replayable:
                challenge = resp.headers.get("WWW-Authenticate")
                self._discard(resp)
                if not challenge:
                    raise self._rejected(self._credential, what)
                self._authenticate(challenge, scope, what)
                continue
            break
        if resp.status_code == 401:
            self._discard(resp)
            raise self._rejected(self._credential, what)
        if resp.status_code == 403:
            self._discard(resp)
            raise CredentialsError(f"{self.registry} denied {'push' if push else 'pull'} access to {what}"
                                   + (f" ({self._credential})" if self._credential else ""),
                                   "ask the registry's administrator for access, or use other credentials")
        if resp.status_code not in ok:
            detail, codes = _error_detail(self._read(resp, MAX_ERROR_BYTES, self.registry, what, truncate=True))
            if resp.status_code == 404:
                err: RegistryError = NotFound(f"{what} not found in {self.registry}"
                                              + (f" ({detail})" if detail else ""))
            else:
                err = RegistryError(f"{self.registry} answered {resp.status_code} to {method} {what}"
                                    + (f": {detail}" if detail else ""))
            err.status = resp.status_code      # type: ignore[attr-defined]
            err.codes = codes                  # type: ignore[attr-defined]
            raise err
        return resp

    def ensure_access(self, repo: str, push: bool = False) -> None:
        """Authenticate for ``repo`` up front (before a streamed upload that cannot be re-sent)."""
        self._discard(self._request("GET", f"/v2/{repo}/tags/list", repo=repo, push=push, ok=(200, 404),
                               what=f"{repo} (tags)"))

    # --- manifests ---------------------------------------------------------------------------

    def get_manifest(self, repo: str, reference: str, accept: str = ACCEPT_ALL) -> Manifest:
        """A manifest by tag or digest (at most MAX_MANIFEST_BYTES); by digest, its bytes are
        checked against it."""
        what = f"{repo}@{reference}" if ":" in reference else f"{repo}:{reference}"
        resp = self._request("GET", f"/v2/{repo}/manifests/{reference}", repo=repo,
                             headers={"Accept": accept}, what=what)
        content_type = resp.headers.get("Content-Type", "")
        body = self._read(resp, MAX_MANIFEST_BYTES, self.registry, what)
        digest = sha256_digest(body)
        if reference.startswith("sha256:") and digest != reference:
            raise IntegrityError(f"{self.registry}/{repo}@{reference}: the registry served a manifest "
                                 f"whose digest is {digest}", "the registry's storage is damaged; push again")
        media_type = content_type.split(";")[0].strip()
        try:
            media_type = untrusted_json.loads(body).get("mediaType") or media_type
        except (ValueError, AttributeError):
            raise RegistryError(f"{self.registry}/{what} is not a JSON manifest") from None
        return Manifest(digest=digest, media_type=media_type, body=body)

    def put_manifest(self, repo: str, reference: str, body: bytes,
                     media_type: str) -> tuple[str, Headers]:
        """PUT a manifest (by tag or by its digest); returns its digest and the response headers
        (case-insensitive: ``OCI-Subject`` tells whether the registry indexed a ``subject``)."""
        digest = sha256_digest(body)
        resp = self._request("PUT", f"/v2/{repo}/manifests/{reference}", repo=repo, push=True,
                             ok=(201,), headers={"Content-Type": media_type}, data=body,
                             what=f"manifest {media_type} for {repo}:{reference}")
        self._discard(resp)
        served = resp.headers.get("Docker-Content-Digest")
        if served and served != digest:
            raise IntegrityError(f"{self.registry} stored the manifest for {repo}:{reference} as {served}, "
                                 f"not {digest}")
        return digest, resp.headers

    def resolve(self, ref: Reference, platform: platforms.Platform | Mapping[str, str] | None = None) -> Resolved:
        """The image manifest ``ref`` names (for an index: the entry for ``platform``, default this
        node's, picked by :func:`imagekit.util.platforms.pick`) and its config digest."""
        want = platform if isinstance(platform, platforms.Platform) or platform is None \
            else platforms.Platform.of(platform)
        manifest = self.get_manifest(ref.repository, ref.reference)
        index_digest, chosen = None, None
        if manifest.media_type in INDEX_TYPES:
            index_digest = manifest.digest
            entries = manifest.json().get("manifests") or []
            entry = platforms.pick(entries if isinstance(entries, list) else [], want, str(ref),
                                   "push an image for it under this reference (imagekit push IMAGE "
                                   "--platform ... writes one index), or pick one of those with --platform OS/ARCH")
            chosen = platforms.Platform.of(entry.get("platform"))
            manifest = self.get_manifest(ref.repository, str(entry.get("digest", "")), ", ".join(MANIFEST_TYPES))
        if manifest.media_type not in MANIFEST_TYPES:
            raise RegistryError(f"{ref} is a {manifest.media_type or 'manifest of unknown type'}, not an image",
                                "give the reference of a container image")
        config = (manifest.json().get("config") or {}).get("digest")
        if not config:
            raise RegistryError(f"{ref}: the manifest has no config digest")
        return Resolved(reference=ref.with_digest(manifest.digest), digest=manifest.digest,
                        media_type=manifest.media_type, size=manifest.size, config_digest=config,
                        index_digest=index_digest, platform=chosen)

    def image_platform(self, resolved: Resolved) -> platforms.Platform:
        """The platform an image was built for: its index entry's, else its config's (one small
        blob read, at most MAX_MANIFEST_BYTES)."""
        if resolved.platform is not None:
            return resolved.platform
        buf = _Bounded(MAX_MANIFEST_BYTES)
        self.download_blob(resolved.reference.repository, resolved.config_digest, buf)
        try:
            doc = untrusted_json.loads(buf.getvalue())
        except ValueError:
            raise RegistryError(f"{resolved.reference}: the image config is not JSON") from None
        return platforms.Platform.of(doc if isinstance(doc, dict) else {})

    # --- blobs -------------------------------------------------------------------------------

    def blob_exists(self, repo: str, digest: str) -> bool:
        resp = self._request("HEAD", f"/v2/{repo}/blobs/{digest}", repo=repo, push=True, ok=(200, 404),
                             what=f"blob {digest} in {repo}")
        self._discard(resp)
        return resp.status_code == 200

    def upload_blob(self, repo: str, source: bytes | Path, digest: str, size: int,
                    progress: Callable[[int], None] | None = None) -> bool:
        """Upload unless the registry has it; True when bytes were sent. The registry checks the
        digest (a monolithic PUT with ``?digest=``) and keeps nothing under it otherwise. The
        ``Location`` it answers may be on another origin (a storage host): the PUT goes there
        without the registry's credential, as containerd does."""
        if self.blob_exists(repo, digest):
            return False
        resp = self._request("POST", f"/v2/{repo}/blobs/uploads/", repo=repo, push=True, ok=(202,),
                             what=f"an upload to {repo}")
        self._discard(resp)
        if not resp.headers.get("Location"):
            raise RegistryError(f"{self.registry} started an upload to {repo} without a Location",
                                "the registry is not speaking the distribution API")
        location = urljoin(resp.url, resp.headers["Location"])
        location += ("&" if urlsplit(location).query else "?") + urlencode({"digest": digest})
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        if isinstance(source, bytes):
            self._discard(self._request("PUT", location, repo=repo, push=True, ok=(201,), headers=headers,
                                   data=source, what=f"blob {digest}"))
        else:
            with open(source, "rb") as fh:
                self._discard(self._request("PUT", location, repo=repo, push=True, ok=(201,), headers=headers,
                                       data=_Reader(fh, size, progress), replayable=False,
                                       what=f"blob {digest} ({source})"))
        return True

    def download_blob(self, repo: str, digest: str, out: IO[bytes], size: int | None = None,
                      progress: Callable[[int], None] | None = None) -> int:
        """Stream a blob into ``out``, hashing as it goes; IntegrityError when the bytes do not
        match ``digest`` (or ``size``: the stream stops as soon as it runs past it). RegistryError
        when it stalls (the read timeout) or trickles (under ``blob_min_bytes`` per ``blob_window``
        s). The caller writes to a temporary file it drops on error."""
        what = f"blob {digest} in {repo}"
        resp = self._request("GET", f"/v2/{repo}/blobs/{digest}", repo=repo, what=what)
        h = hashlib.sha256()
        done = 0
        raw = resp.raw
        # read1 returns what has arrived, so the rate is checked while bytes trickle.
        read = getattr(raw, "read1", None) or raw.read
        window_start, window_done = time.monotonic(), 0

        def arrived() -> bytes:
            try:
                return read(CHUNK, decode_content=True)
            except OSError as exc:
                timed_out = "timed out" in str(exc).lower() or "timeout" in type(exc).__name__.lower()
                raise RegistryError(f"{self.registry} {'timed out' if timed_out else 'broke off'} sending "
                                    f"{what} after {done} bytes ({_reason(exc)})",
                                    "try again; nothing was kept") from None

        with resp:
            while chunk := arrived():
                if size is not None and done + len(chunk) > size:
                    raise IntegrityError(
                        f"{self.registry}/{repo}: blob {digest} runs past its {size} bytes; nothing was kept",
                        "the registry's copy is damaged or was replaced: push the artifact again")
                h.update(chunk)
                out.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done)
                now = time.monotonic()
                if now - window_start >= self.blob_window:
                    if done - window_done < self.blob_min_bytes:
                        raise RegistryError(
                            f"{self.registry} trickles {what}: {done - window_done} bytes in the last "
                            f"{now - window_start:.0f} s, under the {self.blob_min_bytes} bytes per "
                            f"{self.blob_window:g} s a download must keep up ({done} bytes came)",
                            "the registry is too slow or stalls: try again later; nothing was kept")
                    window_start, window_done = now, done
        got = "sha256:" + h.hexdigest()
        if got != digest or (size is not None and done != size):
            raise IntegrityError(f"{self.registry}/{repo}: blob {digest} arrived as {got} ({done} bytes"
                                 + (f", expected {size}" if size is not None else "") + "); nothing was kept",
                                 "the registry's copy is damaged or was replaced: push the artifact again")
        return done

    # --- referrers ---------------------------------------------------------------------------

    def referrers(self, repo: str, digest: str, artifact_type: str | None = None) -> tuple[list[dict], str]:
        """Descriptors of the manifests whose ``subject`` is ``digest``, and where they came from
        (``"api"`` or the fallback tag). A missing or non-index fallback tag means none.

        API pages are followed by ``Link: next`` on the registry's own origin only, at most
        MAX_REFERRER_PAGES of them and MAX_REFERRERS_BYTES in all; a page seen twice is a loop."""
        query = f"?{urlencode({'artifactType': artifact_type})}" if artifact_type else ""
        url = f"{self.base}/v2/{repo}/referrers/{digest}{query}"
        what = f"referrers of {repo}@{digest}"
        found: list[dict] = []
        seen: set[str] = set()
        total = 0
        while url:
            if url in seen:
                raise RegistryError(f"{self.registry}: the referrers API's Link: next loops back to a page "
                                    f"it already sent ({what})", "the registry's referrers API is broken")
            if len(seen) == MAX_REFERRER_PAGES:
                raise RegistryError(f"{self.registry} lists {what} on more than {MAX_REFERRER_PAGES} pages",
                                    "the registry's referrers API is broken, or the image has far too "
                                    "many referrers: remove old ones")
            seen.add(url)
            try:
                resp = self._request("GET", url, repo=repo, what=what, headers={"Accept": OCI_INDEX})
            except NotFound:
                if len(seen) > 1:
                    raise
                return self._referrers_tag(repo, digest, artifact_type)
            body = self._read(resp, MAX_MANIFEST_BYTES, self.registry, f"a page of {what}")
            total += len(body)
            if total > MAX_REFERRERS_BYTES:
                raise RegistryError(f"{self.registry} sent more than {_size(MAX_REFERRERS_BYTES)} of {what} "
                                    f"({len(seen)} pages)", "the registry's referrers API is broken, or the "
                                    "image has far too many referrers: remove old ones")
            try:
                page = untrusted_json.loads(body).get("manifests") or []
                if not isinstance(page, list):
                    raise TypeError
            except (ValueError, AttributeError, TypeError):
                raise RegistryError(f"{self.registry} answered the {what} with something that is not an "
                                    "image index") from None
            found += [d for d in page if isinstance(d, dict)]
            link = resp.links.get("next", {}).get("url")
            url = urljoin(resp.url, link) if link else ""
            if url:
                self._check_url(url, f"the next page of {what}")
            if url and Origin.of(url) != self.origin:
                raise RegistryError(f"{self.registry}'s referrers API sent Link: next to {Origin.of(url)}, "
                                    f"another origin than {self.origin} ({what}); imagekit follows pages "
                                    "only on the registry's own origin",
                                    "the registry (or a proxy that rewrites its links) is misconfigured")
        if artifact_type:
            found = [d for d in found if d.get("artifactType") == artifact_type]
        return found, "api"

    def _referrers_tag(self, repo: str, digest: str, artifact_type: str | None) -> tuple[list[dict], str]:
        tag = referrers_tag(digest)
        try:
            index = self.get_manifest(repo, tag, ACCEPT_ALL)
        except NotFound:
            return [], tag
        doc = index.json() if index.media_type == OCI_INDEX else {}
        found = [d for d in (doc.get("manifests") or []) if isinstance(d, dict)]
        if artifact_type:
            found = [d for d in found if d.get("artifactType") == artifact_type]
        return found, tag


def _reason(exc: BaseException) -> str:
    """The innermost reason of a connection error, whole (``[SSL: WRONG_VERSION_NUMBER] wrong
    version number (_ssl.c:992)``, ``[Errno 111] Connection refused``), without the URLs around it
    that could carry a query. A library may quote the reason, so it ends at the first quote."""
    text = str(exc)
    for pattern in (r"\[Errno [^\]]+\] [^'\"]+", r"\[SSL(: [A-Z0-9_]+)?\] [^'\"]*", r"Read timed out",
                    r"[Cc]onnect(ion)? timed out", r"timed out"):
        m = re.search(pattern, text)
        if m:
            reason = m.group(0).rstrip(" :")
            while reason.endswith(")") and reason.count(")") > reason.count("("):
                reason = reason[:-1]
            return reason
    return type(exc).__name__


def digest_file(path: Path) -> tuple[str, int]:
    """(``sha256:HEX``, size) of a file, as a blob's digest is written."""
    hexdigest, size = digests.sha256_and_size(path)
    return "sha256:" + hexdigest, size
