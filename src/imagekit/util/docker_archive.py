"""Write a one-layer image as a ``docker save`` tarball (docker-archive), for ``docker load``.

``docker import`` records the engine's own architecture in the image config and Debian's Docker
20.10 ignores ``--platform`` there unless the daemon runs in experimental mode, so an arm64 root
filesystem imported on an x86 machine would claim to be amd64 and BuildKit would refuse to use it
for ``--platform linux/arm64``. A docker-archive states the config itself: ``manifest.json``, the
config JSON (architecture, os, Cmd, Env, Labels, the layer's diff ID) and the layer tar. Docker and
Podman both load it.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from pathlib import Path
from typing import IO, Mapping, Sequence

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def config(*, architecture: str, diff_id: str, created: str, cmd: Sequence[str], env: Sequence[str],
           labels: Mapping[str, str], history: str, variant: str | None = None) -> dict:
    """The image config (OCI image-spec's, which Docker's is a superset of)."""
    doc = {
        "architecture": architecture, "os": "linux", "created": created,
        "config": {"Cmd": list(cmd), "Env": list(env), "Labels": dict(labels)},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": history}],
    }
    if variant:
        doc["variant"] = variant
    return doc


def write(out: IO[bytes], layer: Path, image_config: Mapping) -> str:
    """Stream the archive of ``layer`` (an uncompressed tar) and ``image_config`` into ``out``.
    Returns the image ID (the config's digest), which ``docker load`` prints back."""
    body = json.dumps(image_config, sort_keys=True, separators=(",", ":")).encode()
    image_id = "sha256:" + hashlib.sha256(body).hexdigest()
    config_name = f"{image_id.split(':', 1)[1]}.json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": None, "Layers": ["layer/layer.tar"]}]).encode()
    now = int(time.time())
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for name, data in ((config_name, body), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), now, 0o644
            tar.addfile(info, io.BytesIO(data))
        folder = tarfile.TarInfo("layer")
        folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, now
        tar.addfile(folder)
        info = tarfile.TarInfo("layer/layer.tar")
        info.size, info.mtime, info.mode = layer.stat().st_size, now, 0o644
        with open(layer, "rb") as fh:
            tar.addfile(info, fh)
    return image_id
