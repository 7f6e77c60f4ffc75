"""A registry that lies, end to end (the "untried surface" of ../shared/reviews/security-4.md): a tag whose
manifest changes between one request and the next, bytes that are not their digest, a blob redirected to
another host that serves other bytes, and a manifest asked for by digest answered with another image's.

The registry is the real one (tests/conftest.py ``registry``); a front (registry_standin.Server over
forward()) adds the one lie each test needs, because the real registry serves what was pushed. What must
hold: the export is of one image, pinned by the digest the tag resolved to once, and any byte that is
not its digest stops it with exit status 6, nothing written and nothing stored.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.registry_standin import Reply, Seen, Server, forward

from imagekit.cli import main
from imagekit.export.push import push_image
from imagekit.export.store import Store
from imagekit.registry import RegistryClient, parse

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def pushed(base_image, odd_image, registry):
    """The base image as ``lie/app:a``, the odd one (it has /opt/data) as ``lie/app:b``: their
    manifest digests and their first layers' digests."""
    out = {}
    client = RegistryClient(registry)
    for tag, image in (("a", base_image), ("b", odd_image)):
        push_image(image, f"{registry}/lie/app:{tag}")
        resolved = client.resolve(parse(f"{registry}#lie/app:{tag}"))
        manifest = client.get_manifest("lie/app", resolved.digest).json()
        out[tag] = (resolved.digest, manifest["layers"][0]["digest"])
    return out


def listing(path: Path) -> str:
    return subprocess.run(["unsquashfs", "-l", str(path)], capture_output=True, text=True, check=True).stdout


def export(front: str, tag: str, out: Path, store: Path) -> object:
    return CliRunner().invoke(main, ["export", f"docker://{front}/lie/app:{tag}", "--to", "enroot", "-o", str(out),
                                     "--store", str(store), "-q"])


def test_a_tag_that_changes_between_requests_is_resolved_once(registry, pushed, tmp_path):
    """The tag answers image A to the first request and image B to every later one (a push between two
    requests, or a registry that lies): the export asks for the tag once and reads everything else by
    A's digests, so the file is A's whole, never A's config with B's layers."""
    asked = []

    def answer(seen: Seen, server: Server) -> Reply:
        if "/manifests/flip" in seen.path:
            asked.append(seen.method)
            tag = "a" if len(asked) == 1 else "b"
            return forward(registry, Seen(seen.method, seen.path.replace("/flip", f"/{tag}"), seen.headers))
        return forward(registry, seen)

    with Server(answer) as front:
        res = export(front.addr, "flip", tmp_path / "x.sqsh", tmp_path / "store")
    assert res.exit_code == 0, res.output
    assert asked == ["GET"]
    files = listing(tmp_path / "x.sqsh")
    assert "etc/debian_version" in files and "opt/data" not in files


@pytest.mark.parametrize("lie", ["layer bytes", "layer redirected to another host", "manifest by digest"])
def test_bytes_that_are_not_their_digest_stop_the_export_and_nothing_is_kept(registry, pushed, tmp_path, lie):
    """A layer's bytes changed in flight; a layer redirected to another host (127.0.0.2) that serves other
    bytes of the same length; A's manifest, asked for by its digest, answered with B's. Each is exit 6,
    naming the digest; no output, no `.part`, and nothing in the store."""
    digest_a, layer_a = pushed["a"]
    digest_b, _ = pushed["b"]

    def elsewhere(seen: Seen, server: Server) -> Reply:
        reply = forward(registry, seen)
        reply.body = bytes(len(reply.body))     # zeros: the right length, not the bytes
        return reply

    with Server(elsewhere, host="127.0.0.2") as other:
        def answer(seen: Seen, server: Server) -> Reply:
            if lie == "layer bytes" and seen.path.endswith(f"/blobs/{layer_a}"):
                reply = forward(registry, seen)
                reply.body = reply.body[:100] + bytes([reply.body[100] ^ 1]) + reply.body[101:]
                return reply
            if lie.startswith("layer redirected") and seen.path.endswith(f"/blobs/{layer_a}"):
                return Reply(307, {"Location": other.url + seen.path})
            if lie == "manifest by digest" and seen.path.endswith(f"/manifests/{digest_a}"):
                return forward(registry, Seen(seen.method, seen.path.replace(digest_a, digest_b), seen.headers))
            return forward(registry, seen)

        with Server(answer) as front:
            res = export(front.addr, "a", tmp_path / "x.sqsh", tmp_path / "store")
    assert res.exit_code == 6, res.output
    assert "Traceback" not in res.output and (layer_a in res.output or digest_a in res.output), res.output
    assert not list(tmp_path.glob("*x.sqsh*"))
    assert Store.open(tmp_path / "store").entries() == []
    if lie.startswith("layer redirected"):
        assert other.requests("GET") and all(s.authorization is None for s in other.seen)
