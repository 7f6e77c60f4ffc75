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

Where it looks, and what it trusts (README "The export store: who may publish"):

1. resolve the URI to the image's manifest digest and config digest (the image ID);
2. the site's shared store (``IMAGEKIT_SHARED_STORE``, published only by its publishers),
   then the user's own store (``IMAGEKIT_STORE``, else ``~/.cache/imagekit/store``): an
   Enroot export of that image, of a plain reference (never a ``--squash-opt`` variant),
   written only by the store's publishers and holding the bytes they recorded → use it;
3. else an export artifact pushed beside the image, only from a repository the site
   trusts (``IMAGEKIT_TRUSTED_ARTIFACTS``), checked as an Enroot export of this image →
   pull it into a store under its own key;
4. else convert it once under the store's lock: the Docker engine when one answers, else
   straight from the registry (the layers streamed and merged, :mod:`imagekit.export.image_source`).
   Both give the same file under the same key. N nodes of one job on a shared store convert once.

Steps 3 and 4 write into the shared store when this user is one of its publishers, else
into the user's own store: a user outside the publishers never changes what another
user's job starts.

The returned path is the store entry itself, with a hold named for this host, user, job
and step, so ``imagekit store gc`` cannot evict it from under a running container;
``release`` drops the hold (a missing hold is fine: idempotent).
"""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from imagekit.errors import ArtifactMissing, ImagekitError, UsageError

if TYPE_CHECKING:
    from imagekit.export.store import Entry, Store

PROG = "imagekit-pyxis-importer"
USAGE = f"usage: {PROG} get IMAGE_URI | {PROG} release"
SHARED_ENV = "IMAGEKIT_SHARED_STORE"
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


class OwnStore:
    """The user's own store, opened when first needed: a node whose home the user cannot write
    still serves hits from the shared store, and says why only when it must convert."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.root = env.get("IMAGEKIT_STORE") or None
        self._store: "Store | None" = None
        self.problem: ImagekitError | None = None

    def get(self) -> "Store | None":
        from imagekit.export import store as store_mod

        if self._store is None and self.problem is None:
            try:
                self._store = store_mod.Store.open(self.root)
            except ImagekitError as exc:
                self.problem = exc
        return self._store


def stores(env: Mapping[str, str]) -> tuple["Store | None", OwnStore]:
    """(the site's shared store or None, the user's own store). A shared store that is missing,
    or that someone outside its publishers could change, is skipped with a warning: the job
    still runs, from the user's own store."""
    from imagekit.export import store as store_mod

    shared = None
    if env.get(SHARED_ENV):
        try:
            shared = store_mod.Store.open(env[SHARED_ENV], create=False)
        except ImagekitError as exc:
            log(f"warning: not using the shared store: {exc}")
    own = OwnStore(env)
    if shared is None:
        own.get()
        if own.problem is not None:
            raise own.problem
    return shared, own


def _serve(store: "Store", image_id: str, name: str) -> "Entry | None":
    """A verified, held entry of ``image_id`` in ``store`` for a plain reference, or None."""
    from imagekit.export import store as store_mod

    for entry in store.servable(image_id, "enroot"):
        if store.verified(entry) is None:
            continue
        try:
            store.hold(entry, name)
        except store_mod.EntryGone:
            continue
        except store_mod.HoldRefused as exc:
            log(f"warning: not using {store.root}: {exc}")
            return None
        store.touch(entry)
        log(f"store hit: {entry.path} ({entry.preset}" +
            (", from a pushed artifact" if store_mod.ARTIFACT_OPTION in entry.options else "") + ", verified)")
        return entry
    return None


def get(uri: str, env: Mapping[str, str] | None = None) -> Path:
    """Serve ``uri`` as a held store entry; returns its path. See the module docstring."""
    env = os.environ if env is None else env
    name = hold_name(env)
    shared, own = stores(env)
    source = _source(uri, env)
    log(f"{uri}: image {source.image_id[:19]}…" +
        (f" (manifest {source.manifest_digest[:19]}…)" if source.manifest_digest else ""))
    if shared is not None:
        entry = _serve(shared, source.image_id, name)
        if entry is not None:
            return entry.path
    mine = own.get()
    if mine is not None and (shared is None or mine.root != shared.root):
        entry = _serve(mine, source.image_id, name)
        if entry is not None:
            return entry.path
    target = shared if shared is not None and shared.trust.can_publish() else mine
    if target is None:
        assert own.problem is not None
        raise own.problem
    entry, made = _fill(target, source, env)
    target.hold(entry, name)
    log(("stored" if made else "stored by another process") + f": {entry.path}")
    return entry.path


def release(env: Mapping[str, str] | None = None) -> None:
    """Drop this job step's holds on this node, in both stores. Twice, or with nothing held, is fine."""
    env = os.environ if env is None else env
    name = hold_name(env)
    shared, own = stores(env)
    for store in (shared, own.get()):
        if store is not None:
            store.release(None, name)


Converter = Callable[[Path, str], None]


