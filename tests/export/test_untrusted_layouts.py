"""Daemonless sources as untrusted input (issue 33: G3, G4 and the "not tried" list of
../shared/reviews/security-3.md).

- G3: an ``oci:`` layout blob that is a link to ``/dev/zero`` or a FIFO made `imagekit export` run
  for ever, deaf to SIGTERM; now it is refused before a byte is read (SIGTERM while a reader thread
  is blocked: tests/registry/test_untrusted_registries.py).
- G4: a blob linked to a file only the exporting user (root) may read went into the merge, and the
  error printed its size and sha256; now a link is refused, naming the blob only.
- A compressed layer that inflates past :data:`imagekit.export.layers.MAX_EXPANSION` times its
  stored size (a zstd bomb) is refused; gzip cannot get there.

Exports run as `python -m imagekit` subprocesses where the code before the fix would hang, so the
test ends (and fails) instead; their ``timeout=`` is a hang guard, never a measurement.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.layered import LAYER_GZIP, layer_tar, oci_layout, sha
from helpers.users import ALICE, setpriv

from imagekit.util.errors import ImagekitError
from imagekit.export import ExportRequest, export_image, layers

HANG_GUARD = 120     # seconds; the fixed code answers at once, the old one never did


def export_cli(source: str, out: Path, *options: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent.sock"}     # no engine: the layout only
    return subprocess.Popen([sys.executable, "-m", "imagekit", "export", source, "--to", "enroot", "--no-store",
                             "-o", str(out), *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, **kw)


def first_layer_blob(layout: Path) -> Path:
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((layout / "blobs" / "sha256" / index["manifests"][0]["digest"].split(":")[1]).read_bytes())
    return layout / "blobs" / "sha256" / manifest["layers"][0]["digest"].split(":")[1]


def hostile_layout(base: Path, plant: str, target: str | None = None) -> Path:
    """A valid layout, handed to Alice, who replaces its layer blob with a link to ``target`` or a FIFO."""
    layout = oci_layout(base / "layout", [[("f", "a", b"a" * 4096)]])
    subprocess.run(["chown", "-R", f"{ALICE}:{ALICE}", str(base / "layout")], check=True)
    blob = first_layer_blob(layout)
    script = {"link": 'rm "$1" && ln -s "$2" "$1"', "fifo": 'rm "$1" && mkfifo "$1"'}[plant]
    proc = subprocess.run(setpriv(ALICE, ["sh", "-c", script, "sh", str(blob), target or ""]),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return layout


@pytest.mark.parametrize("plant,target", [("link", "/dev/zero"), ("fifo", None), ("link", "../../../../dev/zero")])
def test_g3_a_blob_that_is_not_a_regular_file_in_the_layout_is_refused_before_reading(shared_dir, plant, target):
    """Before: read for ever (/dev/zero) or blocked in open (a FIFO). Now one error naming the blob."""
    layout = hostile_layout(shared_dir, plant, target)
    out = shared_dir / "out" / "x.sqsh"
    out.parent.mkdir()
    proc = export_cli(f"oci:{layout}", out)
    try:
        _, err = proc.communicate(timeout=HANG_GUARD)
    finally:
        proc.kill()
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert ("symbolic link; refused, not followed" if plant == "link" else "is a FIFO, not a regular file") in err
    assert first_layer_blob(layout).name in err
    assert list(out.parent.iterdir()) == [], "nothing written, no .part left"


def test_g4_a_blob_linked_to_a_file_only_root_may_read_is_never_read_or_hashed(shared_dir):
    """Root exports Alice's layout whose blob links to a root-only secret: refused as a link; the error
    has neither the secret's size nor its sha256 (before: "holds 785 bytes hashing to sha256:…")."""
    secret = shared_dir / "root-only"
    secret.write_bytes(b"root:$6$salt$hash:19000:0:99999:7:::\n" * 7)
    secret.chmod(0o600)
    digest = hashlib.sha256(secret.read_bytes()).hexdigest()
    layout = hostile_layout(shared_dir, "link", str(secret))
    with pytest.raises(ImagekitError) as info:
        export_image(f"oci:{layout}", ExportRequest("enroot", force=True), shared_dir / "x.sqsh", store=False)
    text = str(info.value)
    assert "symbolic link" in text and digest not in text and str(secret.stat().st_size) not in text, text


