"""Offline stand-ins for the images Pyxis's own tests pull, and imagekit's extra images beside them.

Pyxis 0.24.0's bats suite (tests/*.bats in the source) names Docker Hub and NGC images; none is
reachable here. Each stand-in is built from the locally bootstrapped Debian base, cut down and
flattened into one layer (a native start re-imports the image every time: the smaller, the
faster), with the image config its tests look at: ``Env`` (``PATH``, ``CUDA_VERSION``,
``LD_LIBRARY_PATH``), ``Entrypoint``, ``WorkingDir``, labels, and the files they run. The Ubuntu
ones carry an Ubuntu-like ``/etc/profile`` (Ubuntu's sets no ``PATH``; Debian's resets it) and
say which release they stand for in ``/etc/os-release``, as the tests grep it.

imagekit's own images (``imagekit-extra/*``) are the cases of issue 34: a Debian base whose
``/etc/profile`` resets the ``ENV PATH`` (``debianpath``), an image whose profile.d script puts a
tool on ``PATH`` (``profiled``), and security-3's G5 (``ps4``: ``PS4`` with a command in it and
``SHELLOPTS=xtrace``).

Tags are keyed by the stand-ins' text and the base's image ID, so a changed definition builds anew
and an unchanged one is reused across sessions.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.engines import docker as engine
from imagekit.export.tarstream import normalise

TAG = "imagekit-test/pyxis-standin"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the slim root filesystem leaves out of the Debian base (none of it is run by the tests), and
# what `docker export` adds to every container (Docker's init layer: no image has it).
SLIM_DROP = ("usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/zoneinfo/",
             "usr/share/common-licenses/", "usr/share/lintian/", "var/cache/", "var/lib/apt/lists/",
             "var/log/", "usr/lib/x86_64-linux-gnu/gconv/")
DOCKER_MADE = (".dockerenv", "etc/hosts", "etc/hostname", "etc/resolv.conf", "etc/mtab")

# Ubuntu's /etc/profile as its base-files documents it: no PATH of its own, PS1 for interactive
# shells, then every readable /etc/profile.d/*.sh.
UBUNTU_PROFILE = """\
# /etc/profile: an Ubuntu-like profile (imagekit's Pyxis-suite stand-in): PATH stays the image's.
if [ "${PS1-}" ]; then
  if [ "$(id -u)" -eq 0 ]; then PS1='# '; else PS1='$ '; fi
