"""A real local registry for tests: Debian's docker-registry (CNCF distribution) on 127.0.0.1.

Used by the tests' ``registry`` fixture and by bench/. It has no referrers API, which is the case
imagekit's artifact push must fall back from; :func:`referrers_api` puts the spec's API in front
of it, and :func:`media_type_gate` a registry that refuses a media type.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator



class RegistryNotRunning(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def engine_refs(addr: str) -> list[str]:
    """The Docker engine's tags and digest references (``ADDR/REPO:TAG``, ``ADDR/REPO@sha256:…``)
    under the registry ``addr``; [] where no engine answers."""
    from imagekit.engines import docker as engine

    if not engine.available():
        return []
    refs = []
    for image in engine.client().api.images():
        refs += [r for r in (image.get("RepoTags") or []) + (image.get("RepoDigests") or [])
                 if r.startswith(f"{addr}/")]
    return refs


def remove_engine_refs(addr: str) -> list[str]:
    """Untag every engine reference under ``addr`` (images with other names keep them); returns
    those that stay (in use by a container)."""
    from imagekit.engines import docker as engine

    for ref in engine_refs(addr):
        with contextlib.suppress(Exception):
            engine.client().api.remove_image(ref)
    return engine_refs(addr)


@contextlib.contextmanager
def running_registry(root: Path, extra_config: str = "", host: str = "127.0.0.1",
                     listen: str | None = None) -> Iterator[str]:
    """Serve a registry whose storage is under ``root``; yields ``HOST:PORT`` (``127.0.0.1:PORT``).

    ``extra_config`` is appended to the YAML configuration (for example an ``auth:`` section).
    ``host``: another address to listen on (a non-loopback one, where no client speaks plain HTTP
    unasked); registries on one ``root`` serve the same images. ``listen`` (default: ``host``):
    ``0.0.0.0`` for the multi-node cluster, whose nodes reach it at the head's address while the
    Docker engine pushes to it at 127.0.0.1, which it treats as local.
    Afterwards the Docker engine's tags under ``127.0.0.1:PORT`` (a push tags the image so, a pull
    by digest adds a digest reference) are removed: the registry is gone, and the next registry
    on that port would not have them.
    """
    binary = shutil.which("docker-registry")
    if binary is None:
        raise RegistryNotRunning("docker-registry is not installed (apt-get install docker-registry)")
    root.mkdir(parents=True, exist_ok=True)
    listen = listen or host
    port = free_port(listen)
    config = root / ("config.yml" if listen == "127.0.0.1" else f"config-{listen}-{port}.yml")
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {root / 'data'}\n  delete:\n    enabled: true\n"
                      f"http:\n  addr: {listen}:{port}\n{extra_config}")
    # Its log goes to a file: a pipe nobody reads fills after a few hundred lines (each plain-HTTP
    # push or pull logs a TLS handshake error) and then the registry blocks mid-request.
    log_path = root / f"registry-{listen}-{port}.log"
    log_file = open(log_path, "wb")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=log_file)
    addr = f"{host}:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://{addr}/v2/", timeout=1)
                break
            except urllib.error.HTTPError:
                break  # 401 from an auth-enabled registry: it is up
            except OSError:
                if proc.poll() is not None:
                    raise RegistryNotRunning("docker-registry exited: "
                                             + log_path.read_bytes().decode(errors="replace")[-500:])
                time.sleep(0.1)
        yield addr
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log_file.close()
        remove_engine_refs(addr)


# --- helpers for the artifact, pull and importer tests -----------------------------------------

def htpasswd_line(user: str, password: str) -> str:
    """A bcrypt htpasswd entry (the only hash docker-registry accepts): ``htpasswd -B`` when
    apache2-utils is installed, else the bcrypt package (the test extra), else crypt(3)."""
    tool = shutil.which("htpasswd")
    if tool:
        out = subprocess.run([tool, "-nbB", user, password], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    try:
        import bcrypt

        return f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt()).decode()}"
    except ImportError:
        import crypt  # Python < 3.13; glibc/libxcrypt make $2b$ hashes

        return f"{user}:{crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))}"


def htpasswd_config(root: Path, users: dict[str, str]) -> str:
    """The ``auth:`` section for a registry that takes HTTP Basic auth for ``users``."""
    path = root / "htpasswd"
    root.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(htpasswd_line(u, p) + "\n" for u, p in users.items()))
    return f"auth:\n  htpasswd:\n    realm: imagekit-test\n    path: {path}\n"


def _b64url(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@contextlib.contextmanager
def token_server(root: Path, users: dict[str, str], service: str = "imagekit-test-registry"):
    """A Bearer token server as docker-registry's ``auth: token`` expects (RS256 JWTs whose x5c
    certificate the registry trusts), granting ``users`` pull and push. Tokens are signed with
    the openssl command. Yields ``(auth_config, issued)``; ``issued`` lists (user, scope)."""
    import base64
    import http.server
    import json
    import threading
    import uuid

    root.mkdir(parents=True, exist_ok=True)
    key, cert = root / "token.key", root / "token.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=imagekit-test-token"],
                   check=True, capture_output=True)
    der = subprocess.run(["openssl", "x509", "-in", str(cert), "-outform", "DER"], check=True,
                         capture_output=True).stdout
    issued: list[tuple[str, str]] = []

    def sign(claims: dict) -> str:
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(key)], input=signing_input.encode(),
                             check=True, capture_output=True).stdout
        return f"{signing_input}.{_b64url(sig)}"

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):  # noqa: N802 - http.server's naming
            from urllib.parse import parse_qs, urlsplit

            query = parse_qs(urlsplit(self.path).query)
            user = None
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Basic "):
                u, _, p = base64.b64decode(auth[6:]).decode().partition(":")
                if users.get(u) != p:
                    self.send_response(401)
                    self.end_headers()
                    return
                user = u
            access = []
            for scope in query.get("scope", []):
                kind, name, actions = scope.split(":")
                if user is not None:  # anonymous users get a token that grants nothing
                    access.append({"type": kind, "name": name, "actions": actions.split(",")})
                issued.append((user or "", scope))
            now = int(time.time())
            token = sign({"iss": "imagekit-test-issuer", "sub": user or "", "aud": service,
                          "exp": now + 600, "nbf": now - 10, "iat": now, "jti": uuid.uuid4().hex,
                          "access": access})
            body = json.dumps({"token": token}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    realm = f"http://127.0.0.1:{server.server_address[1]}/token"
    config = (f"auth:\n  token:\n    realm: {realm}\n    service: {service}\n"
              f"    issuer: imagekit-test-issuer\n    rootcertbundle: {cert}\n")
    try:
        yield config, issued
    finally:
        server.shutdown()
        server.server_close()


Reply = tuple[int, dict[str, str], bytes]


@contextlib.contextmanager
def _forwarding_proxy(upstream: str, answer=None, extra_headers=None) -> Iterator[str]:
    """An HTTP proxy to the real registry ``upstream`` on 127.0.0.1: ``answer(method, path, body)``
    may reply itself (a Reply) instead of forwarding; ``extra_headers(method, path, body, status)``
    adds headers to a forwarded reply. Yields the proxy's ``127.0.0.1:PORT``."""
    import http.client
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _reply(self, status: int, headers: dict[str, str], data: bytes) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _forward(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            mine = answer(self.command, self.path, body) if answer else None
            if mine is not None:
                self._reply(*mine)
                return
            conn = http.client.HTTPConnection(upstream, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            out = {k: v for k, v in resp.getheaders()
                   if k.lower() not in ("transfer-encoding", "connection", "content-length")}
            if extra_headers:
                out.update(extra_headers(self.command, self.path, body, resp.status))
            conn.close()
            self._reply(resp.status, out, data)

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _forward

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def media_type_gate(upstream: str, allowed: set[str]) -> Iterator[str]:
    """A proxy to the real registry ``upstream`` that refuses manifests whose artifactType (else
    config mediaType) is not in ``allowed``, with the spec's answer to a manifest it will not
    store: 400 and ``MANIFEST_INVALID``.

    Protocol-level stand-in: Debian's docker-registry accepts every media type, and no registry
    that filters them (Quay's ALLOWED_OCI_ARTIFACT_TYPES, Harbor, older ECR) can run here.
    Everything else reaches the real registry unchanged."""
    import json

    def answer(method: str, path: str, body: bytes | None) -> Reply | None:
        if method == "PUT" and "/manifests/" in path and body:
            doc = json.loads(body)
            kind = doc.get("artifactType") or (doc.get("config") or {}).get("mediaType")
            if kind is not None and kind not in allowed:
                error = {"errors": [{"code": "MANIFEST_INVALID", "message": "manifest invalid",
                                     "detail": f"artifact type {kind} is not allowed"}]}
                return 400, {"Content-Type": "application/json"}, json.dumps(error).encode()
        return None

    with _forwarding_proxy(upstream, answer=answer) as addr:
        yield addr


@contextlib.contextmanager
def referrers_api(upstream: str) -> Iterator[tuple[str, dict]]:
    """A proxy that gives the real registry ``upstream`` the OCI distribution spec 1.1 referrers
    API, as the spec words it ("Pushing Manifests with Subject", "Listing Referrers"):

    - a manifest PUT with a ``subject`` that the registry stores (201) is answered with the
      ``OCI-Subject: <subject digest>`` header, and its descriptor (mediaType, digest, size,
      artifactType = its artifactType else its config's mediaType, annotations) is listed;
    - ``GET /v2/<name>/referrers/<digest>`` answers 200 with an OCI image index of those
      descriptors (an empty one for a digest with none), filtered by ``?artifactType=`` with
      ``OCI-Filters-Applied: artifactType``.

    Protocol-level stand-in: Debian's docker-registry (distribution 2.8) has no referrers API and
    no registry that has one (distribution 3, zot, Harbor) can run here. Storage, tags and blobs
    are the real registry's. Yields the proxy's address and the listed descriptors, keyed by
    (repository, subject digest), so a test can see what the API holds."""
    import hashlib
    import json
    import re
    import threading
    from urllib.parse import parse_qs

    listed: dict[tuple[str, str], list[dict]] = {}
    lock = threading.Lock()
    index_type = "application/vnd.oci.image.index.v1+json"

    def answer(method: str, path: str, body: bytes | None) -> Reply | None:
        m = re.fullmatch(r"/v2/(.+)/referrers/(sha256:[0-9a-f]{64})(?:\?(.*))?", path)
        if method != "GET" or not m:
            return None
        wanted = parse_qs(m.group(3) or "").get("artifactType", [None])[0]
        with lock:
            found = list(listed.get((m.group(1), m.group(2)), []))
        headers = {"Content-Type": index_type}
        if wanted:
            found = [d for d in found if d.get("artifactType") == wanted]
            headers["OCI-Filters-Applied"] = "artifactType"
        index = {"schemaVersion": 2, "mediaType": index_type, "manifests": found}
        return 200, headers, json.dumps(index).encode()

    def extra_headers(method: str, path: str, body: bytes | None, status: int) -> dict[str, str]:
        m = re.fullmatch(r"/v2/(.+)/manifests/[^/]+", path)
        if method != "PUT" or not m or status != 201 or not body:
            return {}
        doc = json.loads(body)
        subject = (doc.get("subject") or {}).get("digest")
        if not subject:
            return {}
        descriptor = {"mediaType": doc.get("mediaType"), "size": len(body),
                      "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
                      "artifactType": doc.get("artifactType") or (doc.get("config") or {}).get("mediaType")}
        if doc.get("annotations"):
            descriptor["annotations"] = doc["annotations"]
        with lock:
            entries = listed.setdefault((m.group(1), subject), [])
            if descriptor["digest"] not in [d["digest"] for d in entries]:
                entries.append(descriptor)
        return {"OCI-Subject": subject}

    with _forwarding_proxy(upstream, answer=answer, extra_headers=extra_headers) as addr:
        yield addr, listed


def push_test_image(client, repo: str, tag: str, *, payload: bytes = b"hello\n",
                    architectures: tuple[str, ...] = ()) -> dict:
    """Push a tiny OCI image (one layer holding ``payload``) with imagekit's registry client, no
    engine needed. With ``architectures``, one image per architecture under an OCI index tagged
    ``tag``. Returns {"digest", "config", "index"} of the host architecture's image (or the one)."""
    import io
    import json
    import tarfile

    from imagekit.registry import OCI_INDEX, OCI_MANIFEST, sha256_digest
    from imagekit.registry.client import host_platform

    def one(arch: str) -> tuple[str, str, int]:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("payload.txt")
            data = payload + arch.encode()
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        layer = buf.getvalue()
        config = json.dumps({"architecture": arch, "os": "linux", "config": {"Cmd": ["/bin/sh"]},
                             "rootfs": {"type": "layers", "diff_ids": [sha256_digest(layer)]}}).encode()
        client.upload_blob(repo, layer, sha256_digest(layer), len(layer))
        client.upload_blob(repo, config, sha256_digest(config), len(config))
        manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                               "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                          "digest": sha256_digest(config), "size": len(config)},
                               "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                           "digest": sha256_digest(layer), "size": len(layer)}]}).encode()
        digest, _ = client.put_manifest(repo, sha256_digest(manifest) if architectures else tag,
                                        manifest, OCI_MANIFEST)
        return digest, sha256_digest(config), len(manifest)

    if not architectures:
        digest, config, _ = one(host_platform()["architecture"])
        return {"digest": digest, "config": config, "index": None}
    entries, mine = [], None
    for arch in architectures:
        digest, config, size = one(arch)
        entries.append({"mediaType": OCI_MANIFEST, "digest": digest, "size": size,
                        "platform": {"architecture": arch, "os": "linux"}})
        if arch == host_platform()["architecture"]:
            mine = {"digest": digest, "config": config}
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).encode()
    index_digest, _ = client.put_manifest(repo, tag, index, OCI_INDEX)
    return {**(mine or {"digest": None, "config": None}), "index": index_digest}


def blob_path(root: Path, digest: str) -> Path:
    """Where docker-registry's filesystem driver keeps a blob under ``running_registry(root)``."""
    hexa = digest.split(":", 1)[1]
    return root / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexa[:2] / hexa / "data"
