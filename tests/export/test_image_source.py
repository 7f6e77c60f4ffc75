"""Exports with no engine: a registry, an OCI layout, an OCI archive and a ``docker save`` tarball give
the file tree the engine's ``docker export`` gives (names, types, modes, owners, contents, symlinks,
hard links), for hostile layered images built here and for the shipped offline images; and each bad
input gets one clear error with nothing written."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from imagekit.util.errors import ImagekitError
from imagekit.export import ExportRequest, export_image, image_source

from helpers.layered import docker_archive, oci_layout

pytestmark = pytest.mark.engine

# Every rule the merge must follow that Docker 20.10's overlay2 also accepts on `docker load` (it
# refuses a hard link into a lower layer; test_layers.py covers those against the spec).
HOSTILE = [
    [("d", "bin"), ("f", "bin/sh", b"#!x\n", 0o755), ("d", "a"), ("f", "a/x", b"x"), ("f", "a/y", b"y"),
     ("d", "d"), ("f", "d/1", b"1"), ("d", "o", 0o700), ("f", "o/old", b"old"), ("f", "f", b"0"),
     ("d", "m", 0o700), ("f", "m/a", b"a"), ("d", "etc", 0o750), ("f", "etc/hosts", b"127.0.0.1 image\n"),
     ("d", "proc", 0o555), ("d", "w"), ("d", "w/sub"), ("f", "w/sub/file", b"gone")],
    [("f", "a/.wh.x", b""), ("f", ".wh.d", b""), ("d", "o", 0o750), ("f", "o/.wh..wh..opq", b""),
     ("f", "o/new", b"new"), ("d", "f"), ("f", "f/inner", b"i"), ("d", "m", 0o751), ("f", "m/b", b"b"),
     ("d", "s"), ("f", "s/one", b"1"), ("h", "s/two", "s/one"), ("h", "s/three", "s/one"),
     ("f", "w/.wh.sub", b""), ("f", "w/sub", b"a file where a directory was")],
    [("f", "f", b"2"), ("f", "s/.wh.one", b""), ("l", "m/sym", "../a/y"), ("d", "dir-then-file"),
     ("f", "w/.wh.sub", b""), ("d", "w/sub", 0o711), ("f", "w/sub/again", b"back")],
]


def tree(sqsh: str | Path, where: Path) -> dict[str, tuple]:
    """Every path of a squashfs with its type, mode, owner, content hash or link target, and its
    hard-link group (the sorted names sharing its inode)."""
    root = where / f"unpacked-{Path(sqsh).name}"
    subprocess.run(["unsquashfs", "-quiet", "-no-progress", "-d", str(root), str(sqsh)], check=True,
                   capture_output=True)
    inodes: dict[int, list[str]] = {}
    out: dict[str, tuple] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = os.lstat(path)
            if os.path.islink(path):
                what = ("link", os.readlink(path))
            elif path.is_dir():
                what = ("dir",)
            else:
                what = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
                inodes.setdefault(st.st_ino, []).append(rel)
            out[rel] = (*what, oct(st.st_mode), st.st_uid, st.st_gid)
    for names in inodes.values():
        if len(names) > 1:
            for n in names:
                out[n] = (*out[n], tuple(sorted(names)))
    shutil.rmtree(root)
    return out


def exported(source: str, out: Path) -> str:
    return export_image(source, ExportRequest("enroot", preset="none", force=True), out, store=False).path


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, registry, docker_bin):
    """The hostile image in every form: the engine (docker load), a registry, an OCI layout, an OCI
    archive and a docker save tarball."""
    where = tmp_path_factory.mktemp("layered")
    archive = docker_archive(where / "hostile.tar", HOSTILE, "imagekit-test/layered:1")
    subprocess.run([docker_bin, "load", "-i", str(archive)], check=True, capture_output=True)
    layout = oci_layout(where / "layout", HOSTILE, tag="1")
    with tarfile.open(where / "hostile-oci.tar", "w") as tar:
        for item in sorted(layout.iterdir()):
            tar.add(item, arcname=item.name)
    remote = f"{registry}/imagekit-test/layered:1"
    subprocess.run([docker_bin, "tag", "imagekit-test/layered:1", remote], check=True)
    subprocess.run([docker_bin, "push", remote], check=True, capture_output=True)
    yield {"engine": "imagekit-test/layered:1", "registry": f"docker://{remote}",
           "enroot-form": f"{registry}#imagekit-test/layered:1", "oci": f"oci:{layout}:1",
           "oci-archive": f"oci-archive:{where / 'hostile-oci.tar'}",
           "docker-archive": f"docker-archive:{archive}:imagekit-test/layered:1"}
    subprocess.run([docker_bin, "rmi", "imagekit-test/layered:1", remote], capture_output=True)


def test_every_source_gives_the_engines_tree_of_a_hostile_layered_image(hostile, tmp_path):
    want = tree(exported(hostile["engine"], tmp_path / "engine.sqsh"), tmp_path)
    assert want["w/sub/again"][0] == "file" and "w/sub/file" not in want and "a/x" not in want
    assert want["s/two"][-1] == ("s/three", "s/two"), "the hard link outlived its deleted first name"
    for kind in ("registry", "enroot-form", "oci", "oci-archive", "docker-archive"):
        got = tree(exported(hostile[kind], tmp_path / f"{kind}.sqsh"), tmp_path)
        assert got == want, (kind, {k: (got.get(k), want.get(k)) for k in set(got) ^ set(want) | {
            k for k in set(got) & set(want) if got[k] != want[k]}})


def test_every_source_has_the_engines_image_id_so_the_store_meets_one_conversion(hostile, tmp_path):
    ids = {kind: image_source.open_source(text).image_id() for kind, text in hostile.items()}
    assert len(set(ids.values())) == 1, ids
    first = export_image(hostile["engine"], ExportRequest("enroot"), tmp_path / "a.sqsh")
    again = export_image(hostile["registry"], ExportRequest("enroot"), tmp_path / "b.sqsh")
    assert not first.store_hit and again.store_hit and again.sha256 == first.sha256


def test_shipped_images_from_the_registry_match_the_engine(mpi_image, cuda_images, registry, docker_bin, tmp_path):
    """debian-mpi and debian-cuda's runtime, pushed to a real registry and converted from it."""
    for image in (mpi_image, cuda_images[0]):
        remote = f"{registry}/shipped/{image.split('/')[-1]}"
        subprocess.run([docker_bin, "tag", image, remote], check=True)
        subprocess.run([docker_bin, "push", remote], check=True, capture_output=True)
        want = tree(exported(image, tmp_path / "engine.sqsh"), tmp_path)
        got = tree(exported(f"docker://{remote}", tmp_path / "registry.sqsh"), tmp_path)
        assert got == want, (image, sorted(set(got) ^ set(want))[:20],
                             [(k, got[k], want[k]) for k in set(got) & set(want) if got[k] != want[k]][:20])
        subprocess.run([docker_bin, "rmi", remote], capture_output=True)


