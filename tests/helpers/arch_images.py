"""Small images of a chosen architecture, made by the tests without emulation.

An index's logic (which manifest a node gets, which artifact names which manifest) does not run
the image: a one-layer image whose config says ``arm64`` is an arm64 image to the engine, the
registry, the importer and Enroot. It is loaded as a docker-archive (:mod:`imagekit.util.docker_archive`,
what ``imagekit base --arch`` uses), in well under a second. The tests that run arm64 programs use
the real emulated builds (conftest's ``base_image_arm64``, ``mpi_image_arm64``).
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from imagekit.util import docker_archive
from imagekit.engines import docker as engine


def make(tag: str, architecture: str, tmp: Path, note: str = "", labels: dict[str, str] | None = None) -> str:
    """Load a one-layer ``architecture`` image tagged ``tag`` (``/etc/imagekit-test-arch`` says
    which; ``labels`` added to its own); returns its image ID."""
    layer = tmp / f"{architecture}-layer.tar"
    with tarfile.open(layer, "w") as tar:
        for name, text in (("etc/imagekit-test-arch", f"{architecture} {note}\n"),
                           ("bin/placeholder", "not a program\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    config = docker_archive.ImageConfig(
        architecture=architecture, diff_id=docker_archive.sha256_file(layer), created="2026-01-01T00:00:00Z",
        cmd=["/bin/sh"], env=["PATH=/bin"],
        labels={"io.imagekit.test": f"arch-{architecture}{' ' + note if note else ''}", **(labels or {})},
        history="tests/helpers/arch_images.py").document()
    buf = io.BytesIO()
    image_id = docker_archive.write(buf, layer, config)
    docker = engine.docker_cli()
    subprocess.run([docker, "load"], input=buf.getvalue(), capture_output=True, check=True)
    subprocess.run([docker, "tag", image_id, tag], capture_output=True, check=True)
    return image_id
