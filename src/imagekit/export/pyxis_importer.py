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

Where it looks, and what it trusts (docs/export.md, "Who may publish: the trust model"):

1. resolve the URI to the image's manifest digest and config digest (the image ID), with the
   site's Enroot configuration for the pull (``ENROOT_ALLOW_HTTP``, ``ENROOT_CONFIG_PATH``, …
   from ``enroot.conf`` and ``enroot.conf.d``, which Pyxis keeps out of the environment:
   :mod:`imagekit.registry.enroot_config`); a multi-platform index resolves to this node's
   architecture (``uname -m``), and an image of another architecture is refused here, naming both,
   before Pyxis creates a container that would fail with "exec format error";
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

Many nodes (docs/many-nodes.md): ``imagekit launch slurm --stage sbcast|shared`` runs
``stage URI`` (:mod:`imagekit.export.pyxis_stage`) once on the job's first node, which resolves
the image once, makes sure the store has it, and pins the job to it: the job's environment then
carries ``IMAGEKIT_STAGE_IMAGE`` (the URI) and ``IMAGEKIT_STAGE_IMAGE_ID``, so no node asks the
registry again, and with ``IMAGEKIT_STAGE=sbcast`` also ``IMAGEKIT_STAGE_SHA256`` and
``IMAGEKIT_STAGE_DIR``: each node's ``get`` then serves its node-local copy
(:func:`imagekit.export.stage.local_copy`) and reads nothing from the shared file system.
``stage-prepare SHA256 SIZE`` is that step's per-node part (:func:`imagekit.export.stage.prepare`).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, NoReturn

from imagekit import registry
from imagekit.util import lazy, own_python, platforms, terminal
from imagekit.attest import POLICY_ENV
from imagekit.util.errors import ImagekitError, IntegrityError, UsageError
from imagekit.registry import enroot_config
from imagekit.export import platform_cache, presets, pyxis_unsigned, stage
from imagekit.export.stage_env import pinned, pinned_entry, staged
from imagekit.export import store as store_mod
from imagekit.export.store import Entry, Store, locks, notices
from imagekit.export.store.sealed import NotSealed
from imagekit.export.store.verify import node_name

PROG = "imagekit-pyxis-importer"
USAGE = (f"usage: {PROG} get IMAGE_URI | {PROG} release | {PROG} stage [--mode sbcast|shared] IMAGE_URI | "
         f"{PROG} stage-prepare SHA256 SIZE")
HELP = f"""{USAGE}

Pyxis's importer (Pyxis >= 0.21): Pyxis runs it as the job's user instead of `enroot import`.

  get IMAGE_URI   print the path of an Enroot squashfs of the image (docker://REGISTRY#REPO:TAG):
                  from the site's shared store, the user's store, a trusted pushed artifact, or
                  one conversion from the registry (or the Docker engine)
  release         drop this job step's hold on what `get` returned (Pyxis calls it twice)
  stage [--mode sbcast|shared] IMAGE_URI
                  (a job's first step, `imagekit launch slurm --stage`) fill the store once and pin
                  the entry for every node, or send it to node-local disk with sbcast
  stage-prepare SHA256 SIZE   (run by `stage` on every node) say whether the copy is there

Environment:
  IMAGEKIT_SHARED_STORE       the site's shared export store (published by CI)
  IMAGEKIT_TRUSTED_ARTIFACTS  REGISTRY/REPO patterns (comma-separated, * as in the shell) whose
                              pushed .sqsh artifacts are trusted
  IMAGEKIT_STORE              the user's own store (default ~/.cache/imagekit/store)
  IMAGEKIT_IMPORTER_PRESET    the conversion preset (shared-fs: 1 MiB blocks for a parallel FS)
  IMAGEKIT_POLICY             a site signature policy: handed to imagekit-pyxis-importer-signed

Set-up (a wrapper that sets the environment, named in Pyxis's plugstack.conf line):
  #!/bin/sh
  export IMAGEKIT_SHARED_STORE=/lustre/containers/imagekit-store
  exec /opt/imagekit/.venv/bin/python -I -m imagekit.export.pyxis_importer "$@"
  required /usr/lib/slurm/spank/pyxis.so importer=/usr/local/libexec/imagekit-importer
(-I: Pyxis runs the importer in the job's directory with the job's PYTHON* variables; isolated,
Python reads neither. docs/security.md, "The importer runs only imagekit's code".)

Example (as Pyxis calls it):
  SLURM_JOB_ID=1 SLURM_STEP_ID=0 {PROG} get 'docker://registry.example.org#hpc/mpi:1'

Exit status: 0 ok, 4 registry unreachable, 5 no artifact, 6 digest mismatch, 7 credentials,
8 no space, 10 image not found, 12 refused by the signature policy, 130 interrupted
(the table: `imagekit --help`)."""
SHARED_ENV = "IMAGEKIT_SHARED_STORE"
# A local engine's image (dockerd:// only), loaded by name: a registry hit never loads the engines.
ENGINE_IMAGE = "imagekit.engines.docker:image_attrs"
PRESET_ENV = "IMAGEKIT_IMPORTER_PRESET"
_NUMBER = re.compile(r"[0-9]+")