def test_g4_a_hard_link_to_a_root_only_file_is_named_never_measured(shared_dir):
    """Where fs.protected_hardlinks is 0, a layout's author can hard-link a file only root may read into
    the layout (made here by root, as that author could). It is a regular file inside the layout, so it
    is read, but the error names the blob and the descriptor's digest and size only, never what it holds."""
    secret = shared_dir / "root-only"
    secret.write_bytes(b"root:$6$salt$hash:19000:0:99999:7:::\n" * 7)
    secret.chmod(0o600)
    layout = oci_layout(shared_dir / "layout", [[("f", "a", b"a" * 4096)]])
    blob = first_layer_blob(layout)
    blob.unlink()
    os.link(secret, blob)
    with pytest.raises(ImagekitError) as info:
        export_image(f"oci:{layout}", ExportRequest("enroot", force=True), shared_dir / "x.sqsh", store=False)
    text = str(info.value)
    assert "is damaged" in text and blob.name in text
    assert hashlib.sha256(secret.read_bytes()).hexdigest() not in text and str(secret.stat().st_size) not in text


def test_an_oci_archive_must_be_a_regular_file(tmp_path):
    """Before: blocked for ever opening the FIFO."""
    fifo = tmp_path / "image.tar"
    os.mkfifo(fifo)
    proc = export_cli(f"oci-archive:{fifo}", tmp_path / "x.sqsh")
    try:
        _, err = proc.communicate(timeout=HANG_GUARD)
    finally:
        proc.kill()
    assert proc.returncode == 2 and "is not a regular file" in err, err


def test_a_layer_descriptor_without_a_size_is_refused(tmp_path):
    """Every read of a blob stops at its descriptor's size, so a descriptor must carry one."""
    layout = oci_layout(tmp_path / "layout", [[("f", "a", b"a")]])
    index = json.loads((layout / "index.json").read_text())
    mpath = layout / "blobs" / "sha256" / index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads(mpath.read_bytes())
    del manifest["layers"][0]["size"]
    data = json.dumps(manifest).encode()
    (layout / "blobs" / "sha256" / sha(data).split(":")[1]).write_bytes(data)
    index["manifests"][0].update(digest=sha(data), size=len(data))
    (layout / "index.json").write_text(json.dumps(index))
    with pytest.raises(ImagekitError, match="descriptor's size is None, not a byte count"):
        export_image(f"oci:{layout}", ExportRequest("enroot"), tmp_path / "x.sqsh", store=False)


def with_layer(layout: Path, blob: Path, size: int, digest: str) -> None:
    """Point ``layout``'s one layer at ``blob`` (placed as ``digest``), an uncompressed tar declared ``size``
    bytes (zeros read as one: nothing stops a reader before the end)."""
    index = json.loads((layout / "index.json").read_text())
    mpath = layout / "blobs" / "sha256" / index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads(mpath.read_bytes())
    blob.rename(layout / "blobs" / "sha256" / digest.split(":")[1])
    manifest["layers"][0].update(digest=digest, size=size, mediaType="application/vnd.oci.image.layer.v1.tar")
    data = json.dumps(manifest).encode()
    (layout / "blobs" / "sha256" / sha(data).split(":")[1]).write_bytes(data)
    index["manifests"][0].update(digest=sha(data), size=len(data))
    (layout / "index.json").write_text(json.dumps(index))


def test_h12_a_layer_declaring_more_than_the_bound_is_refused_before_reading(tmp_path):
    """H12: a sparse 64 GiB blob (28 KB on disk) with a descriptor saying so kept an export reading for
    minutes; it is refused at once, naming the layer and the setting, and nothing is written."""
    layout = oci_layout(tmp_path / "layout", [[("f", "a", b"a")]])
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as fh:
        fh.truncate(64 << 30)
    with_layer(layout, sparse, 64 << 30, "sha256:" + "5a" * 32)
    out = tmp_path / "x.sqsh"
    proc = export_cli(f"oci:{layout}", out, "--no-space-check")    # as the red team ran it: zeros compress
    try:
        _, err = proc.communicate(timeout=HANG_GUARD)
    finally:
        proc.kill()
    assert proc.returncode != 0 and "declares 68719476736 bytes, more than the 34359738368" in err, err
    assert "IMAGEKIT_MAX_LAYER_SIZE" in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".x.sqsh*"))


