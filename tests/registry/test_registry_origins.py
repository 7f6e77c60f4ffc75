"""Credentials stay with the origin that asked for them (issue 22: F8, F11, F21).

Every test runs real HTTP servers and asserts what each one received. The registry is the real
docker-registry (tests/helpers/local_registry.py) wherever it can play the part; a recording front
(registry_standin.Server + forward) in front of it adds the one misbehaviour a test needs,
because the real registry never redirects a manifest, points ``Location`` at another host, or
pages referrers (it has no referrers API). ``127.0.0.2`` is "another host".

What is sent where (README, "Credentials: what is sent where"):
- the registry's credential (Basic) or its Bearer token goes only to the registry's own origin
  (scheme, host, port): never after a redirect elsewhere, nor to a ``Location`` or ``Link`` on
  another origin;
- the token server named by the registry's own challenge gets one Basic credential: Enroot's
  entry for the token server's host, else the registry's credential (Docker's and containerd's
  rule), and nothing else;
- nothing leaves an HTTPS registry over plain HTTP; ``~/.netrc`` is never read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from helpers.local_registry import (
    htpasswd_config,
    push_test_image,
    running_registry,
    token_server,
)
from helpers.registry_standin import Reply, Seen, Server, forward, self_signed

from imagekit.util.errors import CredentialsError, IntegrityError, RegistryError
from imagekit.registry import OCI_INDEX, RegistryClient, parse, sha256_digest
from imagekit.registry.client import insecure_reason, is_loopback, plain_http_default

PASSWORD = "origin-Pa55word"
REGISTRY_ONLY = "registry-only-Pa55word"


@pytest.fixture(autouse=True)
def _no_netrc_of_the_user(tmp_path, monkeypatch):
    """requests reads $NETRC or ~/.netrc from os.environ: point both at this test's directory."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("NETRC", raising=False)
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def make_env(tmp_path: Path, *lines: str, **extra: str) -> dict[str, str]:
    env = {"HOME": str(tmp_path), "ENROOT_CONFIG_PATH": str(tmp_path / "enroot"),
           "DOCKER_CONFIG": str(tmp_path / "docker"), **extra}
    if lines:
        path = tmp_path / "enroot" / ".credentials"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in lines))
        path.chmod(0o600)
    return env


def no_secret_anywhere(servers: list[Server], *secrets: str) -> None:
    for server in servers:
        for seen in server.seen:
            text = json.dumps(seen.headers) + seen.path + (seen.basic() or ("", ""))[1]
            for secret in secrets:
                assert secret not in text, (server.addr, seen.method, seen.path)


# --- the real registry with Basic auth, behind fronts -------------------------------------------

@pytest.fixture(scope="module")
def basic_registry(tmp_path_factory):
    root = tmp_path_factory.mktemp("origin-basic")
    with running_registry(root, extra_config=htpasswd_config(root, {"alice": PASSWORD})) as addr:
        yield addr


def collector(status: int = 404, headers: dict[str, str] | None = None, body: bytes = b""):
    def answer(seen: Seen, server: Server) -> Reply:
        return Reply(status, dict(headers or {}), body)
    return answer


def test_link_next_on_another_origin_is_refused_and_gets_nothing(basic_registry, tmp_path):
    """F8: the referrers ``Link: next`` names another host. Before: imagekit sent the registry's
    Basic credential there. The front answers the referrers API itself (docker-registry has none)
    and forwards everything else to the real registry, which does the authentication."""
    env = make_env(tmp_path, f"machine 127.0.0.1 login alice password {PASSWORD}")
    with Server(collector(200, {"Content-Type": OCI_INDEX}, b'{"manifests": []}'), host="127.0.0.2") as other:
        def front_answer(seen: Seen, server: Server) -> Reply:
            if "/referrers/" not in seen.path:
                return forward(basic_registry, seen)
            if seen.authorization is None:     # as the registry would: its challenge
                return forward(basic_registry, Seen("GET", "/v2/", seen.headers))
            index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
            link = f'<{other.url}{seen.path.split("?")[0]}?page=2>; rel="next"'
            return Reply(200, {"Content-Type": OCI_INDEX, "Link": link}, json.dumps(index).encode())

        with Server(front_answer) as front:
            client = RegistryClient(front.addr, env=env)
            pushed = push_test_image(client, "t/link", "1")
            with pytest.raises(RegistryError, match=r"Link.*another origin") as info:
                client.referrers("t/link", pushed["digest"])
    assert info.value.exit_code == 4 and other.url in str(info.value)
    assert other.seen == []
    # The registry did get the credential: Basic auth is how it was asked.
    assert ("alice", PASSWORD) in [s.basic() for s in front.requests(contains="/referrers/")]