def log(message: str) -> None:
    """Progress for Pyxis's log (stderr), naming this node (a job's nodes share one log); stdout
    carries only the path. Control characters (a registry's or an image's text) are escaped."""
    print(f"{PROG} on {stage.host()}: {terminal.printable(message)}", file=sys.stderr, flush=True)


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
    return f"pyxis.{node_name()}.{uid}.{job}.{step or '0'}"


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


def stores(env: Mapping[str, str], *, strict: bool = False) -> tuple[Store | None, OwnStore]:
    """(the site's shared store or None, the user's own store). A shared store that is missing,
    or that someone outside its publishers could change, is skipped with a warning: the job
    still runs, from the user's own store. ``strict`` (a job pinned by its stage step): such a
    store is an error, naming this node, never a reason to convert here."""
    shared = None
    if env.get(SHARED_ENV):
        try:
            shared = store_mod.Store.open(env[SHARED_ENV], create=False)
        except ImagekitError as exc:
            if strict:
                raise stage.StageError(f"{stage.host()}: the shared store {env[SHARED_ENV]} is not usable from "
                                       f"this node: {exc.message}", exc.hint or "") from None
            log(f"warning: not using the shared store: {exc}")
    own = OwnStore(env)
    if shared is None:
        own.get()
        if own.problem is not None:
            raise own.problem
    return shared, own


def _serve(store: Store, image_id: str, name: str, *, sha256: str | None = None,
           prefer: str | None = None, accept: Callable[[Entry], object] | None = None) -> Entry | None:
    """A verified, held entry of ``image_id`` in ``store`` for a plain reference, or None. ``sha256``:
    only that entry (a job pinned by its stage step: every node starts the same bytes); ``prefer``: a
    preset tried first; ``accept(entry)`` may refuse it by raising (the hold is dropped): NotSealed or
    IntegrityError pass it over (a signature policy's "not this file": another may do), anything
    else stops the lookup."""
    entries = [e for e in store.servable(image_id, "enroot") if sha256 is None or e.sha256 == sha256]
    for entry in sorted(entries, key=lambda e: e.preset != prefer):
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
        if accept is not None:
            try:
                accept(entry)
            except (NotSealed, IntegrityError) as exc:
                store.release(entry, name)
                log(f"warning: not serving {entry.path} under the signature policy: {exc.message}")
                continue
            except BaseException:
                store.release(entry, name)   # refused: the hold goes with it
                raise
        return entry
    return None


def identify(uri: str, env: Mapping[str, str]) -> tuple[str, str | None]:
    """(image ID, manifest digest or None) of ``uri``: the engine's image, or the registry's,
    resolved by digest. The store keys its entries by the image ID."""
    if uri.startswith("dockerd://"):
        image = uri[len("dockerd://"):]
        if not image:
            raise UsageError("dockerd:// names no image", "e.g. dockerd://imagekit/debian-mpi:latest")
        attrs = lazy.load(ENGINE_IMAGE)(image)
        platforms.check_runs_here(platforms.Platform.of(attrs), uri)
        return attrs["Id"], None
    if uri.startswith("podman://"):
        raise UsageError(f"{uri}: podman:// images are not served by {PROG}",
                         "push the image to a registry, or use docker:// or dockerd://")
    ref = registry.parse(uri)
    client = registry.RegistryClient.for_reference(ref, env=dict(env))
    resolved = resolve_for_node(client, ref, uri)
    return resolved.config_digest, resolved.digest


def resolve_for_node(client: registry.RegistryClient, ref: registry.Reference, uri: str) -> registry.Resolved:
    """``ref`` resolved for this node: an index's entry for its architecture (none: an error
    naming what the index has), and a plain manifest's image checked against it (its config, read once
    per user and image: :mod:`imagekit.export.platform_cache`)."""
    resolved = client.resolve(ref, platforms.host())
    platform = resolved.platform or platform_cache.known(resolved.config_digest)
    if platform is None:
        platform = client.image_platform(resolved)
        platform_cache.remember(resolved.config_digest, platform)
    platforms.check_runs_here(platform, uri)
    return resolved