def test_the_layer_bound_is_a_site_setting(tmp_path, monkeypatch):
    layout = oci_layout(tmp_path / "layout", [[("f", "a", b"a" * 4096)]])
    monkeypatch.setenv(layers.MAX_LAYER_ENV, "16")
    with pytest.raises(ImagekitError, match="more than the 16 a layer may be"):
        export_image(f"oci:{layout}", ExportRequest("enroot"), tmp_path / "x.sqsh", store=False)
    monkeypatch.setenv(layers.MAX_LAYER_ENV, "1M")
    assert export_image(f"oci:{layout}", ExportRequest("enroot"), tmp_path / "x.sqsh", store=False).bytes > 0


# --- decompression bombs ---------------------------------------------------------------------------

def zstd(data: bytes) -> bytes:
    return subprocess.run(["zstd", "-q", "-19", "-c"], input=data, capture_output=True, check=True).stdout


def bomb_layout(base: Path, media_type: str, compress) -> tuple[Path, int]:
    """A layer of 64 MiB of zeros in one file, compressed with ``compress``."""
    tar = layer_tar([("f", "zeros", b"\0" * (64 << 20))])
    stored = compress(tar)
    layout = oci_layout(base, [[("f", "placeholder", b"x")]])
    # Replace the one layer with the bomb (its digest, size and media type in the manifest and config).
    index = json.loads((layout / "index.json").read_text())
    mpath = layout / "blobs" / "sha256" / index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads(mpath.read_bytes())
    config = json.loads((layout / "blobs" / "sha256" / manifest["config"]["digest"].split(":")[1]).read_bytes())
    config["rootfs"]["diff_ids"] = [sha(tar)]
    cdata = json.dumps(config).encode()
    for data in (stored, cdata):
        (layout / "blobs" / "sha256" / sha(data).split(":")[1]).write_bytes(data)
    manifest["layers"] = [{"mediaType": media_type, "digest": sha(stored), "size": len(stored)}]
    manifest["config"].update(digest=sha(cdata), size=len(cdata))
    mdata = json.dumps(manifest).encode()
    (layout / "blobs" / "sha256" / sha(mdata).split(":")[1]).write_bytes(mdata)
    index["manifests"][0].update(digest=sha(mdata), size=len(mdata))
    (layout / "index.json").write_text(json.dumps(index))
    return layout, len(stored)


def test_a_zstd_bomb_layer_is_refused_past_its_expansion_bound(tmp_path, monkeypatch):
    """64 MiB of zeros in a zstd layer of a few KiB (thousands to one). With the floor lowered to 1 MiB
    (1 GiB in production, which would make the test slow), the bound is MAX_EXPANSION x the stored
    size: refused, naming the layer, nothing written. The real zstd inflates it."""
    layout, stored = bomb_layout(tmp_path / "zstd", "application/vnd.oci.image.layer.v1.tar+zstd", zstd)
    assert (64 << 20) > layers.MAX_EXPANSION * stored, "the bomb must pass the ratio"
    monkeypatch.setattr(layers, "MIN_EXPANSION_BYTES", 1 << 20)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ImagekitError, match="decompression bomb") as info:
        export_image(f"oci:{layout}", ExportRequest("enroot"), out / "x.sqsh", store=False)
    assert "layer 1 of" in str(info.value)
    assert list(out.iterdir()) == []


def test_gzip_at_its_highest_ratio_is_within_the_bound(tmp_path, monkeypatch):
    """gzip cannot pass 1032:1, so the same zeros as a gzip layer export (the bound is for zstd)."""
    layout, stored = bomb_layout(tmp_path / "gzip", LAYER_GZIP, lambda d: gzip.compress(d, 9, mtime=0))
    assert (64 << 20) / stored < layers.MAX_EXPANSION
    monkeypatch.setattr(layers, "MIN_EXPANSION_BYTES", 1 << 20)
    res = export_image(f"oci:{layout}", ExportRequest("enroot", preset="fast"), tmp_path / "x.sqsh", store=False)
    assert Path(res.path).stat().st_size > 0
