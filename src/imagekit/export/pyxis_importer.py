"""The Pyxis importer: ``imagekit-pyxis-importer get IMAGE_URI`` and ``imagekit-pyxis-importer release``.

Pyxis >= 0.21 runs the executable named by ``importer=`` in plugstack.conf instead of
``enroot import`` (pyxis importers/README.md and importer.c, v0.24.0). The contract:

- it runs as the job's user, stdin on /dev/null, with Enroot's environment plus
  ``PYXIS_RUNTIME_PATH``, ``PYXIS_VERSION`` and Slurm's ``SLURM_JOB_ID``/``SLURM_STEP_ID``/…;
- ``get URI`` (``docker://…`` or ``dockerd://…``) prints the absolute path of a squashfs
  on stdout, and Pyxis reads the first line; stderr is Pyxis's log, printed when the
  importer exits non-zero;
- ``release`` is called after ``enroot create``, and again at task cleanup, so twice; when
  Pyxis starts straight from the squashfs (``use_squashfuse``) only at cleanup, and the path
  ``get`` returned must stay valid until then.

What ``get`` does, cheapest first, so that a node never converts what any node (or CI)
converted before:

1. resolve the URI to the image's manifest digest and config digest (the image ID);
2. an Enroot export of that image in the store (:mod:`imagekit.export.store`) → use it;
3. else an export artifact pushed beside the image (``imagekit push --with enroot``) →
   pull it into the store, verified;
4. else convert it once under the store's lock: the Docker engine when one answers,
   else ``enroot import``. N nodes of one job on a shared store convert once.

The returned path is the store entry itself, with a hold named for this host, user, job
and step, so ``imagekit store gc`` cannot evict it from under a running container;
``release`` drops the hold (a missing hold is fine: idempotent).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping

from imagekit.errors import ArtifactMissing, ImagekitError, UsageError

PROG = "imagekit-pyxis-importer"
USAGE = f"usage: {PROG} get IMAGE_URI | {PROG} release"
_NUMBER = re.compile(r"[0-9]+")


def log(message: str) -> None:
    """Progress for Pyxis's log (stderr); stdout carries only the path."""
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def hold_name(env: Mapping[str, str]) -> str:
    """``pyxis.HOST.UID.JOB.STEP``: one hold per job step and node (a shared store sees many nodes)."""
    job, step = env.get("SLURM_JOB_ID", ""), env.get("SLURM_STEP_ID", "")
    uid = env.get("SLURM_JOB_UID") or str(os.getuid())
    if not (_NUMBER.fullmatch(job) and _NUMBER.fullmatch(uid)):
        raise UsageError("SLURM_JOB_ID and SLURM_JOB_UID must be set (Pyxis runs the importer "
                         "inside a job step)", "run it through srun --container-image, or set "
                         "SLURM_JOB_ID and SLURM_STEP_ID to try it by hand")
    # Slurm names special steps (batch, extern, interactive) by name or by a large number.
    if not re.fullmatch(r"[0-9A-Za-z_]+", step or "0"):
        raise UsageError(f"SLURM_STEP_ID={step!r} is not a step id")
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0]) or "host"
    return f"pyxis.{host}.{uid}.{job}.{step or '0'}"


def _default_preset() -> str:
    from imagekit.export import squash

    return squash.DEFAULT_STORE_PRESET


def get(uri: str, env: Mapping[str, str] | None = None) -> Path:
    """Serve ``uri`` as a held store entry; returns its path. See the module docstring."""
    from imagekit.export import store as store_mod

    env = os.environ if env is None else env
    name = hold_name(env)
    store = store_mod.Store.open()
    source = _source(uri, env)
    log(f"{uri}: image {source.image_id[:19]}…" +
        (f" (manifest {source.manifest_digest[:19]}…)" if source.manifest_digest else ""))
    for entry in store_mod.find(store, source.image_id, "enroot"):
        try:
            store.hold(entry, name)
        except store_mod.EntryGone:
            continue
        store.touch(entry)
        log(f"store hit: {entry.path} ({entry.preset})")
        return entry.path
    entry, made = _fill(store, source)
    store.hold(entry, name)
    log(("stored" if made else "stored by another process") + f": {entry.path}")
    return entry.path


def release(env: Mapping[str, str] | None = None) -> None:
    """Drop this job step's hold on this node. Twice, or with nothing held, is fine."""
    from imagekit.export import store as store_mod

    env = os.environ if env is None else env
    name = hold_name(env)
    store_mod.Store.open().release(None, name)


