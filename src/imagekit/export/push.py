"""Push an image to a registry and name it the way Pyxis/Enroot want it.

Pyxis passes ``--container-image`` to ``enroot import docker://…``, whose
reference syntax separates the registry with ``#``: ``registry#repo:tag``
(Enroot's reg_registry/reg_image/reg_tag patterns in src/docker.sh). A plain
``registry/repo:tag`` would be read as a Docker Hub repository.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import asdict, dataclass

from imagekit import engine
from imagekit.errors import EngineError, UsageError

DIGEST_RE = re.compile(r"digest: (sha256:[0-9a-f]{64}) size: (\d+)")


@dataclass
class PushResult:
    image: str
    reference: str        # registry/repo:tag as Docker names it
    digest: str           # manifest digest reported by the registry
    size: int             # manifest size in bytes
    pyxis: str            # registry#repo:tag for srun --container-image
    pinned: str           # registry/repo@digest

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def split_reference(ref: str) -> tuple[str, str, str]:
    """``host[:port]/repo[:tag]`` → (registry, repo, tag); the registry part is required."""
    first, sep, rest = ref.partition("/")
    if not sep or not ("." in first or ":" in first or first == "localhost"):
        raise UsageError(f"{ref!r} does not name a registry",
                         "use REGISTRY/REPO[:TAG], e.g. 127.0.0.1:5000/hpc/mpi:1.0")
    repo, tag = rest, "latest"
    if ":" in rest.rsplit("/", 1)[-1]:
        repo, tag = rest.rsplit(":", 1)
    if not repo or not re.fullmatch(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*", repo):
        raise UsageError(f"bad repository name {repo!r} in {ref!r}",
                         "repository names are lower case: letters, digits, . _ - /")
    return first, repo, tag


def pyxis_reference(registry: str, repo: str, tag: str) -> str:
    return f"{registry}#{repo}:{tag}"


def push_image(image: str, to: str | None = None, log=None) -> PushResult:
    """Tag ``image`` as ``to`` (default: the image's own name, which must include a registry),
    push it, and return the digest the registry reported."""
    target = to or image
    registry, repo, tag = split_reference(target)
    reference = f"{registry}/{repo}:{tag}"
    docker = engine.docker_cli()
    if reference != image:
        tagged = subprocess.run([docker, "tag", image, reference], capture_output=True, text=True)
        if tagged.returncode != 0:
            raise EngineError(f"docker tag {image} {reference} failed: {tagged.stderr.strip()}",
                              "check the image name with `docker images`")
    proc = subprocess.Popen([docker, "push", reference], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip())
        if log is not None:
            log(line.rstrip())
    rc = proc.wait()
    output = "\n".join(lines)
    if rc != 0:
        hint = None
        if "http response to https client" in output.lower():
            hint = (f"the engine treats {registry} as a TLS registry: add it to "
                    "insecure-registries in /etc/docker/daemon.json, or use 127.0.0.1")
        elif "connection refused" in output.lower():
            hint = f"is a registry listening on {registry}?"
        raise EngineError(f"docker push {reference} failed: {lines[-1] if lines else 'no output'}", hint)
    match = DIGEST_RE.search(output)
    if match is None:
        raise EngineError(f"docker push {reference} printed no digest", "check the engine's output")
    digest = match.group(1)
    return PushResult(image=image, reference=reference, digest=digest, size=int(match.group(2)),
                      pyxis=pyxis_reference(registry, repo, tag),
                      pinned=f"{registry}/{repo}@{digest}")
