"""Write outputs to a temporary name beside the target and rename when complete.

An interrupted or failed write never leaves a partial file under the final name.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def target(path: str | os.PathLike, mode: int = 0o644) -> Iterator[Path]:
    """Yield a temporary path in the target's directory; rename it over ``path`` on success."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".part", dir=final.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, mode)
        os.replace(tmp_path, final)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with target(path) as tmp:
        tmp.write_text(text)
