"""A local ledger of what was done to each image (checks run, exports made), for `imagekit report`.

It is this user's, on this machine, and never travels with the image (what does travel is the
labels of :mod:`imagekit.image_facts`). One JSON object per line in
``$IMAGEKIT_STATE/records.jsonl`` (default ``~/.local/state/imagekit``; the file keeps the name
older imagekits wrote), keyed by image ID so a retag does not lose it.
Appends are single short writes with O_APPEND: concurrent writers do not
interleave within a line.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def state_dir() -> Path:
    return Path(os.environ.get("IMAGEKIT_STATE") or Path.home() / ".local/state/imagekit")


def add(image_id: str, kind: str, **data) -> None:
    path = state_dir() / "records.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"image_id": image_id, "kind": kind, "time": int(time.time()), **data},
                      separators=(",", ":")) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def for_image(image_id: str) -> list[dict]:
    path = state_dir() / "records.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line from a killed writer
        if record.get("image_id") == image_id:
            out.append(record)
    return out
