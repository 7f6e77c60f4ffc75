"""Bounded registry responses (issue 22, F12): sizes, pages, redirects, timeouts, trickles.

The real docker-registry serves what it can (a 4 MiB manifest, a blob whose stored bytes grew);
the hostile answers come from stand-ins (registry_standin.Server), because the real registry
refuses to store a manifest over 4 MiB, has no referrers API to page, and never redirects in a
loop or stalls. Tests assert what each server received and the error the user sees; a stand-in
that would make the code before the fix run forever stops by itself after a few hundred answers.
"""

from __future__ import annotations

import io
import json

import pytest
from helpers.local_registry import blob_path, running_registry
from helpers.registry_standin import Reply, Seen, Server, drip

from imagekit.util.errors import IntegrityError, RegistryError
from imagekit.registry import OCI_INDEX, OCI_MANIFEST, RegistryClient, sha256_digest
from imagekit.registry.client import (
    MAX_MANIFEST_BYTES,
    MAX_REDIRECTS,
    MAX_REFERRER_PAGES,
)

MIB = 1 << 20
D = "sha256:" + "ab" * 32


@pytest.fixture(autouse=True)
def _no_netrc_of_the_user(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("NETRC", raising=False)


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "ENROOT_CONFIG_PATH": str(tmp_path / "enroot"),
            "DOCKER_CONFIG": str(tmp_path / "docker")}


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    root = tmp_path_factory.mktemp("bounds-registry")
    with running_registry(root) as addr:
        yield addr, root


def manifest_of_size(size: int, config: bytes = b"{}", layer: bytes = b"layer") -> bytes:
    """A valid OCI manifest padded (one annotation) to exactly ``size`` bytes."""
    doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                      "digest": sha256_digest(config), "size": len(config)},
           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                       "digest": sha256_digest(layer), "size": len(layer)}],
           "annotations": {"pad": ""}}
    bare = len(json.dumps(doc).encode())
    doc["annotations"]["pad"] = "x" * (size - bare)
    body = json.dumps(doc).encode()
    assert len(body) == size
    return body


def test_a_manifest_of_exactly_4_mib_is_read_and_the_real_registry_stores_no_more(real, env):
    """4 MiB is what OCI asks clients and registries to support, and what distribution stores."""
    addr, _ = real
    client = RegistryClient(addr, env=env)
    for blob in (b"{}", b"layer"):
        client.upload_blob("t/big", blob, sha256_digest(blob), len(blob))
    body = manifest_of_size(MAX_MANIFEST_BYTES)
    digest, _ = client.put_manifest("t/big", "4mib", body, OCI_MANIFEST)
    got = client.get_manifest("t/big", "4mib")
    assert got.digest == digest and got.size == 4 * MIB
    with pytest.raises(RegistryError):
        client.put_manifest("t/big", "over", manifest_of_size(MAX_MANIFEST_BYTES + 1), OCI_MANIFEST)


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "until-close"])
def test_a_manifest_over_4_mib_is_refused(env, declared):
    """A stand-in serves a valid manifest one byte over the cap (declared), or 16 MiB without a
    length. Before: read whole (a 512 MiB one cost 1 GiB of memory) and accepted."""
    body = manifest_of_size(MAX_MANIFEST_BYTES + 1 if declared else 16 * MIB)
    chunks = [body[i:i + MIB] for i in range(0, len(body), MIB)]

    def answer(seen: Seen, server: Server) -> Reply:
        return Reply(200, {"Content-Type": OCI_MANIFEST}, chunks, length=declared)

    with Server(answer) as standin:
        client = RegistryClient(standin.addr, env=env)
        with pytest.raises(RegistryError, match=r"more than 4 MiB") as info:
            client.get_manifest("t/huge", "1")
    assert "t/huge:1" in str(info.value) and standin.addr in str(info.value)
    assert info.value.exit_code == 4
    assert len(standin.seen) == 1


def referrers_standin(kind: str, stop_after: int):
    """Referrers pages with a ``Link: next``: back to the same page (``self``), to ever new pages
    (``endless``), or ever new pages of 3 MiB each (``large``); no Link after ``stop_after``."""
    def answer(seen: Seen, server: Server) -> Reply:
        n = len(server.seen)
        entry = {"mediaType": OCI_MANIFEST, "digest": D, "size": 1, "artifactType": "application/x-t"}
        if kind == "large":
            entry["annotations"] = {"pad": "x" * (3 * MIB)}
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry]}
        headers = {"Content-Type": OCI_INDEX}
        if n < stop_after:
            path = seen.path if kind == "self" else f"/v2/t/r/referrers/{D}?page={n + 1}"
            headers["Link"] = f'<{path}>; rel="next"'
        return Reply(200, headers, json.dumps(index).encode())
    return answer