def site_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The job's environment plus what the site's Enroot configuration sets for a pull (plain HTTP,
    the credentials file, CA bundle, proxies): Pyxis strips those from the importer's environment,
    and ``enroot import`` reads them from enroot.conf (:mod:`imagekit.registry.enroot_config`)."""
    return enroot_config.site_environment(os.environ if env is None else env, lambda m: log(f"warning: {m}"))


# A check of the entry about to be served (:func:`imagekit.export.pyxis_policy.enforce`, by
# :mod:`imagekit.export.pyxis_signed`): (uri, image ID, manifest digest, entry, env); raises to refuse.
Accept = Callable[[str, str, "str | None", Entry, Mapping[str, str]], None]


def serve(uri: str, env: Mapping[str, str] | None = None, accept: Accept | None = None) -> Path | None:
    """A verified store entry of ``uri``, held for this job step (its path), or None on a miss
    (then :func:`imagekit.export.pyxis_fill.get` fills the store). See the module docstring.
    ``accept`` may refuse the entry (its hold is dropped, nothing is served)."""
    return find(uri, site_environment(env), accept)[0]


def find(uri: str, env: Mapping[str, str], accept: Accept | None = None) -> tuple[Path | None, str]:
    """(:func:`serve`'s answer, the image ID it resolved; "" for a staged copy). ``env`` is the
    job's with the site's Enroot settings (:func:`site_environment`)."""
    name = hold_name(env)
    # Under a signature policy only store entries are served (the policy checks an entry and the
    # statements beside it); a node-local staged copy is a job's own file, so it is passed over.
    local = staged(uri, env, log) if accept is None else None
    if local is not None:
        return local, ""
    image_id = pinned(uri, env)
    manifest_digest = None
    if image_id is None:
        image_id, manifest_digest = identify(uri, env)
    log(f"{uri}: image {image_id[:19]}…" + (f" (manifest {manifest_digest[:19]}…)" if manifest_digest
                                            else " (pinned by the job's stage step)"))
    check = None if accept is None else (lambda entry: accept(uri, image_id, manifest_digest, entry, env))
    wanted = Wanted(sha256=pinned_entry(uri, env), strict=pinned(uri, env) is not None)
    entry = lookup(image_id, env, name, wanted, accept=check)
    if entry is None and pinned(uri, env) is not None:
        # The stage step filled the store; a node that does not see the entry must not convert it
        # on its own (one conversion per node is what brings a big job's start down).
        raise stage.StageError(f"{stage.host()}: no store entry of {image_id[:19]}…, which the job's stage "
                               "step made: not converting it on this node",
                               "check that this node sees the shared store (IMAGEKIT_SHARED_STORE) and the "
                               "user's own store (IMAGEKIT_STORE) as the job's first node does")
    return (entry.path if entry is not None else None), image_id


def conversion_preset(env: Mapping[str, str]) -> str:
    """The preset the importer converts with: the site's choice (its wrapper's IMAGEKIT_IMPORTER_PRESET,
    e.g. shared-fs for 1 MiB blocks on a parallel file system), else the store's default."""
    return env.get(PRESET_ENV) or presets.DEFAULT_STORE_PRESET


class _MustConvert(Exception):
    """The converter being waited for is gone and this process got the lock: the fill program converts."""


def _no_conversion_here(path: Path) -> None:
    raise _MustConvert()


def await_conversion(image_id: str, env: Mapping[str, str]) -> Path | None:
    """A miss while another process converts this image into the store this user publishes to (another
    node of the job, typically): wait for it here, woken by its doorbell, and serve its entry, without
    loading the converters (nor resolving the image again) as the fill program would. None when nobody
    converts it, or the converter died: then this process must fill the store."""
    shared, own = stores(env)
    target = shared if shared is not None and shared.trust.can_publish() else own.get()
    if target is None:
        return None
    key = target.key(image_id, "enroot", conversion_preset(env))
    if locks.owner(target.root / "locks" / f"{key.slug}.lock") is None:
        return None
    try:
        entry, _ = target.get_or_create(key, _no_conversion_here, progress=log)
    except _MustConvert:
        return None
    target.hold(entry, hold_name(env))
    log(f"stored by another process: {entry.path}")
    return entry.path


@dataclass(frozen=True)
class Wanted:
    """Which entry a lookup may serve: only the file ``sha256`` names (the one a job's stage step
    pinned), the preset it ``prefer``s among several, and ``strict``: a shared store that cannot be
    used is an error rather than a fall back to the user's own (a job pinned by its stage step)."""

    sha256: str | None = None
    prefer: str | None = None
    strict: bool = False