@pytest.mark.parametrize("upload_host_answers", [201, 401])
def test_an_upload_location_on_another_origin_gets_no_credentials(basic_registry, tmp_path,
                                                                  upload_host_answers):
    """F8: the registry's upload ``Location`` names another host (as a proxy that rewrites it, or
    a registry that hands uploads to a storage host, would). Before: the PUT carried the
    registry's Basic credential. Now it goes there bare (containerd's rule); if that host asks for
    credentials it gets none. The front rewrites the real registry's ``Location``; the other host
    is a stand-in upload host."""
    env = make_env(tmp_path, f"machine 127.0.0.1 login alice password {PASSWORD}")
    data = b"an artifact's bytes"
    digest = sha256_digest(data)
    answer = (collector(201, {"Docker-Content-Digest": digest}) if upload_host_answers == 201
              else collector(401, {"WWW-Authenticate": 'Basic realm="elsewhere"'}))
    with Server(answer, host="127.0.0.2") as other:
        def front_answer(seen: Seen, server: Server) -> Reply:
            reply = forward(basic_registry, seen)
            if seen.method == "POST" and reply.status == 202:
                location = urlsplit(reply.headers["Location"])
                reply.headers["Location"] = f"{other.url}{location.path}?{location.query}"
            return reply

        with Server(front_answer) as front:
            client = RegistryClient(front.addr, env=env)
            if upload_host_answers == 201:
                assert client.upload_blob("t/upload", data, digest, len(data)) is True
            else:
                with pytest.raises(RegistryError, match="asks for credentials") as info:
                    client.upload_blob("t/upload", data, digest, len(data))
                assert other.url in str(info.value) and front.addr in str(info.value)
    puts = other.requests("PUT")
    assert len(puts) == 1 and other.seen == puts
    assert puts[0].authorization is None and f"digest={digest.replace(':', '%3A')}" in puts[0].path
    assert puts[0].body == data
    assert ("alice", PASSWORD) in [s.basic() for s in front.requests("POST")]


def test_a_challenge_from_another_origin_is_never_answered(basic_registry, tmp_path):
    """F8: the registry redirects a manifest GET to another host, which answers 401 naming its
    own token endpoint. Before: imagekit sent the registry's credential to that endpoint. Now it
    answers no challenge that did not come from the registry's own origin. The front adds the
    redirect (the real registry never redirects a manifest); the other host is a stand-in."""
    env = make_env(tmp_path, f"machine 127.0.0.1 login alice password {PASSWORD}")

    def other_answer(seen: Seen, server: Server) -> Reply:
        if seen.path.startswith("/token"):
            return Reply(200, {"Content-Type": "application/json"}, b'{"token": "stolen"}')
        return Reply(401, {"WWW-Authenticate": f'Bearer realm="{server.url}/token",service="x"'})

    with Server(other_answer, host="127.0.0.2") as other:
        def front_answer(seen: Seen, server: Server) -> Reply:
            if "/manifests/" in seen.path:
                return Reply(307, {"Location": other.url + seen.path})
            return forward(basic_registry, seen)

        with Server(front_answer) as front:
            with pytest.raises(RegistryError, match="asks for credentials") as info:
                RegistryClient(front.addr, env=env).resolve(parse(f"{front.addr}#t/redirected:1"))
    assert info.value.exit_code == 4 and "t/redirected" in str(info.value)
    assert [(s.method, s.path) for s in other.seen] == [("GET", "/v2/t/redirected/manifests/1")]
    assert other.seen[0].authorization is None


# --- Bearer: the token server on another host ---------------------------------------------------

