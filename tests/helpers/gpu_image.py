"""A small image that asks for GPUs the way CUDA images do (``NVIDIA_VISIBLE_DEVICES=all``), and
its ``imagekit export``s: for the tests of what happens on a host without a GPU runtime.

It carries no CUDA: what matters to Enroot's GPU hook, preflight and the launchers is the
environment alone, and the base image keeps it small and quick to build.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from click.testing import CliRunner

TAG = "imagekit-test/gpu-env:latest"
# The CUDA stack's own values, and one with '=' and spaces to show values survive each format.
ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
       "IMAGEKIT_TEST_NOTE": "a=b c"}


def build(base_image: str) -> str:
    """Build (or reuse, through the build cache) the image FROM ``base_image``; its tag."""
    lines = [f"FROM {base_image}"] + [f'ENV {k}="{v}"' for k, v in ENV.items()]
    proc = subprocess.run(["/usr/bin/docker", "build", "-q", "-t", TAG, "-"], input="\n".join(lines) + "\n",
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return TAG


def export(tag: str, fmt: str, out: Path) -> Path:
    """``imagekit export TAG --to FMT -o OUT``, as a user runs it."""
    from imagekit.cli import main

    res = CliRunner().invoke(main, ["export", tag, "--to", fmt, "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


def host_has_gpu_runtime() -> bool:
    """Whether this host could start the image with its GPUs (then nothing fails, and tests say so)."""
    from imagekit.launch.preflight import HostFacts

    host = HostFacts.probe()
    return bool(host.nvidia_container_cli and host.driver)
