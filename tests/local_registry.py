"""A real local registry for tests: Debian's docker-registry (CNCF distribution) on 127.0.0.1.

It has no referrers API, which is the case imagekit's artifact push must fall back from.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_registry(root: Path, extra_config: str = "") -> Iterator[str]:
    """Serve a registry whose storage is under ``root``; yields ``127.0.0.1:PORT``.

    ``extra_config`` is appended to the YAML configuration (for example an ``auth:`` section).
    """
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.fail("docker-registry is not installed (apt-get install docker-registry)")
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = root / "config.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {root / 'data'}\n  delete:\n    enabled: true\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n{extra_config}")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    addr = f"127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://{addr}/v2/", timeout=1)
                break
            except urllib.error.HTTPError:
                break  # 401 from an auth-enabled registry: it is up
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"docker-registry exited: {proc.stderr.read().decode()[-500:]}")
                time.sleep(0.1)
        yield addr
    finally:
        proc.terminate()
        proc.wait(timeout=10)
