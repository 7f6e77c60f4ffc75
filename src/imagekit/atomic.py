"""Write outputs to a temporary name beside the target and rename when complete.

An interrupted or failed write never leaves a partial file under the final
name: recipes, scripts, JUnit files and exports all go through here.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from imagekit import owners, quoting


def current_umask() -> int:
    """This process's umask, read without changing it (another thread may be creating files)."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1], 8) for line in fh if line.startswith("Umask:"))
    old = os.umask(0o022)   # Linux < 4.7 has no Umask: line
    os.umask(old)
    return old


@contextlib.contextmanager
def target(path: str | os.PathLike, mode: int = 0o644, sync: bool = False) -> Iterator[Path]:
    """Yield a temporary path (``.NAME.<owner>.*.part``) beside ``path``; rename it over ``path`` on success.

    The file gets ``mode`` less the umask, as ``open(2)`` would give it: a user with umask 077
    keeps their outputs to themselves. ``sync`` flushes the data to disk before the rename
    (large exports on shared filesystems). Any exception, KeyboardInterrupt included, removes
    the temporary file.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    owners.sweep_parts(final)  # what a killed earlier run left (never a live writer's)
    fd, tmp = tempfile.mkstemp(prefix=owners.part_prefix(final), suffix=".part", dir=final.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if sync:
            with open(tmp_path, "rb+") as fh:
                os.fsync(fh.fileno())
        os.chmod(tmp_path, mode & ~current_umask())
        os.replace(tmp_path, final)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str, mode: int = 0o644) -> Path:
    """UTF-8; non-UTF-8 bytes that came in through argv (surrogateescape) are written back as they came."""
    with target(path, mode) as tmp:
        tmp.write_bytes(quoting.encode(text))
    return Path(path)
