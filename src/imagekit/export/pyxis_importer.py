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

A store hit is served by this module alone, which loads no converter: on a miss the process
becomes :mod:`imagekit.export.pyxis_fill` (exec), which fills the store (steps 3 and 4) and prints
the path, so the hit path never pays for the artifact and conversion code it does not run.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path
from typing import Callable, Mapping, NoReturn

from imagekit import engine, registry
from imagekit.errors import ImagekitError, UsageError
from imagekit.export import store as store_mod
from imagekit.export.store import Entry, Store, notices

PROG = "imagekit-pyxis-importer"
USAGE = f"usage: {PROG} get IMAGE_URI | {PROG} release"
HELP = f"""{USAGE}

Pyxis's importer (Pyxis >= 0.21): Pyxis runs it as the job's user instead of `enroot import`.

  get IMAGE_URI   print the path of an Enroot squashfs of the image (docker://REGISTRY#REPO:TAG):
                  from the site's shared store, the user's store, a trusted pushed artifact, or
                  one conversion from the registry (or the Docker engine)
  release         drop this job step's hold on what `get` returned (Pyxis calls it twice)

Environment:
  IMAGEKIT_SHARED_STORE       the site's shared export store (published by CI)
  IMAGEKIT_TRUSTED_ARTIFACTS  REGISTRY/REPO patterns (comma-separated, * as in the shell) whose
                              pushed .sqsh artifacts are trusted
  IMAGEKIT_STORE              the user's own store (default ~/.cache/imagekit/store)

Set-up (a wrapper that sets the environment, named in Pyxis's plugstack.conf line):
  #!/bin/sh
  export IMAGEKIT_SHARED_STORE=/lustre/containers/imagekit-store
  exec /opt/imagekit/.venv/bin/{PROG} "$@"
  required /usr/lib/slurm/spank/pyxis.so importer=/usr/local/libexec/imagekit-importer

Example (as Pyxis calls it):
  SLURM_JOB_ID=1 SLURM_STEP_ID=0 {PROG} get 'docker://registry.example.org#hpc/mpi:1'

Exit status: 0 ok, 4 registry unreachable, 5 no artifact, 6 digest mismatch, 7 credentials,
8 no space, 10 image not found, 130 interrupted (the table: docs/errors.md in imagekit)."""
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


class OwnStore:
    """The user's own store, opened when first needed: a node whose home the user cannot write
    still serves hits from the shared store, and says why only when it must convert."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.root = env.get("IMAGEKIT_STORE") or None
        self._store: Store | None = None
        self.problem: ImagekitError | None = None

    def get(self) -> Store | None:
        if self._store is None and self.problem is None:
            try:
                self._store = store_mod.Store.open(self.root)
            except ImagekitError as exc:
                self.problem = exc
        return self._store


def stores(env: Mapping[str, str]) -> tuple[Store | None, OwnStore]:
    """(the site's shared store or None, the user's own store). A shared store that is missing,
    or that someone outside its publishers could change, is skipped with a warning: the job
    still runs, from the user's own store."""
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


def _serve(store: Store, image_id: str, name: str) -> Entry | None:
    """A verified, held entry of ``image_id`` in ``store`` for a plain reference, or None."""
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


def identify(uri: str, env: Mapping[str, str]) -> tuple[str, str | None]:
    """(image ID, manifest digest or None) of ``uri``: the engine's image, or the registry's,
    resolved by digest. The store keys its entries by the image ID."""
    if uri.startswith("dockerd://"):
        image = uri[len("dockerd://"):]
        if not image:
            raise UsageError("dockerd:// names no image", "e.g. dockerd://imagekit/debian-mpi:latest")
        return engine.image_id(image), None
    if uri.startswith("podman://"):
        raise UsageError(f"{uri}: podman:// images are not served by {PROG}",
                         "push the image to a registry, or use docker:// or dockerd://")
    ref = registry.parse(uri)
    resolved = registry.RegistryClient.for_reference(ref, env=dict(env)).resolve(ref)
    return resolved.config_digest, resolved.digest


def serve(uri: str, env: Mapping[str, str] | None = None) -> Path | None:
    """A verified store entry of ``uri``, held for this job step (its path), or None on a miss
    (then :func:`imagekit.export.pyxis_fill.get` fills the store). See the module docstring."""
    env = os.environ if env is None else env
    name = hold_name(env)
    shared, own = stores(env)
    image_id, manifest_digest = identify(uri, env)
    log(f"{uri}: image {image_id[:19]}…" + (f" (manifest {manifest_digest[:19]}…)" if manifest_digest else ""))
    if shared is not None:
        entry = _serve(shared, image_id, name)
        if entry is not None:
            return entry.path
    mine = own.get()
    if mine is not None and (shared is None or mine.root != shared.root):
        entry = _serve(mine, image_id, name)
        if entry is not None:
            return entry.path
    return None


def release(env: Mapping[str, str] | None = None) -> None:
    """Drop this job step's holds on this node, in both stores. Twice, or with nothing held, is fine."""
    env = os.environ if env is None else env
    name = hold_name(env)
    shared, own = stores(env)
    for store in (shared, own.get()):
        if store is not None:
            store.release(None, name)


def _hand_over(argv: list[str]) -> NoReturn:
    """A miss: this process becomes the fill program (exec, same pid, stdout, stderr and exit status
    for Pyxis), which loads the registry artifacts and the converters that a store hit never needs."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "imagekit.export.pyxis_fill", *argv])


def run_command(get: Callable[[str], Path], argv: list[str] | None = None,
                release: Callable[[], None] | None = None) -> int:
    """Run the importer's protocol the way Pyxis needs it: `get URI` prints the path ``get`` returns,
    `release` (where given) drops this job's holds; warnings and errors are single
    ``imagekit-pyxis-importer:`` lines on stderr, never a traceback, with the error's exit status;
    other arguments print the usage (status 2)."""
    argv = sys.argv[1:] if argv is None else argv
    notices.sink = lambda message: log(f"warning: {message}")
    try:
        if argv[:1] == ["get"] and len(argv) == 2:
            sys.stdout.write(f"{get(argv[1])}\n")
            sys.stdout.flush()
            return 0
        if argv == ["release"] and release is not None:
            release()
            return 0
        if argv[:1] in (["--help"], ["-h"]):
            print(HELP)
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


def _serve_or_hand_over(uri: str) -> Path:
    path = serve(uri)
    if path is None:
        _hand_over(["get", uri])
    return path


def main(argv: list[str] | None = None) -> int:
    return run_command(_serve_or_hand_over, argv, release=release)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
