"""Slow, endless and lying registries (issue 33, the "not tried" list of ../shared/reviews/security-3.md).

The documents already had caps and deadlines (test_registry_bounds.py); these are the blob paths and
the export that streams them: a registry that sends a blob a byte at a time (a slow-loris), one whose
chunked body never ends, one whose Content-Length lies, and SIGTERM while an export's layer reader
waits on such a registry. All answers come from stand-ins (registry_standin.Server): the real
docker-registry does not trickle, lie about lengths or stream without end. A stand-in that would
keep the code before a fix busy for ever stops when the test's server shuts down; a ``timeout=``
on a subprocess is a hang guard, never a measurement.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading

import pytest
from helpers.registry_standin import Reply, Seen, Server

from imagekit.util.errors import IntegrityError, RegistryError
from imagekit.registry import RegistryClient, sha256_digest

HANG_GUARD = 120


@pytest.fixture(autouse=True)
def _no_netrc_of_the_user(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "ENROOT_CONFIG_PATH": str(tmp_path / "enroot"),
            "DOCKER_CONFIG": str(tmp_path / "docker")}


DATA = os.urandom(4096)
DIGEST = sha256_digest(DATA)


def test_a_blob_that_trickles_is_abandoned(env):
    """A byte every 0.2 s, each well within the read timeout (2 s): before, the download went on for as
    long as the registry liked (a byte a minute would do). Now a blob must bring blob_min_bytes per
    blob_window (64 KiB a minute by default): here 1000 bytes a second, so it stops within 2 s."""
    def answer(seen: Seen, server: Server) -> Reply:
        def body():
            for i in range(len(DATA)):
                if server.stop.wait(0.2):
                    return
                yield DATA[i:i + 1]
        return Reply(200, {"Content-Length": str(len(DATA))}, body(), length=False)

    with Server(answer) as standin:
        client = RegistryClient(standin.addr, env=env, timeout=(5, 2), blob_window=1.0, blob_min_bytes=1000)
        out = io.BytesIO()
        with pytest.raises(RegistryError, match=r"trickles blob .* under the 1000 bytes per 1 s") as info:
            client.download_blob("t/loris", DIGEST, out, size=len(DATA))
    assert "nothing was kept" in str(info.value) and len(out.getvalue()) < len(DATA)


def test_an_endless_chunked_blob_stops_at_its_size(env):
    """Chunked transfer, no length, never ending: the client stops as soon as the bytes pass the
    descriptor's size (before and after the fix; kept here with the other hostile bodies)."""
    def answer(seen: Seen, server: Server) -> Reply:
        return Reply(200, {}, (b"\0" * 65536 for _ in itertools.count()), length=False)

    with Server(answer) as standin:
        out = io.BytesIO()
        with pytest.raises(IntegrityError, match="runs past its 4096 bytes"):
            RegistryClient(standin.addr, env=env).download_blob("t/endless", DIGEST, out, size=len(DATA))
    assert len(out.getvalue()) <= len(DATA)


@pytest.mark.parametrize("declared,sent,error", [
    (len(DATA) * 2, DATA, "broke off"),              # shorter than it says: the connection closes early
    (len(DATA) // 2, DATA, "arrived as"),            # longer than it says: only what it declared is read
])
def test_a_blob_whose_content_length_lies(env, declared, sent, error):
    def answer(seen: Seen, server: Server) -> Reply:
        return Reply(200, {"Content-Length": str(declared)}, sent, length=False)

    with Server(answer) as standin:
        with pytest.raises((RegistryError, IntegrityError), match=error) as info:
            RegistryClient(standin.addr, env=env).download_blob("t/lies", DIGEST, io.BytesIO(), size=len(DATA))
    assert "nothing was kept" in str(info.value) and "Traceback" not in str(info.value)


def test_a_manifest_whose_content_length_lies_is_a_clear_error(env):
    def answer(seen: Seen, server: Server) -> Reply:
        return Reply(200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json",
                           "Content-Length": "5000"}, b'{"schemaVersion": 2}', length=False)

    with Server(answer) as standin:
        with pytest.raises(RegistryError, match="broke off"):
            RegistryClient(standin.addr, env=env).get_manifest("t/lies", "1")


# --- SIGTERM while an export's layer reader is blocked ---------------------------------------------

def _tar(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _image() -> tuple[dict[str, bytes], str]:
    """The blobs of a one-layer image (gzip), and its layer's digest."""
    tar = _tar("big", os.urandom(64 << 10))
    stored = gzip.compress(tar, mtime=0)
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/sh"]},
                         "rootfs": {"type": "layers", "diff_ids": [sha256_digest(tar)]}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": sha256_digest(config), "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                       "digest": sha256_digest(stored), "size": len(stored)}]}).encode()
    return {"manifest": manifest, sha256_digest(config): config, sha256_digest(stored): stored}, \
        sha256_digest(stored)


def test_g3_sigterm_ends_an_export_whose_layer_reader_is_blocked_and_leaves_no_part(tmp_path):
    """Issue 33 G3: the stand-in sends the layer a byte a second, each within the read timeout. SIGTERM
    arrives while the export's reader thread waits for the next byte: the export ends, with no `.part`
    beside -o. Before: its main thread waited for that thread until the whole layer had come."""
    blobs, layer = _image()
    started = threading.Event()

    def answer(seen: Seen, server: Server) -> Reply:
        if "/manifests/" in seen.path:
            return Reply(200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, blobs["manifest"])
        digest = seen.path.rsplit("/", 1)[-1]
        if digest == layer:
            def drip():
                for i in range(len(blobs[layer])):
                    started.set()
                    if server.stop.wait(1.0):
                        return
                    yield blobs[layer][i:i + 1]
            return Reply(200, {"Content-Length": str(len(blobs[layer]))}, drip(), length=False)
        return Reply(200, {}, blobs[digest]) if digest in blobs else Reply(404)

    out = tmp_path / "out" / "slow.sqsh"
    out.parent.mkdir()
    env = {**os.environ, "HOME": str(tmp_path), "DOCKER_HOST": "unix:///nonexistent.sock"}
    with Server(answer) as standin:
        proc = subprocess.Popen([sys.executable, "-m", "imagekit", "export", f"docker://{standin.addr}/t/slow:1",
                                 "--to", "enroot", "--no-store", "-o", str(out)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        try:
            assert started.wait(HANG_GUARD), "the export never asked for the layer"
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=HANG_GUARD)
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0 and "Traceback" not in err, err
    assert list(out.parent.iterdir()) == [], "no .part (and no output) after SIGTERM"