def test_sif_from_an_oci_layout_matches_the_engines(hostile, tmp_path):
    engine_sif = export_image(hostile["engine"], ExportRequest("sif"), tmp_path / "e.sif", store=False)
    layout_sif = export_image(hostile["oci"], ExportRequest("sif"), tmp_path / "o.sif", store=False)
    from imagekit.export.sif import read_sif

    assert read_sif(layout_sif.path).primary_partition().size > 0
    assert engine_sif.bytes > 0 and layout_sif.bytes > 0


# --- bad input: one clear error, nothing written ----------------------------------------------------------

def _fails(text: str, out: Path, match: str, **kw) -> None:
    with pytest.raises(ImagekitError, match=match):
        export_image(text, ExportRequest("enroot", **kw), out, store=False)
    assert not out.exists() and not list(out.parent.glob(f".{out.name}*")), list(out.parent.iterdir())


def test_a_reference_the_registry_does_not_have(registry, tmp_path):
    _fails(f"docker://{registry}/imagekit-test/nothing:1", tmp_path / "x.sqsh", "nothing")


def test_a_platform_missing_from_the_image(hostile, tmp_path):
    _fails(hostile["oci"], tmp_path / "x.sqsh", "has no linux/arm64 image", platform="linux/arm64")


def test_a_layer_whose_digest_does_not_match(tmp_path):
    layout = oci_layout(tmp_path / "layout", [[("f", "a", b"a" * 4096)], [("f", "b", b"b")]])
    manifest_layers = sorted((layout / "blobs" / "sha256").iterdir(), key=lambda p: p.stat().st_size)
    import gzip
    import json

    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((layout / "blobs" / "sha256" / index["manifests"][0]["digest"].split(":")[1]).read_bytes())
    victim = layout / "blobs" / "sha256" / manifest["layers"][0]["digest"].split(":")[1]
    victim.write_bytes(gzip.compress(b"\0" * len(victim.read_bytes())))
    assert manifest_layers
    _fails(f"oci:{layout}", tmp_path / "x.sqsh", "is damaged")