def lookup(image_id: str, env: Mapping[str, str], name: str, wanted: Wanted = Wanted(),
           accept: Callable[[Entry], object] | None = None) -> Entry | None:
    """The verified entry of ``image_id`` that ``wanted`` allows, held as ``name``: the shared store's,
    else the user's own. ``accept(entry)`` may refuse it by raising (the hold is dropped)."""
    shared, own = stores(env, strict=wanted.strict)
    sha256, prefer = wanted.sha256, wanted.prefer
    if shared is not None:
        entry = _serve(shared, image_id, name, sha256=sha256, prefer=prefer, accept=accept)
        if entry is not None:
            return entry
    mine = own.get()
    if mine is not None and (shared is None or mine.root != shared.root):
        return _serve(mine, image_id, name, sha256=sha256, prefer=prefer, accept=accept)
    return None


def release(env: Mapping[str, str] | None = None) -> None:
    """Drop this job step's holds on this node, in both stores. Twice, or with nothing held, is fine."""
    env = os.environ if env is None else env
    name = hold_name(env)
    shared, own = stores(env)
    for store in (shared, own.get()):
        if store is not None:
            store.release(None, name)


def hand_over(argv: list[str], module: str = "imagekit.export.pyxis_fill") -> NoReturn:
    """A miss: this process becomes the fill program (exec, same pid, stdout, stderr and exit status
    for Pyxis), which loads the registry artifacts and the converters that a store hit never needs.
    Isolated (:mod:`imagekit.util.own_python`): it runs in the job's directory, which others may write."""
    own_python.become(module, argv)


def guarded(call: Callable[[], int]) -> int:
    """Run ``call`` the way Pyxis (and a job script) needs it: warnings and errors are single
    ``imagekit-pyxis-importer on HOST:`` lines on stderr, never a traceback, with the error's exit
    status."""
    notices.sink = lambda message: log(f"warning: {message}")
    try:
        return call()
    except ImagekitError as exc:
        log(error_line(exc.message, exc.hint))
        return exc.exit_code
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (`--help | head`): nothing more to say, and nobody to say it to.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:  # noqa: BLE001 - Pyxis shows stderr: one line, never a traceback
        log(error_line(f"{type(exc).__name__}: {exc} (a bug in {PROG}: please report it)"))
        return 1


def error_line(message: str, hint: str | None = None) -> str:
    """``error: MESSAGE (fix: HINT)`` on one line: Pyxis prefixes each line of the importer's log
    with its own tag, and a site greps for one line a failure."""
    text = f"error: {message}" + (f" (fix: {hint})" if hint else "")
    return " ".join(text.split("\n"))


def run_command(get: Callable[[str], Path], argv: list[str] | None = None,
                release: Callable[[], None] | None = None) -> int:
    """Run the importer's protocol the way Pyxis needs it (:func:`guarded`): `get URI` prints the path
    ``get`` returns, `release` (where given) drops this job's holds; other arguments print the usage
    (status 2)."""
    argv = sys.argv[1:] if argv is None else argv

    def call() -> int:
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

    return guarded(call)


def _serve_or_hand_over(uri: str) -> Path:
    env = site_environment()
    path, image_id = find(uri, env)
    if path is None and image_id:
        path = await_conversion(image_id, env)
    if path is None:
        hand_over(["get", uri])
    return path


def stage_prepare(argv: list[str], env: Mapping[str, str] | None = None) -> int:
    """``stage-prepare SHA256 SIZE`` on every node of the job: prints ``HOST have|need``."""
    env = os.environ if env is None else env
    if len(argv) != 2 or not argv[1].isdigit():
        raise UsageError(f"usage: {PROG} stage-prepare SHA256 SIZE")
    base = env.get("IMAGEKIT_STAGE_DIR")
    if not base:
        raise UsageError("IMAGEKIT_STAGE_DIR is not set", "the job's stage step sets it (node-local disk)")
    state = stage.prepare(Path(base), argv[0], int(argv[1]), env.get("SLURM_JOB_ID", ""))
    print(f"{stage.host()} {state}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["stage"]:
        # Resolving, filling the store and sbcast: the fill program's code, exec'd as on a miss.
        own_python.become("imagekit.export.pyxis_stage", argv[1:])
    if argv[:1] == ["stage-prepare"]:
        return guarded(lambda: stage_prepare(argv[1:]))
    if os.environ.get(POLICY_ENV):
        # A site signature policy is checked by imagekit-pyxis-importer-signed, which loads the
        # verification code this program spares the sites without one; never ignored (fail closed).
        log(f"{POLICY_ENV} is set: handing over to imagekit-pyxis-importer-signed (name it in the "
            "wrapper to save a start)")
        hand_over(argv, "imagekit.export.pyxis_signed")
    if argv[:1] == ["get"]:
        pyxis_unsigned.warn_once(os.environ, log)   # a policy kept by the site, left out of the wrapper
    return run_command(_serve_or_hand_over, argv, release=release)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