fi
if [ -d /etc/profile.d ]; then
  for i in /etc/profile.d/*.sh; do
    if [ -r "$i" ]; then . "$i"; fi
  done
  unset i
fi
"""
CUDA_BANNER = """\
#!/bin/bash
# Stand-in for NVIDIA's entrypoint: the banner, then the command.
echo
echo "=========="
echo "== CUDA =="
echo "=========="
echo
echo "CUDA Version ${CUDA_VERSION}"
exec "$@"
"""
DIND_ENTRYPOINT = """\
#!/bin/sh
# Stand-in for docker-library's docker:*-dind-rootless entrypoint: only its DOCKER_HOST choice.
set -e
if [ -z "${DOCKER_HOST:-}" ]; then
  if [ -n "${DOCKER_TLS_VERIFY:-}" ]; then export DOCKER_HOST=tcp://docker:2376; else export DOCKER_HOST=tcp://docker:2375; fi
fi
exec "$@"
"""


def stub(says: str) -> str:
    return f"#!/bin/sh\necho '{says}'\n"


@dataclass(frozen=True)
class StandIn:
    """One image: its name in the tests (``REPO:TAG``), what it is built from, and its Dockerfile lines
    (``files`` go into the build context under their base names)."""

    name: str
    parent: str                           # "slim" or another stand-in's name
    lines: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)

    @property
    def repo(self) -> str:
        return self.name.rsplit(":", 1)[0]


def _ubuntu(release: str) -> StandIn:
    return StandIn(f"ubuntu:{release}", "slim", (
        "COPY profile /etc/profile",
        f"RUN echo 'PYXIS_STANDIN=\"Ubuntu {release}\"' >> /usr/lib/os-release",
        f"ENV PATH={SYSTEM_PATH}",
        f'LABEL org.opencontainers.image.ref.name=ubuntu org.opencontainers.image.version="{release}"',
        'CMD ["/bin/bash"]'), {"profile": UBUNTU_PROFILE})


def _cuda(name: str, version: str) -> StandIn:
    # NVIDIA's ENV without NVIDIA_VISIBLE_DEVICES/NVIDIA_DRIVER_CAPABILITIES: on a node with no GPU
    # Enroot's nvidia hook refuses an image that asks for one.
    return StandIn(name, "ubuntu:24.04", (
        "COPY nvidia_entrypoint.sh /opt/nvidia/nvidia_entrypoint.sh",
        "RUN chmod 755 /opt/nvidia/nvidia_entrypoint.sh",
        f"ENV CUDA_VERSION={version} LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64 "
        f"PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:{SYSTEM_PATH} NVIDIA_REQUIRE_CUDA=cuda>={version[:4]}",
        'ENTRYPOINT ["/opt/nvidia/nvidia_entrypoint.sh"]'), {"nvidia_entrypoint.sh": CUDA_BANNER})


STANDINS = {s.name: s for s in [
    _ubuntu("18.04"), _ubuntu("22.04"), _ubuntu("24.04"),
    _cuda("nvidia/cuda:11.8.0-base-ubuntu22.04", "11.8.0"),
    _cuda("nvidia/cuda:12.5.1-runtime-ubuntu24.04", "12.5.1"),
    StandIn("nvidia/pytorch:20.02-py3", "nvidia/cuda:11.8.0-base-ubuntu22.04",
            ("ENV PYTORCH_VERSION=1.5.0a0", "WORKDIR /workspace")),
    StandIn("rabbitmq:3.8.3", "ubuntu:24.04", (
        "COPY rabbitmqctl /opt/rabbitmq/sbin/rabbitmqctl", "RUN chmod 755 /opt/rabbitmq/sbin/rabbitmqctl",
        f"ENV PATH=/opt/rabbitmq/sbin:{SYSTEM_PATH}"), {"rabbitmqctl": stub("RabbitMQ 3.8.3")}),
    StandIn("redis:5.0.8", "ubuntu:24.04", (
        "COPY redis-server /usr/local/bin/redis-server", "RUN chmod 755 /usr/local/bin/redis-server",
        "WORKDIR /data", 'VOLUME ["/data"]'), {"redis-server": stub("Redis server v=5.0.8")}),
    StandIn("docker:26.1.0-dind-rootless", "ubuntu:24.04", (
        "COPY dockerd-entrypoint.sh /usr/local/bin/dockerd-entrypoint.sh",
        "RUN chmod 755 /usr/local/bin/dockerd-entrypoint.sh && useradd -u 1000 -m rootless",
        "ENV DOCKER_TLS_CERTDIR=/certs", 'ENTRYPOINT ["/usr/local/bin/dockerd-entrypoint.sh"]', "CMD []"),
            {"dockerd-entrypoint.sh": DIND_ENTRYPOINT}),
    # imagekit's cases (issue 34): Debian's own /etc/profile (which resets PATH) under each of them.
    StandIn("imagekit-extra/debianpath:1", "slim", (
        "COPY apptool /opt/app/bin/apptool", "RUN chmod 755 /opt/app/bin/apptool",
        f"ENV PATH=/opt/app/bin:{SYSTEM_PATH}", 'CMD ["/bin/bash"]'), {"apptool": stub("apptool-ok")}),
    StandIn("imagekit-extra/profiled:1", "ubuntu:24.04", (
        "COPY sitetool /opt/sitetool/bin/sitetool", "RUN chmod 755 /opt/sitetool/bin/sitetool",
        "COPY 50-sitetool.sh /etc/profile.d/50-sitetool.sh"),
            {"sitetool": stub("sitetool-ok"),
             "50-sitetool.sh": 'export PATH="/opt/sitetool/bin:$PATH"\nexport SITETOOL_HOME=/opt/sitetool\n'}),
    StandIn("imagekit-extra/ps4:1", "slim", (
        "ENV PS4='$(touch /tmp/imagekit-ps4-ran)+ ' SHELLOPTS=xtrace", 'CMD ["/bin/bash"]')),
]}


def _docker(*args: str, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run([engine.docker_cli(), *args], **kw)


def _exists(tag: str) -> bool:
    return _docker("image", "inspect", tag).returncode == 0


def _key(base_id: str) -> str:
    text = json.dumps([base_id, SLIM_DROP, DOCKER_MADE, [(s.name, s.parent, s.lines, s.files)
                                                         for s in STANDINS.values()]], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _flatten(base_image: str, tag: str) -> None:
    """The base's root filesystem, less :data:`SLIM_DROP` and Docker's own files, as one layer."""
    created = _docker("create", base_image, "true")
    assert created.returncode == 0, created.stderr
    cid = created.stdout.strip()
    try:
        exporter = subprocess.Popen([engine.docker_cli(), "export", cid], stdout=subprocess.PIPE)
        importer = subprocess.Popen([engine.docker_cli(), "import", "-c", 'CMD ["/bin/bash"]', "-", tag],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        with tarfile.open(fileobj=exporter.stdout, mode="r|") as src, \
                tarfile.open(fileobj=importer.stdin, mode="w|", format=tarfile.PAX_FORMAT) as dst:
            for member in src:
                name = normalise(member.name)
                if name in DOCKER_MADE or name.startswith("dev/") or \
                        any(name.startswith(d) and name != d.rstrip("/") for d in SLIM_DROP):
                    continue
                dst.addfile(member, src.extractfile(member) if member.isreg() else None)
        importer.stdin.close()
        assert exporter.wait() == 0 and importer.wait() == 0, "docker export | docker import failed"
    finally:
        _docker("rm", "-f", cid)


def build_all(base_image: str) -> dict[str, str]:
    """Every stand-in built (or reused), by its name in the tests: the engine's tags."""
    base_id = _docker("image", "inspect", "--format", "{{.Id}}", base_image).stdout.strip()
    key = _key(base_id)
    tags = {"slim": f"{TAG}:slim-{key}"}
    if not _exists(tags["slim"]):
        _flatten(base_image, tags["slim"])
    for standin in STANDINS.values():   # parents come first in the table
        tag = f"{TAG}:{standin.name.replace('/', '-').replace(':', '-')}-{key}"
        tags[standin.name] = tag
        if _exists(tag):
            continue
        with tempfile.TemporaryDirectory(prefix="imagekit-standin-") as ctx:
            for name, text in standin.files.items():
                Path(ctx, name).write_text(text)
            dockerfile = "\n".join([f"FROM {tags[standin.parent]}", *standin.lines]) + "\n"
            Path(ctx, "Dockerfile").write_text(dockerfile)
            proc = _docker("build", "-q", "-t", tag, ctx, env={**os.environ, "DOCKER_BUILDKIT": "1"})
            assert proc.returncode == 0, f"{standin.name}: {proc.stderr[-2000:]}"
    return {name: tag for name, tag in tags.items() if name != "slim"}


def push_all(tags: dict[str, str], registry: str) -> None:
    """Each stand-in pushed as ``REGISTRY/NAME`` (the engine speaks plain HTTP to a loopback registry)."""
    for name, tag in tags.items():
        ref = f"{registry}/{name}"
        assert _docker("tag", tag, ref).returncode == 0
        proc = _docker("push", ref)
        assert proc.returncode == 0, f"docker push {ref}: {proc.stdout[-500:]}{proc.stderr[-500:]}"
        _docker("rmi", ref)       # the pushed name only; the stand-in keeps its own tag