class Source:
    """Where an image comes from: its ID, and how to fetch or convert it.

    ``converter()`` is asked only on a miss (a warm hit never probes for a Docker engine) and
    returns the key options that say which converter makes the entry, and the converter."""

    def __init__(self, image_id: str, manifest_digest: str | None,
                 pull_artifact: "Callable[[Store], tuple[Entry, bool]] | None",
                 converter: Callable[[], tuple[tuple[str, ...], Converter]]) -> None:
        self.image_id = image_id
        self.manifest_digest = manifest_digest
        self.pull_artifact = pull_artifact
        self.converter = converter


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

    return Source(image_id, None, None, lambda: ((), convert))


def _registry_source(uri: str, env: Mapping[str, str]) -> Source:
    from imagekit import registry

    ref = registry.parse(uri)
    client = registry.RegistryClient.for_reference(ref, env=dict(env))
    resolved = client.resolve(ref)

    def pull_artifact(store: "Store") -> "tuple[Entry, bool]":
        return _pull_artifact(store, client, resolved, env)

    def converter() -> tuple[tuple[str, ...], Converter]:
        from imagekit import engine

        if engine.available():
            return (), lambda tmp, preset: _convert_with_engine(resolved.reference, resolved.config_digest,
                                                                tmp, preset)
        return (), lambda tmp, preset: _convert_from_registry(resolved.reference, tmp, preset, env)

    return Source(resolved.config_digest, resolved.digest, pull_artifact, converter)


def _pull_artifact(store: "Store", client, resolved, env: Mapping[str, str]) -> "tuple[Entry, bool]":
    """An enroot artifact of the image from a trusted repository, checked, into ``store``."""
    from imagekit.errors import IntegrityError, RegistryError
    from imagekit.export import artifact_trust, artifacts
    from imagekit.export.store import ARTIFACT_OPTION

    ref = resolved.reference
    if artifact_trust.trusted(ref.registry, ref.repository, env) is None:
        raise ArtifactMissing(f"artifacts of {ref.registry}/{ref.repository} are not used: the repository "
                              f"is not in {artifact_trust.ENV}")
    listed, _ = client.referrers(ref.repository, resolved.digest)
    candidates = artifact_trust.enroot_candidates(listed, resolved.config_digest, lambda m: log(f"warning: {m}"))
    if not candidates:
        raise ArtifactMissing(f"no usable enroot artifact was pushed for {resolved.digest}")
    for candidate in candidates:
        try:
            key = store.key(resolved.config_digest, "enroot", candidate.preset, (ARTIFACT_OPTION,))
        except UsageError as exc:
            log(f"warning: skipping the enroot artifact {candidate.digest}: {exc.message}")
            continue

        def download(tmp: Path, candidate=candidate) -> None:
            layer, _ = artifacts.checked_layer(client, ref.repository, resolved, candidate.entry, "enroot")
            log(f"pulling the pushed enroot artifact ({candidate.preset}) of {resolved.digest[:19]}…")
            with open(tmp, "xb") as fh:
                client.download_blob(ref.repository, layer["digest"], fh, size=int(layer["size"]))
            artifact_trust.check_squashfs(tmp)

        try:
            return store.get_or_create(key, download, progress=log, extra={
                "artifact": candidate.digest, "registry": ref.registry, "repository": ref.repository,
                "subject": resolved.digest})
        except (IntegrityError, RegistryError) as exc:
            log(f"warning: not using the enroot artifact {candidate.digest}: {exc.message}")
    raise ArtifactMissing(f"no pushed enroot artifact of {resolved.digest} passed the checks")


def _convert_with_engine(ref, image_id: str, tmp: Path, preset: str) -> None:
    from imagekit import engine
    from imagekit.export import enroot

    log(f"pulling {ref.docker} into the Docker engine")
    engine.pull(ref.docker)
    enroot.export(image_id, tmp, preset=preset, force=True)


def _convert_from_registry(ref, tmp: Path, preset: str, env: Mapping[str, str]) -> None:
    """The digest-pinned image straight from the registry: no engine, nothing unpacked."""
    from imagekit.export import enroot
    from imagekit.export.image_source import RegistrySource

    log(f"converting with no Docker engine, straight from the registry: {ref.docker}")
    enroot.export(RegistrySource(f"docker://{ref.docker}", env=env), tmp, preset=preset, force=True)


def _fill(store: "Store", source: Source, env: Mapping[str, str]) -> "tuple[Entry, bool]":
    """Put the image in ``store`` once: a trusted pushed artifact if any, else a conversion."""
    preset = _default_preset()
    if source.pull_artifact is not None:
        try:
            return source.pull_artifact(store)
        except ArtifactMissing as exc:
            log(f"{exc.message}; converting")
    options, converter = source.converter()
    key = store.key(source.image_id, "enroot", preset, options)

    def convert(tmp: Path) -> None:
        converter(tmp, preset)
        log("converted and stored")

    return store.get_or_create(key, convert, progress=log)


def main(argv: list[str] | None = None) -> int:
    from imagekit.export.store import notices

    argv = sys.argv[1:] if argv is None else argv
    notices.sink = lambda message: log(f"warning: {message}")
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
    except Exception as exc:  # noqa: BLE001 - Pyxis shows stderr: one line, never a traceback
        log(f"error: {type(exc).__name__}: {exc} (a bug in {PROG}: please report it)")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
