"""A tiny SIF file for the reader's and the writer's tests, made by the writer's own pieces around a
tiny squashfs (no engine needed)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from imagekit.export import sif


def tiny_sif(tmp_path: Path) -> Path:
    """A SIF made by the writer's own pieces around a tiny squashfs (no engine needed)."""
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d/f").write_text("x\n")
    tar = subprocess.run(["tar", "-C", str(src), "-cf", "-", "d"], capture_output=True, check=True).stdout
    objects = [sif._Object(sif.DATA_DEFFILE, b"bootstrap: docker-daemon\nfrom: t\n"),
               sif._Object(sif.DATA_PARTITION, None,
                           extra=sif.PARTITION_EXTRA.pack(sif.FS_SQUASHFS, sif.PART_PRIMSYS, b"02"))]
    offset = sif._layout(objects)[-1].offset
    out = tmp_path / "tiny.sif"
    subprocess.run(["sqfstar", "-force", "-quiet", "-no-progress", "-offset", str(offset), str(out)],
                   input=tar, check=True, capture_output=True)
    descriptors = sif._layout(objects, out.stat().st_size - offset)
    with open(out, "r+b") as fh:
        sif.write_prefix(fh, objects, descriptors, arch="02", ident=uuid.uuid4(), when=1)
    return out