@pytest.fixture(scope="module")
def bearer(tmp_path_factory):
    """The real registry with token auth whose realm is on 127.0.0.2 (a recording front to the
    token server), as Docker Hub's is on auth.docker.io; a recording front to the registry too."""
    root = tmp_path_factory.mktemp("origin-bearer")
    with token_server(root / "auth", {"alice": PASSWORD}) as (config, issued):
        token_addr = re.search(r"realm: http://([^/]+)/token", config).group(1)
        with Server(lambda seen, s: forward(token_addr, seen), host="127.0.0.2") as realm:
            config = config.replace(f"http://{token_addr}/token", f"{realm.url}/token")
            with running_registry(root, extra_config=config) as addr:
                with Server(lambda seen, s: forward(addr, seen)) as front:
                    yield front, realm, issued


@pytest.mark.parametrize("lines, sent", [
    # Only the registry's entry: the token server its challenge named gets it (Docker, containerd).
    ([f"machine 127.0.0.1 login alice password {PASSWORD}"], ("alice", PASSWORD)),
    # The token server's own entry wins (Enroot: curl --netrc-file sends a host its own entry);
    # the registry's entry then goes nowhere.
    ([f"machine 127.0.0.1 login alice password {REGISTRY_ONLY}",
      f"machine 127.0.0.2 login alice password {PASSWORD}"], ("alice", PASSWORD)),
])
def test_the_token_server_gets_one_credential_and_the_registry_only_tokens(bearer, tmp_path, lines, sent):
    front, realm, _ = bearer
    front.seen.clear()
    realm.seen.clear()
    client = RegistryClient(front.addr, env=make_env(tmp_path, *lines))
    pushed = push_test_image(client, "t/bearer-origin", "1")
    assert client.resolve(parse(f"{front.addr}#t/bearer-origin:1")).digest == pushed["digest"]
    assert realm.seen and all(s.path.startswith("/token?") for s in realm.seen)
    assert {s.basic() for s in realm.seen} == {sent}
    assert front.seen and all(s.authorization is None or s.authorization.startswith("Bearer ")
                              for s in front.seen)
    tokens = {s.authorization for s in front.seen if s.authorization}
    assert tokens and not any(t in json.dumps(s.headers) for s in realm.seen for t in tokens)
    no_secret_anywhere([front], PASSWORD, REGISTRY_ONLY)
    no_secret_anywhere([realm], REGISTRY_ONLY)


def test_netrc_is_never_read(bearer, tmp_path):
    """F11: a ~/.netrc entry for the registry's host (for curl or pip). Before: requests sent it
    unasked and it replaced the Bearer token, so the pull failed as "rejected the credentials"."""
    front, realm, _ = bearer
    (tmp_path / ".netrc").write_text("machine 127.0.0.1 login netrc-user password netrc-pass\n"
                                     "machine 127.0.0.2 login netrc-user password netrc-pass\n")
    (tmp_path / ".netrc").chmod(0o600)
    env = make_env(tmp_path, f"machine 127.0.0.1 login alice password {PASSWORD}")
    client = RegistryClient(front.addr, env=env)
    pushed = push_test_image(client, "t/netrc", "1")
    front.seen.clear()
    realm.seen.clear()
    assert RegistryClient(front.addr, env=env).resolve(parse(f"{front.addr}#t/netrc:1")).digest == pushed["digest"]
    assert front.seen[0].authorization is None            # nothing unasked
    no_secret_anywhere([front, realm], "netrc-pass")


def test_netrc_is_never_sent_to_an_open_registry(tmp_path):
    """F11, anonymous: no credentials configured, a ~/.netrc for the host: nothing is sent."""
    (tmp_path / ".netrc").write_text("machine 127.0.0.1 login netrc-user password netrc-pass\n")
    (tmp_path / ".netrc").chmod(0o600)
    with running_registry(tmp_path / "open") as addr:
        with Server(lambda seen, s: forward(addr, seen)) as front:
            client = RegistryClient(front.addr, env=make_env(tmp_path))
            push_test_image(client, "t/open", "1")
            client.resolve(parse(f"{front.addr}#t/open:1"))
    assert front.seen and all(s.authorization is None for s in front.seen)


# --- HTTPS registries: nothing over plain HTTP --------------------------------------------------

