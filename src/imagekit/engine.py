"""The one place that talks to the Docker engine.

imagekit uses the Engine API (``docker`` package) for queries and Debian's
``/usr/bin/docker`` CLI where streaming through a pipe is simpler (import,
BuildKit builds). ``/usr/local/bin/docker`` on some machines lacks the buildx
plugin and refuses BuildKit builds, so the CLI is resolved explicitly.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

from imagekit.errors import EngineError

SETUP_HINT = "run `bash scripts/setup-engine.sh` (installs Debian's docker.io and starts dockerd)"


@functools.lru_cache(maxsize=1)
def client():
    """A connected ``docker.DockerClient``; raises EngineError with the fix if none answers."""
    import docker  # heavy: imported only when an engine is needed

    try:
        c = docker.from_env(timeout=600)
        c.ping()
    except Exception as exc:  # docker raises several unrelated types here
        raise EngineError(f"no Docker engine answers ({_short(exc)})", SETUP_HINT) from None
    from imagekit import owners

    try:
        owners.sweep_engine(c)  # containers and networks of imagekit runs that were killed
    except Exception:  # noqa: BLE001 - sweeping is best effort; the command goes on
        pass
    return c


def docker_cli() -> str:
    """Path of a docker CLI that can run BuildKit builds (Debian's, with BuildKit built in)."""
    override = os.environ.get("IMAGEKIT_DOCKER")
    for candidate in ([override] if override else []) + ["/usr/bin/docker"]:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("docker")
    if found is None:
        raise EngineError("no docker client found", SETUP_HINT)
    return found


def image_exists(ref: str) -> bool:
    import docker.errors

    try:
        client().images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def image_labels(ref: str) -> dict[str, str]:
    """The image's labels; EngineError naming the image when it is not there."""
    import docker.errors

    try:
        return dict(client().images.get(ref).labels or {})
    except docker.errors.ImageNotFound:
        raise EngineError(f"image {ref!r} not found in the local engine",
                          "build it with `imagekit build STACK` or pull it first") from None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1][:200] if text else type(exc).__name__
