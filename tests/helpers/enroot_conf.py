"""Enroot's site configuration for a test: a drop-in in /etc/enroot/enroot.conf.d while it runs.

Pyxis keeps ``ENROOT_ALLOW_HTTP``, ``ENROOT_*_PATH`` and others out of the job's environment, so a
cluster sets them in Enroot's configuration files, which ``enroot import`` (and imagekit's Pyxis
importer, :mod:`imagekit.registry.enroot_config`) read. The drop-in is named for this process and
removed when the test ends; one that a killed run left (its process gone) is removed by the next.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

DROP_INS = Path("/etc/enroot/enroot.conf.d")
PREFIX = "zz-imagekit-test-"


@contextlib.contextmanager
def drop_in(text: str, name: str = "site") -> Iterator[Path]:
    """``text`` (lines of ``NAME VALUE``) as Enroot's configuration while the block runs."""
    for stale in DROP_INS.glob(f"{PREFIX}*.conf"):
        pid = stale.stem.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            stale.unlink(missing_ok=True)
    path = DROP_INS / f"{PREFIX}{name}-{os.getpid()}.conf"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"# imagekit's tests ({Path(__file__).name}): removed when the test ends.\n{text}")
    tmp.chmod(0o644)
    os.replace(tmp, path)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def allows_http() -> contextlib.AbstractContextManager[Path]:
    """``ENROOT_ALLOW_HTTP yes``: Enroot speaks plain HTTP to registries (it has no loopback exception)."""
    return drop_in("ENROOT_ALLOW_HTTP yes\n", "http")