@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.mark.parametrize("realm_scheme", ["https", "http"])
def test_an_https_registry_and_its_token_server(tls, tmp_path, monkeypatch, realm_scheme):
    """The real registry over TLS with token auth, its token server on another host, as Docker
    Hub (registry-1.docker.io, auth.docker.io). Over https the token server gets the credential;
    F8: a realm on plain http (a proxy that rewrites it) is refused, and gets nothing."""
    cert, key = tls
    # The CA reaches imagekit through its env (and os.environ, as requests read it before).
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    env = make_env(tmp_path, f"machine 127.0.0.1 login alice password {PASSWORD}",
                   REQUESTS_CA_BUNDLE=str(cert))
    with token_server(tmp_path / "auth", {"alice": PASSWORD}) as (config, issued):
        token_addr = re.search(r"realm: http://([^/]+)/token", config).group(1)
        with Server(lambda seen, s: forward(token_addr, seen), host="127.0.0.2",
                    tls=tls if realm_scheme == "https" else None) as realm:
            config = config.replace(f"http://{token_addr}/token", f"{realm.url}/token")
            tls_config = f"  tls:\n    certificate: {cert}\n    key: {key}\n"
            with running_registry(tmp_path / "registry", extra_config=tls_config + config) as addr:
                client = RegistryClient(addr, plain_http=False, env=env)
                assert client.base == f"https://{addr}"
                if realm_scheme == "https":
                    client.ensure_access("t/tls", push=True)
                    assert {s.basic() for s in realm.seen} == {("alice", PASSWORD)}
                    assert ("alice", "repository:t/tls:pull,push") in issued
                    return
                with pytest.raises(RegistryError, match="plain HTTP") as info:
                    client.ensure_access("t/tls", push=True)
    assert info.value.exit_code == 4 and realm.url in str(info.value) and addr in str(info.value)
    assert realm.seen == [] and issued == []


@pytest.mark.parametrize("case", ["redirect", "realm", "upload-location", "link-next"])
def test_an_https_registry_never_sends_anything_over_plain_http(tls, tmp_path, monkeypatch, case):
    """F8, cleartext: every way an HTTPS registry can send imagekit to a plain-http URL. A TLS
    stand-in registry (Basic auth like docker-registry's htpasswd) plays the registry: the real
    one cannot be made to name http URLs; the plain-http server on 127.0.0.2 records."""
    cert, _ = tls
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    env = make_env(tmp_path, f"machine 127.0.0.1 login alice password {PASSWORD}",
                   REQUESTS_CA_BUNDLE=str(cert))
    digest = sha256_digest(b"x")
    with Server(collector(200, {"Content-Type": OCI_INDEX}, b'{"manifests": []}'), host="127.0.0.2") as plain:
        def registry(seen: Seen, server: Server) -> Reply:
            if case == "realm":
                return Reply(401, {"WWW-Authenticate": f'Bearer realm="{plain.url}/token",service="r"'})
            if seen.basic() != ("alice", PASSWORD):
                return Reply(401, {"WWW-Authenticate": 'Basic realm="standin"'})
            if case == "redirect":
                return Reply(307, {"Location": f"{plain.url}{seen.path}"})
            if case == "upload-location":
                if seen.method == "HEAD":
                    return Reply(404)
                if seen.method == "POST":
                    return Reply(202, {"Location": f"{plain.url}/v2/t/x/blobs/uploads/u1?_state=s"})
            if case == "link-next" and "/referrers/" in seen.path:
                return Reply(200, {"Content-Type": OCI_INDEX, "Link": f'<{plain.url}/next>; rel="next"'},
                             b'{"manifests": []}')
            return Reply(500)

        with Server(registry, tls=tls) as https:
            client = RegistryClient(https.addr, plain_http=False, env=env)
            with pytest.raises(RegistryError, match="plain HTTP") as info:
                if case == "upload-location":
                    client.upload_blob("t/x", b"x", digest, 1)
                elif case == "link-next":
                    client.referrers("t/x", digest)
                else:
                    client.get_manifest("t/x", "1")
    assert plain.url in str(info.value) and https.addr in str(info.value)
    assert plain.seen == []