class Source:
    """Where an image comes from: its ID, and how to fetch or convert it."""

    def __init__(self, image_id: str, manifest_digest: str | None, pull_artifact, convert) -> None:
        self.image_id = image_id
        self.manifest_digest = manifest_digest
        self.pull_artifact: Callable[[object], tuple] | None = pull_artifact
        self.convert: Callable[[Path, str], None] = convert


def _source(uri: str, env: Mapping[str, str]) -> Source:
    if uri.startswith("dockerd://"):
        return _engine_source(uri[len("dockerd://"):])
    if uri.startswith("podman://"):
        raise UsageError(f"{uri}: podman:// images are not served by {PROG}",
                         "push the image to a registry, or use docker:// or dockerd://")
    return _registry_source(uri, env)


def _engine_source(image: str) -> Source:
    from imagekit import engine
    from imagekit.export import enroot

    if not image:
        raise UsageError("dockerd:// names no image", "e.g. dockerd://imagekit/debian-mpi:latest")
    image_id = engine.image_id(image)

    def convert(tmp: Path, preset: str) -> None:
        enroot.export(image_id, tmp, preset=preset, force=True)

    return Source(image_id, None, None, convert)


def _registry_source(uri: str, env: Mapping[str, str]) -> Source:
    from imagekit import registry

    ref = registry.parse(uri)
    client = registry.RegistryClient.for_reference(ref, env=dict(env))
    resolved = client.resolve(ref)

    def pull_artifact(store):
        from imagekit.export import artifacts

        listed, _ = client.referrers(ref.repository, resolved.digest)
        chosen = artifacts.matching(listed, "enroot")
        if not chosen:
            raise ArtifactMissing(f"no enroot artifact was pushed for {resolved.digest}")
        preset = (chosen[-1].get("annotations") or {}).get(artifacts.A_PRESET) or "enroot"
        key = store.key(resolved.config_digest, "enroot", preset)

        def download(tmp: Path) -> None:
            log(f"pulling the pushed enroot artifact ({preset}) of {resolved.digest[:19]}…")
            artifacts.pull_artifact(resolved.reference.docker, "enroot", tmp, preset=preset,
                                    force=True, client=client)

        return store.get_or_create(key, download, progress=log)

    def convert(tmp: Path, preset: str) -> None:
        _convert_from_registry(resolved.reference, resolved.config_digest, tmp, preset, env)

    return Source(resolved.config_digest, resolved.digest, pull_artifact, convert)


def _convert_from_registry(ref, image_id: str, tmp: Path, preset: str, env: Mapping[str, str]) -> None:
    """Docker engine if one answers (pull by digest, export), else ``enroot import``."""
    from imagekit import engine
    from imagekit.export import enroot, squash

    if engine.available():
        log(f"pulling {ref.docker} into the Docker engine")
        engine.pull(ref.docker)
        enroot.export(image_id, tmp, preset=preset, force=True)
        return
    binary = shutil.which("enroot", path=env.get("PATH"))
    if binary is None:
        raise ArtifactMissing(
            f"no Enroot export of {ref} is stored or pushed, and this node has neither a Docker "
            "engine nor enroot to convert it",
            f"push one from CI: imagekit push IMAGE --to {ref.registry}/{ref.repository}:{ref.tag} "
            "--with enroot")
    log(f"converting with {binary} import")
    options = " ".join(squash.SQFSTAR_PRESETS[preset])
    proc = subprocess.run([binary, "import", "--output", str(tmp), f"docker://{ref.pyxis}"],
                          stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr,
                          env={**env, "ENROOT_SQUASH_OPTIONS": options})
    if proc.returncode != 0:
        raise ImagekitError(f"enroot import docker://{ref.pyxis} failed (exit {proc.returncode})",
                            "see enroot's messages above")


def _fill(store, source: Source):
    """Put the image in the store once: a pushed artifact if any, else a conversion."""
    preset = _default_preset()
    if source.pull_artifact is not None:
        try:
            return source.pull_artifact(store)
        except ArtifactMissing as exc:
            log(f"{exc.message}; converting")
    key = store.key(source.image_id, "enroot", preset)

    def convert(tmp: Path) -> None:
        source.convert(tmp, preset)
        log("converted and stored")

    return store.get_or_create(key, convert, progress=log)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["get"] and len(argv) == 2:
            path = get(argv[1])
            sys.stdout.write(f"{path}\n")
            sys.stdout.flush()
            return 0
        if argv == ["release"]:
            release()
            return 0
        print(USAGE, file=sys.stderr)
        return 2
    except ImagekitError as exc:
        log(f"error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        log("interrupted")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
