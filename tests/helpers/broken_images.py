"""Broken copies of a real image, for showing that a check catches a breakage: the image with one
thing removed or added. Both ways keep the image's labels, so the checks travel with the copy."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from imagekit.engines import docker as engine


def broken_copy(image: str, script: str, tag: str, directory: Path, add: Path | None = None) -> str:
    """``image`` with ``script`` run in one more layer (one command a line: no continuations), tagged
    ``tag``; the file ``add`` (inside ``directory``) is at /tmp/add/ for the script."""
    directory.mkdir(parents=True, exist_ok=True)
    copy = f"COPY {add.name} /tmp/add/{add.name}\n" if add else ""
    (directory / "Dockerfile").write_text(f"FROM {image}\n{copy}RUN {script.strip().replace(chr(10), ' && ')}\n")
    proc = subprocess.run([engine.docker_cli(), "build", "-q", "-t", tag, str(directory)], capture_output=True,
                          text=True, env={**os.environ, "DOCKER_BUILDKIT": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tag


def committed_copy(image: str, tag: str, script: str) -> str:
    """``image`` after ``script`` ran in a container of it, committed as ``tag`` (for scripts that
    need no build context; the entrypoint is replaced, so an image's own entrypoint cannot interfere)."""
    cli = engine.docker_cli()
    cid = subprocess.run([cli, "create", "--entrypoint", "/bin/sh", image, "-c", script],
                         check=True, capture_output=True, text=True).stdout.strip()
    try:
        subprocess.run([cli, "start", "-a", cid], check=True, capture_output=True)
        subprocess.run([cli, "commit", cid, tag], check=True, capture_output=True)
    finally:
        subprocess.run([cli, "rm", "-f", cid], capture_output=True)
    return tag
