"""Layered images made by the tests, written as an OCI layout, an OCI archive and a ``docker save``
tarball, so that every export source can read the same image (and ``docker load`` puts it in the
engine). Layers are lists of members: ``("f", path, data[, mode])``, ``("d", path[, mode])``,
``("l", path, target)`` (symlink), ``("h", path, target)`` (hard link)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


def layer_tar(members: list[tuple]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, path, *rest in members:
            info = tarfile.TarInfo(path)
            info.mtime = 1_700_000_000
            data = None
            if kind == "f":
                payload = rest[0]
                info.size, info.mode = len(payload), (rest[1] if len(rest) > 1 else 0o644)
                data = io.BytesIO(payload)
            elif kind == "d":
                info.type, info.mode = tarfile.DIRTYPE, (rest[0] if rest else 0o755)
            elif kind == "l":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, rest[0], 0o777
            elif kind == "h":
                info.type, info.linkname, info.mode = tarfile.LNKTYPE, rest[0], 0o644
            tar.addfile(info, data)
    return buf.getvalue()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def config_for(tars: list[bytes], env: list[str] | None = None) -> bytes:
    return json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   "Cmd": ["/bin/sh"], "Labels": {"org.example.test": "layered"}},
        "rootfs": {"type": "layers", "diff_ids": [sha(t) for t in tars]},
        "history": [{"created_by": f"layer {i}"} for i in range(len(tars))],
    }, sort_keys=True).encode()


def oci_layout(root: Path, layers: list[list[tuple]], tag: str = "1", *, media_type: str = LAYER_GZIP,
               config: bytes | None = None) -> Path:
    """An OCI image layout directory holding one image tagged ``tag``; returns ``root``."""
    tars = [layer_tar(m) for m in layers]
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def put(data: bytes) -> str:
        digest = sha(data)
        (blobs / digest.split(":")[1]).write_bytes(data)
        return digest

    config = config if config is not None else config_for(tars)
    descs = []
    for t in tars:
        stored = gzip.compress(t, mtime=0) if media_type.endswith("+gzip") else t
        descs.append({"mediaType": media_type, "digest": put(stored), "size": len(stored)})
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": put(config), "size": len(config)},
                           "layers": descs}).encode()
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": put(manifest),
         "size": len(manifest), "annotations": {"org.opencontainers.image.ref.name": tag}}]}))
    return root


def docker_archive(path: Path, layers: list[list[tuple]], repo_tag: str) -> Path:
    """A ``docker save`` tarball (the format Docker 20.10 writes) of the same image."""
    tars = [layer_tar(m) for m in layers]
    config = config_for(tars)
    with tarfile.open(path, "w") as out:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))

        names = []
        for i, t in enumerate(tars):
            name = f"{hashlib.sha256(b'%d' % i + t).hexdigest()}/layer.tar"
            add(name, t)
            names.append(name)
        config_name = f"{sha(config).split(':')[1]}.json"
        add(config_name, config)
        add("manifest.json", json.dumps([{"Config": config_name, "RepoTags": [repo_tag],
                                          "Layers": names}]).encode())
    return path