@pytest.mark.parametrize("kind, stop_after, requests, match", [
    ("self", 300, 1, "loops back to a page it already sent"),
    ("endless", 300, MAX_REFERRER_PAGES, f"more than {MAX_REFERRER_PAGES} pages"),
    ("large", 10, 6, "more than 16 MiB"),
])
def test_referrer_pages_are_counted(env, kind, stop_after, requests, match):
    """Before: ``Link: next`` was followed while there was one (309 requests until the server
    went away), keeping every page in memory."""
    with Server(referrers_standin(kind, stop_after)) as standin:
        client = RegistryClient(standin.addr, env=env)
        with pytest.raises(RegistryError, match=match) as info:
            client.referrers("t/r", D)
    assert f"t/r@{D}" in str(info.value) and standin.addr in str(info.value)
    assert len(standin.seen) == requests


def test_redirects_are_counted(env):
    """A registry that redirects a manifest to itself, forever. Before: requests gave up after
    30 and imagekit said "cannot reach"; now after 10 (Go's default, which Docker's and
    containerd's clients use), saying so."""
    def answer(seen: Seen, server: Server) -> Reply:
        if len(server.seen) > 100:
            return Reply(404)
        return Reply(307, {"Location": f"/v2/t/loop/manifests/1?hop={len(server.seen)}"})

    with Server(answer) as standin:
        with pytest.raises(RegistryError, match=f"redirected more than {MAX_REDIRECTS} times") as info:
            RegistryClient(standin.addr, env=env).get_manifest("t/loop", "1")
    assert "t/loop:1" in str(info.value)
    assert len(standin.seen) == MAX_REDIRECTS + 1


def silent(seen: Seen, server: Server) -> Reply:
    server.stop.wait()      # answers only when the test is over
    return Reply(500)


@pytest.mark.parametrize("where", ["registry", "token server"])
def test_every_request_has_a_read_timeout(env, where):
    """A registry, or the token server it names, that accepts the connection and never answers."""
    with Server(silent, host="127.0.0.2") as quiet:
        def registry(seen: Seen, server: Server) -> Reply:
            return Reply(401, {"WWW-Authenticate": f'Bearer realm="{quiet.url}/token",service="s"'})

        with Server(registry) as standin:
            addr = quiet.addr if where == "registry" else standin.addr
            client = RegistryClient(addr, env=env, timeout=(5, 0.5))
            with pytest.raises(RegistryError, match="timed out") as info:
                client.get_manifest("t/slow", "1")
    assert where in str(info.value) and addr in str(info.value)
    assert len(quiet.seen) == 1


def test_a_blob_that_stalls_midway_is_a_registry_error(env):
    """Before: the read timeout inside the stream escaped as a requests exception (a traceback)."""
    def answer(seen: Seen, server: Server) -> Reply:
        def body():
            yield b"0123456789"
            server.stop.wait()
        return Reply(200, {"Content-Length": "1000"}, body(), length=False)

    with Server(answer) as standin:
        client = RegistryClient(standin.addr, env=env, timeout=(5, 0.5))
        out = io.BytesIO()
        with pytest.raises(RegistryError, match="timed out"):
            client.download_blob("t/stall", D, out, size=1000)


def test_a_document_that_trickles_in_is_abandoned(env):
    """A registry that sends a manifest a byte at a time, each within the read timeout: the
    document has a deadline as a whole. (The stand-in needs 4 s for 200 bytes; the client
    gives up after 0.5 s. Before: read to the end, however long.)"""
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "pad": "x" * 150}).encode()[:200]

    def answer(seen: Seen, server: Server) -> Reply:
        return Reply(200, {"Content-Type": OCI_MANIFEST}, drip(body, server.stop, 0.02), length=False)

    with Server(answer) as standin:
        client = RegistryClient(standin.addr, env=env, timeout=(5, 2), document_deadline=0.5)
        with pytest.raises(RegistryError, match=r"did not arrive within 0.5 s") as info:
            client.get_manifest("t/trickle", "1")
    assert "t/trickle:1" in str(info.value)


def test_a_blob_longer_than_its_descriptor_stops_at_its_size(real, env):
    """The real registry serves a blob whose stored bytes grew to 8 MiB; the descriptor says 1000.
    Before: all 8 MiB were written out, then refused. Now the stream stops past 1000 bytes."""
    addr, root = real
    client = RegistryClient(addr, env=env)
    data = bytes(range(250)) * 4
    digest = sha256_digest(data)
    client.upload_blob("t/grown", data, digest, len(data))
    blob_path(root, digest).write_bytes(b"\0" * (8 * MIB))
    out = io.BytesIO()
    with pytest.raises(IntegrityError, match="nothing was kept") as info:
        client.download_blob("t/grown", digest, out, size=len(data))
    assert info.value.exit_code == 6 and "1000" in str(info.value)
    assert len(out.getvalue()) <= len(data)