# --- loopback by address (F21) and "insecure", explicitly --------------------------------------

@pytest.mark.parametrize("registry, plain", [
    ("127.0.0.1:5000", True), ("127.8.9.10", True), ("[::1]:5000", True), ("[::ffff:127.0.0.1]:5000", True),
    ("localhost:5000", True), ("localhost", True),
    # Names are not addresses: these resolve wherever their DNS says (F21).
    ("127.registry.example.com:443", False), ("127.0.0.1.nip.io", False), ("localhost.example.com", False),
    ("127.1:5000", False), ("[::2]:5000", False), ("10.0.0.1:5000", False), ("registry.example.org", False),
])
def test_loopback_is_decided_by_address(registry, plain):
    assert plain_http_default(registry, {}) is plain
    client = RegistryClient(registry, env={"HOME": "/nonexistent"})
    assert client.base == f"{'http' if plain else 'https'}://{registry}"


def test_insecure_registries_are_named_explicitly():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("127.example.org")
    assert insecure_reason("reg.example.org:5000", {}) is None
    named = {"IMAGEKIT_INSECURE_REGISTRIES": "other.example.org, reg.example.org:5000"}
    assert "IMAGEKIT_INSECURE_REGISTRIES" in insecure_reason("reg.example.org:5000", named)
    assert insecure_reason("reg.example.org:5001", named) is None          # the port is part of it
    assert insecure_reason("REG.example.org:5000", named) is not None      # host names are not case-sensitive
    assert "ENROOT_ALLOW_HTTP" in insecure_reason("reg.example.org", {"ENROOT_ALLOW_HTTP": "yes"})
    assert insecure_reason("reg.example.org", {"ENROOT_ALLOW_HTTP": "no"}) is None
    assert "loopback" in insecure_reason("127.0.0.1:5000", {})


def test_a_blob_redirected_to_storage_arrives_bare_and_checked(basic_registry, tmp_path):
    """Registries hand blobs to their storage with a redirect (Docker Hub to its CDN, S3 signed
    URLs): that host gets no credential, and the bytes are still checked against the digest. The
    front adds the redirect; the storage stand-in reads the real registry with its own access."""
    import base64
    import io

    env = make_env(tmp_path, f"machine 127.0.0.1 login alice password {PASSWORD}")
    own = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()

    def storage_answer(seen: Seen, server: Server) -> Reply:
        headers = {**seen.headers, "authorization": own}    # the storage's own access, not imagekit's
        reply = forward(basic_registry, Seen(seen.method, seen.path, headers))
        if "tamper" in seen.path:
            reply.body = reply.body[:-1] + b"!"
        return reply

    with Server(storage_answer, host="127.0.0.2") as storage:
        def front_answer(seen: Seen, server: Server) -> Reply:
            if seen.method == "GET" and "/blobs/sha256:" in seen.path and seen.authorization:
                return Reply(307, {"Location": storage.url + seen.path + ("?tamper=1" if "tampered" in seen.path else "")})
            return forward(basic_registry, seen)

        with Server(front_answer) as front:
            client = RegistryClient(front.addr, env=env)
            layers = {}
            for repo in ("t/storage", "t/tampered"):
                pushed = push_test_image(client, repo, "1", payload=repo.encode())
                layers[repo] = client.get_manifest(repo, pushed["digest"]).json()["layers"][0]
            out = io.BytesIO()
            layer = layers["t/storage"]
            assert client.download_blob("t/storage", layer["digest"], out, size=layer["size"]) == layer["size"]
            assert sha256_digest(out.getvalue()) == layer["digest"]
            layer = layers["t/tampered"]
            with pytest.raises(IntegrityError, match="nothing was kept"):
                client.download_blob("t/tampered", layer["digest"], io.BytesIO(), size=layer["size"])
    assert len(storage.seen) == 2 and all(s.authorization is None for s in storage.seen)


def test_credentials_error_still_names_the_entry(basic_registry, tmp_path):
    env = make_env(tmp_path, "machine 127.0.0.1 login alice password wrong")
    with pytest.raises(CredentialsError, match=r"rejected the credentials \(user 'alice' from"):
        RegistryClient(basic_registry, env=env).ensure_access("t/x")