def test_a_media_type_that_is_not_a_layer(tmp_path):
    layout = oci_layout(tmp_path / "layout", [[("f", "a", b"a")]],
                        media_type="application/vnd.cncf.helm.chart.content.v1.tar+gzip")
    _fails(f"oci:{layout}", tmp_path / "x.sqsh", "not a container image layer")


def test_an_artifact_is_not_an_image(tmp_path):
    import json

    layout = oci_layout(tmp_path / "layout", [[("f", "a", b"a")]])
    index = json.loads((layout / "index.json").read_text())
    blob = layout / "blobs" / "sha256" / index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads(blob.read_bytes())
    manifest["config"]["mediaType"] = "application/vnd.cncf.helm.config.v1+json"
    data = json.dumps(manifest).encode()
    new = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / new).write_bytes(data)
    index["manifests"][0].update(digest=f"sha256:{new}", size=len(data))
    (layout / "index.json").write_text(json.dumps(index))
    _fails(f"oci:{layout}", tmp_path / "x.sqsh", "not a container image")


def test_a_layout_without_that_tag_names_the_tags_it_has(tmp_path):
    layout = oci_layout(tmp_path / "layout", [[("f", "a", b"a")]], tag="v1")
    _fails(f"oci:{layout}:v2", tmp_path / "x.sqsh", r"no image tagged 'v2' \(it has: v1\)")


@pytest.fixture(scope="module")
def own_registry(tmp_path_factory):
    """A real registry whose storage the test can reach (to damage a blob the way a failing disk
    or a tampering mirror would; the registry checks digests on push, so nothing else can)."""
    from helpers.local_registry import running_registry

    root = tmp_path_factory.mktemp("own-registry")
    with running_registry(root) as addr:
        yield addr, root


def _client(addr: str, tmp_path: Path):
    from imagekit.registry import RegistryClient

    return RegistryClient(addr, env={"HOME": str(tmp_path), "ENROOT_CONFIG_PATH": str(tmp_path / "enroot"),
                                     "DOCKER_CONFIG": str(tmp_path / "docker")})


def test_a_platform_missing_from_the_registry_index(own_registry, tmp_path):
    from helpers.local_registry import push_test_image

    addr, _ = own_registry
    push_test_image(_client(addr, tmp_path), "t/multi", "1", architectures=("amd64", "arm64"))
    _fails(f"docker://{addr}/t/multi:1", tmp_path / "x.sqsh", r"no linux/riscv64 image \(it has: linux/amd64, linux/arm64\)",
           platform="linux/riscv64")


def test_a_registry_layer_whose_bytes_do_not_match_its_digest(own_registry, tmp_path):
    """The registry serves a layer of the right length with other bytes (still a valid tar): the
    digest, checked as the layer streams, is the only thing that tells."""
    import json

    from helpers.local_registry import blob_path, push_test_image

    addr, root = own_registry
    client = _client(addr, tmp_path)
    pushed = push_test_image(client, "t/damaged", "1", payload=b"the real payload\n")
    manifest = json.loads(client.get_manifest("t/damaged", pushed["digest"]).body)
    layer = manifest["layers"][0]["digest"]
    data = blob_path(root, layer)
    body = data.read_bytes()
    data.write_bytes(body.replace(b"the real payload", b"the fake payload", 1))
    _fails(f"docker://{addr}/t/damaged:1", tmp_path / "x.sqsh", f"blob {layer} arrived as sha256:")
