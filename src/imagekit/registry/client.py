"""A small client for the OCI distribution API (v2) over HTTP(S).

It does what imagekit's artifacts and the Pyxis importer need, and nothing more:
resolve a reference to its manifest digest (an index resolves to this platform's
manifest), read and write manifests, upload and stream blobs with their digests
verified, and list referrers (the 1.1 API, else the referrers tag schema).

Authentication follows the registry's ``WWW-Authenticate`` challenge: ``Bearer``
(a token from the realm, with credentials when there are any) or ``Basic``.
Credentials come from :mod:`imagekit.registry.credentials` and are never logged.

Transport: HTTPS, except for loopback registries (``127.0.0.1``, ``localhost``,
``::1``, which the Docker engine also treats as insecure), when
``ENROOT_ALLOW_HTTP`` is set like Enroot's, or for the registries listed in
``IMAGEKIT_INSECURE_REGISTRIES`` (comma-separated ``host:port``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform as _platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterable
from urllib.parse import urlencode, urljoin, urlsplit

from imagekit.errors import CredentialsError, IntegrityError, RegistryError
from imagekit.registry import credentials as creds
from imagekit.registry.reference import Reference

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
ACCEPT_ALL = ", ".join(INDEX_TYPES + MANIFEST_TYPES)

ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
        "ppc64le": "ppc64le", "s390x": "s390x"}
CHUNK = 1 << 20
FALSE_WORDS = {"", "0", "n", "no", "false", "off", "N", "NO", "No", "F", "FALSE", "False", "f"}


class NotFound(RegistryError):
    """The registry answered 404 for a manifest, blob or tag."""


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def referrers_tag(digest: str) -> str:
    """The referrers tag schema: ``<alg[:32]>-<encoded[:64]>``, other characters as ``-``."""
    algorithm, _, encoded = digest.partition(":")
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", f"{algorithm[:32]}-{encoded[:64]}")


def host_platform() -> dict[str, str]:
    machine = _platform.machine()
    return {"os": "linux", "architecture": ARCH.get(machine, machine)}


def plain_http_default(registry: str, env: dict[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    host = registry.rsplit(":", 1)[0] if not registry.startswith("[") else registry.split("]")[0] + "]"
    if host in ("localhost", "[::1]") or host.startswith("127."):
        return True
    if env.get("ENROOT_ALLOW_HTTP", "") not in FALSE_WORDS:
        return True
    insecure = {r.strip() for r in env.get("IMAGEKIT_INSECURE_REGISTRIES", "").split(",") if r.strip()}
    return registry in insecure


@dataclass
class Manifest:
    digest: str
    media_type: str
    body: bytes

    @property
    def size(self) -> int:
        return len(self.body)

    def json(self) -> dict[str, Any]:
        return json.loads(self.body)

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

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


def _parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', rest)}
    return scheme.capitalize(), params


def _errors(resp) -> str:
    """The registry's error codes and messages from its JSON error body."""
    try:
        doc = resp.json()
        return "; ".join(f"{e.get('code', '?')}: {e.get('message', '')}" for e in doc.get("errors", []))
    except ValueError:
        return (resp.text or "").strip()[:200]


def _codes(resp) -> list[str]:
    try:
        return [str(e.get("code")) for e in resp.json().get("errors", [])]
    except (ValueError, AttributeError):
        return []


