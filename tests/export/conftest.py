"""Fixtures for the export tests: one small, awkward image built once per session."""

from __future__ import annotations

import io
import os
import subprocess
import textwrap

import pytest

ODD_TAG = "imagekit-test/export-odd:latest"

DOCKERFILE = textwrap.dedent("""\
    FROM {base}
    COPY rootfs/ /
    RUN ln -s /opt/data/file.txt /opt/data/link \\
     && ln /opt/data/file.txt /opt/data/hard \\
     && chmod 4755 /opt/data/suid && chmod 2755 /opt/data/sgid \\
     && chmod 0000 /opt/data/noperm && chmod 0070 /opt/data/groupx \\
     && mkdir -p /opt/ro/sub && chmod 0555 /opt/ro /opt/ro/sub \\
     && mkdir -p /opt/deep/1/2/3/4/5/6/7/8/9/10/11/12/13/14 \\
     && chmod 0555 /opt/deep/1/2/3/4/5/6/7 /opt/deep/1/2/3/4/5/6/7/8/9/10/11/12/13/14 \\
     && chown 1234:5678 /opt/data/file.txt \\
     && sed -i 's/^daemon:x:1:1:/daemon:x:1234:5678:/' /etc/passwd && sed -i 's/^daemon:x:1:/daemon:x:5678:/' /etc/group
    ENV GREETING="hello world" QUOTED="it's \\"quoted\\" \\$x \\\\ back" EMPTY=
    ENTRYPOINT ["/bin/echo", "ep arg", "it's"]
    CMD ["cmd one", "two"]
    WORKDIR /work dir
    VOLUME ["/scratch", "/data"]
    LABEL io.imagekit.test="yes" org.example.note="two words"
    """)


@pytest.fixture(scope="session")
def docker_bin() -> str:
    from imagekit.engines import docker as engine

    return engine.docker_cli()


@pytest.fixture(scope="session")
def odd_image(base_image: str, docker_bin: str, tmp_path_factory) -> str:
    """Symlinks, a hard link, setuid/setgid, unreadable files, read-only dirs, a file under
    dev/, ENV with spaces and quotes, ENTRYPOINT+CMD with arguments, WORKDIR, VOLUMEs, and a file
    whose owner the image names ``daemon`` with ids (1234:5678) that every Debian host gives another
    user (1:1): the engine's stream carries the image's names, which the squashfs tools would map
    through this host's passwd."""
    ctx = tmp_path_factory.mktemp("odd-ctx")
    root = ctx / "rootfs"
    (root / "opt/data").mkdir(parents=True)
    (root / "dev").mkdir()
    (root / "dev/testdev").write_text("must not be exported\n")
    (root / "opt/data/file.txt").write_text("payload\n")
    for name in ("suid", "sgid", "noperm", "groupx"):
        (root / "opt/data" / name).write_text(f"#!/bin/sh\necho {name}\n")
    (ctx / "Dockerfile").write_text(DOCKERFILE.format(base=base_image))
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    proc = subprocess.run([docker_bin, "build", "-q", "-t", ODD_TAG, str(ctx)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return ODD_TAG


@pytest.fixture(scope="session")
def make_image(base_image: str, docker_bin: str, tmp_path_factory):
    """``make_image(tag, **config)``: the base image with its config's fields replaced verbatim.

    A Dockerfile cannot write a newline or a NUL into a label, Env or Cmd, but an image can
    carry them (images come from anywhere): the image is saved once, its config JSON rewritten,
    and the archive loaded under ``tag``."""
    import json
    import tarfile

    work = tmp_path_factory.mktemp("make-image")
    saved = work / "base.tar"
    subprocess.run([docker_bin, "save", "-o", str(saved), base_image], check=True, capture_output=True)
    with tarfile.open(saved) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))[0]
        base_config = json.load(tar.extractfile(manifest["Config"]))
        layers = {name: tar.extractfile(name).read() for name in manifest["Layers"]}

    def make(tag: str, **fields) -> str:
        config = json.loads(json.dumps(base_config))
        config["config"].update(fields)
        blob = json.dumps(config).encode()
        out = work / "image.tar"
        with tarfile.open(out, "w") as tar:
            for name, data in [("config.json", blob),
                               ("manifest.json", json.dumps([{"Config": "config.json", "RepoTags": [tag],
                                                              "Layers": list(layers)}]).encode()),
                               *layers.items()]:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        subprocess.run([docker_bin, "load", "-q", "-i", str(out)], check=True, capture_output=True)
        out.unlink()
        return tag

    return make


@pytest.fixture
def small_fs(tmp_path):
    """``small_fs(size)``: a fresh tmpfs of ``size`` (e.g. "16m") mounted under tmp_path, a real
    small file system to fill up or to link across. Needs root (CI runs as root): fails in CI
    when it cannot mount, skips elsewhere."""
    mounted = []

    def mount(size: str = "16m"):
        point = tmp_path / f"small-fs-{len(mounted)}"
        point.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(point)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            if os.environ.get("CI"):
                pytest.fail(f"CI needs to mount a small tmpfs and cannot: {proc.stderr.strip()}", pytrace=False)
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


# Other users for the multi-user store and importer tests (numeric uids, Debian's python3): users.py
from helpers.users import other_python, shared_dir  # noqa: E402,F401
