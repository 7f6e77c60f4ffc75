"""An image ENV value over 128 KiB (issue 33, "not tried" by ../shared/reviews/security-3.md).

Linux starts no program whose environment holds one string over 131072 bytes (MAX_ARG_STRLEN,
execve fails with E2BIG), so such an image runs under no runtime. Docker refuses a Dockerfile line
over 64 KiB, so the image is made here as a site could receive it: the base image's ``docker save``
with a variable added to its config, exported with no engine (``docker-archive:``). Over the bound,
the export (Enroot and SIF) and the launchers refuse it, naming the variable and the limit; under it
(100 KiB), the value reaches a process started by the real Enroot byte for byte, through
/etc/environment and /etc/rc.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from imagekit.util import quoting
from imagekit.export import ExportRequest, export_image
from imagekit.launch import mpijob
from helpers.launch_jobs import mpijob as mpijob_job

pytestmark = pytest.mark.engine


def with_env(base_image: str, docker_bin: str, directory: Path, extra: list[str]) -> Path:
    """``docker save`` of ``base_image`` with ``extra`` appended to its config's Env."""
    saved = directory / "base.tar"
    subprocess.run([docker_bin, "save", "-o", str(saved), base_image], check=True, capture_output=True)
    out = directory / "image.tar"
    with tarfile.open(saved) as src, tarfile.open(out, "w") as dst:
        manifest = json.loads(src.extractfile("manifest.json").read())
        old_config = manifest[0]["Config"]
        config = json.loads(src.extractfile(old_config).read())
        config["config"]["Env"] = list(config["config"].get("Env") or []) + extra
        data = json.dumps(config).encode()
        name = f"{hashlib.sha256(data).hexdigest()}.json"
        manifest[0]["Config"] = name
        for member in src.getmembers():
            if member.name in (old_config, "manifest.json"):
                continue
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        for member_name, payload in ((name, data), ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(member_name)
            info.size = len(payload)
            dst.addfile(info, io.BytesIO(payload))
    saved.unlink()
    return out


@pytest.mark.parametrize("fmt", ["enroot", "sif"])
def test_an_env_string_over_128_kib_is_refused_at_export(base_image, docker_bin, tmp_path, fmt):
    archive = with_env(base_image, docker_bin, tmp_path, ["BIG=" + "x" * (200 << 10)])
    with pytest.raises(quoting.UnsafeValue, match=r"Env\[\d+\] \('BIG'\) .* is 204804 bytes; Linux starts no "
                                                  r"program with an environment string over 131071 bytes"):
        export_image(f"docker-archive:{archive}", ExportRequest(fmt), tmp_path / f"x.{fmt}", store=False)
    assert not list(tmp_path.glob("x.*")) and not list(tmp_path.glob(".x.*"))


def test_launchers_refuse_an_env_string_over_128_kib():
    with pytest.raises(quoting.UnsafeValue, match="Argument list too long"):
        mpijob_job(name="job", image="img", workers=1, command=["true"], env={"BIG": "x" * (130 << 10)})
    with pytest.raises(quoting.UnsafeValue, match="Argument list too long"):
        mpijob_job(name="job", image="img", workers=1, command=["true"],
                          image_env={"BIG": "x" * (130 << 10)})


def test_a_100_kib_env_value_reaches_the_process_under_the_real_enroot(base_image, docker_bin, tmp_path):
    """Under the bound, /etc/environment carries it on one line and the process gets it intact."""
    value = (uuid.uuid4().hex * 3200)[:100 << 10]
    archive = with_env(base_image, docker_bin, tmp_path, [f"BIG={value}"])
    sqsh = Path(export_image(f"docker-archive:{archive}", ExportRequest("enroot"), tmp_path / "big.sqsh",
                             store=False).path)
    name = f"ik-sec-env-{uuid.uuid4().hex[:8]}"
    created = subprocess.run(["enroot", "create", "--name", name, str(sqsh)], capture_output=True, text=True,
                             cwd="/tmp")
    assert created.returncode == 0, created.stderr
    try:
        proc = subprocess.run(["enroot", "start", name, "sh", "-c", 'printf %s "$BIG" | sha256sum'],
                              capture_output=True, text=True, cwd="/tmp", timeout=120,
                              env={**os.environ, "NVIDIA_VISIBLE_DEVICES": "void"})
    finally:
        subprocess.run(["enroot", "remove", "-f", name], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == hashlib.sha256(value.encode()).hexdigest()
