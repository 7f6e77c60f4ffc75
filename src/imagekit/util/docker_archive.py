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
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Mapping, Sequence

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


@dataclass(frozen=True)
class ImageConfig:
    """A one-layer image's config: ``diff_id`` is the layer tar's digest, ``history`` its one entry."""

    architecture: str
    diff_id: str
    created: str
    cmd: Sequence[str]
    env: Sequence[str]
    labels: Mapping[str, str]
    history: str
    variant: str | None = None

    def document(self) -> dict:
        """The image config (OCI image-spec's, which Docker's is a superset of)."""
        doc = {
            "architecture": self.architecture, "os": "linux", "created": self.created,
            "config": {"Cmd": list(self.cmd), "Env": list(self.env), "Labels": dict(self.labels)},
            "rootfs": {"type": "layers", "diff_ids": [self.diff_id]},
            "history": [{"created": self.created, "created_by": self.history}],
        }
        if self.variant:
            doc["variant"] = self.variant
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
