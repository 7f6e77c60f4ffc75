"""What a many-node job's stage step tells every node's importer, through the job's environment.

``imagekit launch slurm --stage MODE`` exports these before its first step
(:mod:`imagekit.export.pyxis_stage`) and every container step's importer reads them back:

- ``IMAGEKIT_STAGE``: ``shared`` or ``sbcast``;
- ``IMAGEKIT_STAGE_IMAGE``: the URI staged, as Pyxis hands it to the importer (``docker://…``);
- ``IMAGEKIT_STAGE_IMAGE_ID`` and ``IMAGEKIT_STAGE_SHA256``: what the stage step resolved it to, and
  the store entry it chose: every node starts exactly those bytes, and none asks the registry;
- ``IMAGEKIT_STAGE_DIR``: (sbcast) the node-local directory the copies were sent to.

These are the user's own job's settings: a user who sets them by hand only chooses which of the
store's verified entries, or which of their own verified copies, their own job starts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Mapping

from imagekit.util.errors import UsageError
from imagekit.export import stage

_IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")


def normal_uri(uri: str) -> str:
    """The URI as Pyxis hands it to the importer (a bare reference gets ``docker://``)."""
    return uri if uri.startswith(("docker://", "dockerd://", "podman://")) else f"docker://{uri}"


def pinned(uri: str, env: Mapping[str, str]) -> str | None:
    """The image ID the job's stage step resolved ``uri`` to, when this is the staged image."""
    if not env.get("IMAGEKIT_STAGE") or env.get("IMAGEKIT_STAGE_IMAGE") != normal_uri(uri):
        return None
    image_id = env.get("IMAGEKIT_STAGE_IMAGE_ID", "")
    if not _IMAGE_ID.fullmatch(image_id):
        raise UsageError(f"IMAGEKIT_STAGE_IMAGE_ID={image_id!r} is not an image ID (sha256:<64 hex>)",
                         "it is set by the job's stage step (imagekit launch slurm --stage)")
    return image_id


def pinned_entry(uri: str, env: Mapping[str, str]) -> str | None:
    """The sha256 of the store entry the stage step chose for ``uri`` (None: any verified entry)."""
    return (env.get("IMAGEKIT_STAGE_SHA256") or None) if pinned(uri, env) is not None else None


def staged(uri: str, env: Mapping[str, str], log: Callable[[str], None]) -> Path | None:
    """``IMAGEKIT_STAGE=sbcast``: the verified node-local copy the stage step sent, for the staged image."""
    if env.get("IMAGEKIT_STAGE") != "sbcast" or pinned(uri, env) is None:
        return None
    base, sha = env.get("IMAGEKIT_STAGE_DIR"), env.get("IMAGEKIT_STAGE_SHA256")
    if not base or not sha:
        raise UsageError("IMAGEKIT_STAGE=sbcast needs IMAGEKIT_STAGE_DIR and IMAGEKIT_STAGE_SHA256",
                         "they are set by the job's stage step (imagekit launch slurm --stage sbcast)")
    path = stage.local_copy(Path(base), sha, env.get("SLURM_JOB_ID", ""), log=log)
    log(f"staged copy: {path} (verified)")
    return path