class _Reader:
    """A file object for requests that reports bytes read (upload progress)."""

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
    """One registry host; methods name the repository. Safe to reuse across calls."""

    def __init__(self, registry: str, *, user: str | None = None, plain_http: bool | None = None,
                 env: dict[str, str] | None = None, timeout: float = 60.0) -> None:
        import requests

        self.registry = registry
        self.user = user
        self.env = os.environ if env is None else env
        self.plain_http = plain_http_default(registry, self.env) if plain_http is None else plain_http
        self.base = f"{'http' if self.plain_http else 'https'}://{registry}"
        self.timeout = timeout
        self.session = requests.Session()
        self._auth: dict[str, str] = {}           # scope -> Authorization header value
        self._credential: creds.Credential | None = None
        self._credential_looked_up = False

    @classmethod
    def for_reference(cls, ref: Reference, **kwargs) -> "RegistryClient":
        return cls(ref.registry, user=ref.user, **kwargs)

    # --- authentication ----------------------------------------------------------------------

    def _lookup_credential(self, hosts: list[str]) -> creds.Credential | None:
        if not self._credential_looked_up:
            user = self.user or creds.enroot_user(self.registry, self.env)
            self._credential = creds.lookup(self.registry, user, hosts, self.env)
            self._credential_looked_up = True
            if self._credential is None and self.user:
                raise CredentialsError(
                    f"no password for user {self.user!r} at {self.registry}",
                    f"add it to {creds.describe_sources(self.env)}")
        return self._credential

    def _authenticate(self, challenge: str, scope: str, what: str) -> None:
        scheme, params = _parse_challenge(challenge)
        if scheme == "Basic":
            cred = self._lookup_credential([self.registry])
            if cred is None:
                raise CredentialsError(f"{self.registry} requires credentials for {what}",
                                       f"add them to {creds.describe_sources(self.env)}")
            token = base64.b64encode(f"{cred.user}:{cred.password}".encode()).decode()
            self._auth[scope] = f"Basic {token}"
            return
        if scheme != "Bearer" or not params.get("realm"):
            raise RegistryError(f"{self.registry} asks for an authentication scheme imagekit does not "
                                f"speak ({scheme or 'none'})", "use a registry with Bearer or Basic auth")
        realm = params["realm"]
        cred = self._lookup_credential([urlsplit(realm).hostname or self.registry, self.registry])
        query = {"service": params.get("service", "")} if params.get("service") else {}
        query["scope"] = scope
        auth = (cred.user, cred.password) if cred else None
        try:
            resp = self.session.get(realm, params=query, auth=auth, timeout=self.timeout)
        except OSError as exc:
            raise RegistryError(f"cannot reach the token server of {self.registry}: {_reason(exc)}") from None
        if resp.status_code in (401, 403):
            raise self._rejected(cred, what)
        if resp.status_code != 200:
            raise RegistryError(f"the token server of {self.registry} answered {resp.status_code}: "
                                f"{_errors(resp)}")
        try:
            doc = resp.json()
            token = doc.get("token") or doc.get("access_token")
        except ValueError:
            token = None
        if not token:
            raise RegistryError(f"the token server of {self.registry} returned no token")
        self._auth[scope] = f"Bearer {token}"

    def _rejected(self, cred: creds.Credential | None, what: str) -> CredentialsError:
        if cred is None:
            return CredentialsError(f"{self.registry} requires credentials for {what}",
                                    f"add them to {creds.describe_sources(self.env)}")
        return CredentialsError(f"{self.registry} rejected the credentials ({cred}) for {what}",
                                f"check that entry's password; Enroot reads the same file")

    # --- requests ----------------------------------------------------------------------------

    def _request(self, method: str, url: str, *, repo: str, push: bool = False, what: str = "",
                 ok: Iterable[int] = (200,), headers: dict[str, str] | None = None,
                 replayable: bool = True, **kwargs):
        """Send one request with the repository's authorization; on a 401, authenticate and
        send it again (``replayable`` is False for streamed bodies: those authenticate first)."""
        import requests

        scope = f"repository:{repo}:{'pull,push' if push else 'pull'}"
        what = what or f"{repo}"
        url = url if url.startswith("http") else self.base + url
        for attempt in (1, 2):
            hdrs = dict(headers or {})
            if scope in self._auth:
                hdrs["Authorization"] = self._auth[scope]
            try:
                resp = self.session.request(method, url, headers=hdrs, timeout=self.timeout, **kwargs)
            except requests.exceptions.SSLError as exc:
                raise RegistryError(f"TLS failed talking to {self.registry}: {_reason(exc)}",
                                    f"for a plain-HTTP registry set IMAGEKIT_INSECURE_REGISTRIES="
                                    f"{self.registry} (or ENROOT_ALLOW_HTTP=yes, as for Enroot)") from None
            except (requests.exceptions.RequestException, OSError) as exc:
                raise RegistryError(f"cannot reach {self.registry}: {_reason(exc)}",
                                    f"is a registry listening at {self.base}?") from None
            if resp.status_code == 401 and attempt == 1 and replayable:
                challenge = resp.headers.get("WWW-Authenticate")
                if not challenge:
                    raise self._rejected(self._credential, what)
                resp.close()
                self._authenticate(challenge, scope, what)
                continue
            break
        if resp.status_code == 401:
            raise self._rejected(self._credential, what)
        if resp.status_code == 403:
            raise CredentialsError(f"{self.registry} denied {'push' if push else 'pull'} access to {what}"
                                   + (f" ({self._credential})" if self._credential else ""),
                                   "ask the registry's administrator for access, or use other credentials")
        if resp.status_code not in ok:
            detail = _errors(resp)
            if resp.status_code == 404:
                err: RegistryError = NotFound(f"{what} not found in {self.registry}"
                                              + (f" ({detail})" if detail else ""))
            else:
                err = RegistryError(f"{self.registry} answered {resp.status_code} to {method} {what}"
                                    + (f": {detail}" if detail else ""))
            err.status = resp.status_code      # type: ignore[attr-defined]
            err.codes = _codes(resp)           # type: ignore[attr-defined]
            raise err
        return resp

    def ensure_access(self, repo: str, push: bool = False) -> None:
        """Authenticate for ``repo`` up front (before a streamed upload that cannot be re-sent)."""
        self._request("GET", f"/v2/{repo}/tags/list", repo=repo, push=push, ok=(200, 404),
                      what=f"{repo} (tags)")

    # --- manifests ---------------------------------------------------------------------------

    def get_manifest(self, repo: str, reference: str, accept: str = ACCEPT_ALL) -> Manifest:
        """A manifest by tag or digest; by digest, its bytes are checked against it."""
        resp = self._request("GET", f"/v2/{repo}/manifests/{reference}", repo=repo,
                             headers={"Accept": accept}, what=f"{repo}:{reference}" if ":" not in
                             reference else f"{repo}@{reference}")
        body = resp.content
        digest = sha256_digest(body)
        if reference.startswith("sha256:") and digest != reference:
            raise IntegrityError(f"{self.registry}/{repo}@{reference}: the registry served a manifest "
                                 f"whose digest is {digest}", "the registry's storage is damaged; push again")
        media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        try:
            media_type = json.loads(body).get("mediaType") or media_type
        except (ValueError, AttributeError):
            raise RegistryError(f"{self.registry}/{repo}:{reference} is not a JSON manifest") from None
        return Manifest(digest=digest, media_type=media_type, body=body)

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str):
        """PUT a manifest (by tag or by its digest); returns its digest and the response headers
        (case-insensitive: ``OCI-Subject`` tells whether the registry indexed a ``subject``)."""
        digest = sha256_digest(body)
        resp = self._request("PUT", f"/v2/{repo}/manifests/{reference}", repo=repo, push=True,
                             ok=(201,), headers={"Content-Type": media_type}, data=body,
                             what=f"manifest {media_type} for {repo}:{reference}")
        served = resp.headers.get("Docker-Content-Digest")
        if served and served != digest:
            raise IntegrityError(f"{self.registry} stored the manifest for {repo}:{reference} as {served}, "
                                 f"not {digest}")
        return digest, resp.headers

    def resolve(self, ref: Reference, platform: dict[str, str] | None = None) -> Resolved:
        """The image manifest ``ref`` names (for an index: this platform's entry) and its config digest."""
        want = platform or host_platform()
        manifest = self.get_manifest(ref.repository, ref.reference)
        index_digest = None
        if manifest.media_type in INDEX_TYPES:
            index_digest = manifest.digest
            entries = [m for m in manifest.json().get("manifests", [])
                       if (m.get("platform") or {}).get("architecture") == want["architecture"]
                       and (m.get("platform") or {}).get("os", "linux") == want.get("os", "linux")]
            if not entries:
                have = sorted({(m.get("platform") or {}).get("architecture", "?")
                               for m in manifest.json().get("manifests", [])})
                raise RegistryError(f"{ref} has no {want['architecture']} image (it has: {', '.join(have)})",
                                    "build and push the image for this architecture")
            manifest = self.get_manifest(ref.repository, entries[0]["digest"], ", ".join(MANIFEST_TYPES))
        if manifest.media_type not in MANIFEST_TYPES:
            raise RegistryError(f"{ref} is a {manifest.media_type or 'manifest of unknown type'}, not an image",
                                "give the reference of a container image")
        config = (manifest.json().get("config") or {}).get("digest")
        if not config:
            raise RegistryError(f"{ref}: the manifest has no config digest")
        return Resolved(reference=ref.with_digest(manifest.digest), digest=manifest.digest,
                        media_type=manifest.media_type, size=manifest.size, config_digest=config,
                        index_digest=index_digest)

    # --- blobs -------------------------------------------------------------------------------

    def blob_exists(self, repo: str, digest: str) -> bool:
        resp = self._request("HEAD", f"/v2/{repo}/blobs/{digest}", repo=repo, push=True, ok=(200, 404),
                             what=f"blob {digest} in {repo}")
        return resp.status_code == 200

    def upload_blob(self, repo: str, source: bytes | Path, digest: str, size: int,
                    progress: Callable[[int], None] | None = None) -> bool:
        """Upload unless the registry has it; True when bytes were sent. The registry checks the
        digest (a monolithic PUT with ``?digest=``) and keeps nothing under it otherwise."""
        if self.blob_exists(repo, digest):
            return False
        resp = self._request("POST", f"/v2/{repo}/blobs/uploads/", repo=repo, push=True, ok=(202,),
                             what=f"an upload to {repo}")
        location = urljoin(self.base + "/", resp.headers["Location"])
        location += ("&" if "?" in location else "?") + urlencode({"digest": digest})
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        if isinstance(source, bytes):
            self._request("PUT", location, repo=repo, push=True, ok=(201,), headers=headers, data=source,
                          what=f"blob {digest}")
        else:
            with open(source, "rb") as fh:
                self._request("PUT", location, repo=repo, push=True, ok=(201,), headers=headers,
                              data=_Reader(fh, size, progress), replayable=False,
                              what=f"blob {digest} ({source})")
        return True

    def download_blob(self, repo: str, digest: str, out: IO[bytes], size: int | None = None,
                      progress: Callable[[int], None] | None = None) -> int:
        """Stream a blob into ``out``, hashing as it goes; IntegrityError when the bytes do not
        match ``digest`` (or ``size``). The caller writes to a temporary file it drops on error."""
        resp = self._request("GET", f"/v2/{repo}/blobs/{digest}", repo=repo, stream=True,
                             what=f"blob {digest} in {repo}")
        h = hashlib.sha256()
        done = 0
        with resp:
            for chunk in resp.iter_content(CHUNK):
                h.update(chunk)
                out.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done)
        got = "sha256:" + h.hexdigest()
        if got != digest or (size is not None and done != size):
            raise IntegrityError(f"{self.registry}/{repo}: blob {digest} arrived as {got} ({done} bytes"
                                 + (f", expected {size}" if size is not None else "") + "); nothing was kept",
                                 "the registry's copy is damaged or was replaced: push the artifact again")
        return done

    # --- referrers ---------------------------------------------------------------------------

    def referrers(self, repo: str, digest: str, artifact_type: str | None = None) -> tuple[list[dict], str]:
        """Descriptors of the manifests whose ``subject`` is ``digest``, and where they came from
        (``"api"`` or the fallback tag). A missing or non-index fallback tag means none."""
        query = f"?{urlencode({'artifactType': artifact_type})}" if artifact_type else ""
        url = f"/v2/{repo}/referrers/{digest}{query}"
        found: list[dict] = []
        try:
            while url:
                resp = self._request("GET", url, repo=repo, what=f"referrers of {repo}@{digest}",
                                     headers={"Accept": OCI_INDEX})
                found += resp.json().get("manifests") or []
                link = resp.links.get("next", {}).get("url")
                url = urljoin(resp.url, link) if link else ""
            source = "api"
        except NotFound:
            tag = referrers_tag(digest)
            try:
                index = self.get_manifest(repo, tag, ACCEPT_ALL)
            except NotFound:
                return [], tag
            doc = index.json() if index.media_type == OCI_INDEX else {}
            found, source = list(doc.get("manifests") or []), tag
        if artifact_type:
            found = [d for d in found if d.get("artifactType") == artifact_type]
        return found, source


def _reason(exc: BaseException) -> str:
    """The innermost reason of a connection error, without URLs that could carry a query."""
    text = str(exc)
    for pattern in (r"\[Errno [^\]]+\] [^'\")]+", r"SSL: [A-Z_]+\][^'\")]*", r"Read timed out"):
        m = re.search(pattern, text)
        if m:
            return m.group(0).strip()
    return type(exc).__name__


def digest_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(4 * CHUNK):
            h.update(chunk)
            size += len(chunk)
    return "sha256:" + h.hexdigest(), size
