"""``imagekit-pyxis-importer stage [--mode sbcast|shared] URI``: a many-node job's first step.

Run once, on the job's first node, before any container step (``imagekit launch slurm --stage``
writes it; docs/many-nodes.md says when to choose which mode):

- resolves ``URI`` to its image ID once (the container steps' importers then never ask the registry:
  the job is pinned to this image, and every node starts the same bytes);
- makes sure the store has the image: a hit, or the one conversion (or artifact pull) of the
  importer's miss path, on this node only, so that no container step ever waits for one;
- ``--mode sbcast``: sends the entry to every node's local disk (:func:`imagekit.export.stage.broadcast`),
  the one read of it from the shared file system in this job;
- ``--mode shared`` (the default): nothing more; the nodes mount the shared entry itself (Pyxis with
  ``use_squashfuse=1``) and read only the blocks the container touches.

It prints one line, ``IMAGE_ID SHA256``, for the job script to export as ``IMAGEKIT_STAGE_IMAGE_ID``
and ``IMAGEKIT_STAGE_SHA256``; progress and errors go to stderr, naming the node.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Mapping

from imagekit.util.errors import UsageError
from imagekit.export import pyxis_fill, pyxis_policy, stage
from imagekit.export.pyxis_importer import (PRESET_ENV, PROG, Wanted, guarded, hold_name, identify, log, lookup,
                                           site_environment, stores)
from imagekit.export.stage_env import normal_uri

MODES = ("shared", "sbcast")
LAZY_PRESET = "shared-fs"      # zstd-3, 1 MiB blocks (imagekit.export.squash.PRESETS)
USAGE = f"usage: {PROG} stage [--mode sbcast|shared] IMAGE_URI"


def parse(argv: list[str]) -> tuple[str, str]:
    mode, rest = "shared", list(argv)
    if rest[:1] == ["--mode"] and len(rest) >= 2:
        mode, rest = rest[1], rest[2:]
    elif rest[:1] and rest[0].startswith("--mode="):
        mode, rest = rest[0].split("=", 1)[1], rest[1:]
    if mode not in MODES or len(rest) != 1:
        raise UsageError(USAGE, f"--mode is one of {', '.join(MODES)}")
    return mode, rest[0]


def run(argv: list[str], env: Mapping[str, str] | None = None) -> int:
    env = site_environment(env)
    mode, uri = parse(argv)
    uri = normal_uri(uri)
    name = f"{hold_name(env)}.stage"
    started = time.monotonic()
    image_id, manifest = identify(uri, env)
    log(f"{uri}: image {image_id[:19]}…" + (f" (manifest {manifest[:19]}…)" if manifest else "") +
        f"; pinned for this job ({mode})")
    # Nodes that mount the shared file straight from the parallel file system read it in blocks:
    # 1 MiB ones (a stripe each) when this step converts; an entry already there is used as it is.
    prefer = LAZY_PRESET if mode == "shared" else None
    entry = lookup(image_id, env, name, Wanted(prefer=prefer))
    if entry is None:
        source = pyxis_fill.source_for(uri, env)
        decision = pyxis_policy.check_image(uri, source.image_id, source.manifest_digest, env, log=log)
        entry = pyxis_fill.fill(source, env, name, decision, preset=env.get(PRESET_ENV) or prefer)
    elif mode == "shared" and entry.preset != LAZY_PRESET:
        log(f"note: {entry.preset} entry ({entry.path}); lazy starts read fewer, larger blocks from a "
            f"{LAZY_PRESET} one (imagekit export --preset {LAZY_PRESET}, docs/many-nodes.md)")
    try:
        if mode == "sbcast":
            _broadcast(entry, env)
    finally:
        shared, own = stores(env)
        for store in (shared, own.get()):
            if store is not None:
                store.release(None, name)
    log(f"staged in {time.monotonic() - started:.2f} s")
    print(f"{image_id} {entry.sha256}", flush=True)
    return 0


def _broadcast(entry, env: Mapping[str, str]) -> None:
    base, importer = env.get("IMAGEKIT_STAGE_DIR"), env.get("IMAGEKIT_IMPORTER")
    job, nodes = env.get("SLURM_JOB_ID", ""), env.get("SLURM_JOB_NUM_NODES", "")
    if not base or not importer:
        raise UsageError("--mode sbcast needs IMAGEKIT_STAGE_DIR (node-local disk) and IMAGEKIT_IMPORTER "
                         "(this program's path on the nodes)", "imagekit launch slurm --stage sbcast sets both")
    if not job or not nodes.isdigit():
        raise UsageError("--mode sbcast runs inside a Slurm job (SLURM_JOB_ID, SLURM_JOB_NUM_NODES)",
                         "run it as the first command of the job script")
    done = stage.broadcast(Path(entry.path), entry.sha256, entry.bytes,
                           stage.StageJob(job, int(nodes), Path(base), importer, dict(env)), log=log)
    log(f"stage directories ready on {len(done.nodes)} node(s) in {done.seconds_prepare:.2f} s; " +
        (f"sbcast {entry.bytes} bytes in {done.seconds_sbcast:.2f} s" if done.sent else "nothing to send"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return guarded(lambda: run(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
