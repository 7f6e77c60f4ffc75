"""The Pyxis importer's miss: fill the store with the image, hold the entry, print its path.

:mod:`imagekit.export.pyxis_importer` serves store hits and becomes this program (exec) on a miss,
so the converters and the registry artifacts load only when an image must be pulled or converted:
a pushed artifact from a trusted repository if there is one, else a conversion, once under the
store's lock (its module docstring says where it looks and what it trusts).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Mapping

from imagekit import registry
from imagekit.util import platforms
from imagekit.engines import docker as engine
from imagekit.util.errors import ArtifactMissing, IntegrityError, RegistryError, UsageError
from imagekit.export import ExportRequest, artifact_trust, artifacts, formats, pyxis_policy, squash
from imagekit.export.image_source import RegistrySource
from imagekit.export.output import ExportResult
from imagekit.export.pyxis_importer import (PROG, conversion_preset, hold_name, log, resolve_for_node, run_command,
                                           site_environment, stores)
from imagekit.export.pyxis_policy import Decision
from imagekit.export.store import ARTIFACT_OPTION, Entry, Store
from imagekit.export.store.sealed import NotSealed
from imagekit.export.store.base import Made


def get(uri: str, env: Mapping[str, str] | None = None) -> Path:
    """Put ``uri`` in the store this user may publish to (the shared store, else the user's own)
    and hold it; returns the entry's path. Called after the importer found no entry to serve."""
    env = site_environment(env)
    source = source_for(uri, env)
    # Under a signature policy: the image is checked before anything is pulled or converted.
    decision = pyxis_policy.check_image(uri, source.image_id, source.manifest_digest, env, log=log)
    return fill(source, env, hold_name(env), decision).path


def fill(source: "Source", env: Mapping[str, str], name: str, decision: Decision, preset: str | None = None) -> Entry:
    """The entry of ``source``, put in the store this user may publish to and held as ``name``;
    converted with ``preset`` (default :func:`_default_preset`) if it must be; under a signature
    policy (``decision``, :func:`imagekit.export.pyxis_policy.check_image`), only a file it allows."""
    shared, own = stores(env)
    mine = own.get()
    targets = [t for t in (shared if shared is not None and shared.trust.can_publish() else None, mine)
               if t is not None]
    if not targets:
        assert own.problem is not None
        raise own.problem
    if len(targets) == 2 and targets[0].root == targets[1].root:
        targets.pop()
    for target in targets:
        entry, made = _fill(target, source, env, decision, preset or _default_preset(env))
        try:
            pyxis_policy.check_served(decision, entry, target.stamps)
        except (NotSealed, IntegrityError) as exc:
            # Another publisher's entry, under a policy: never served, and not ours to replace; the
            # user's own store gets a copy this process checks (pulled or converted again).
            if target is targets[-1]:
                _, shown = pyxis_policy.name_of(decision.uri)
                raise pyxis_policy.Refused(shown, decision.digest, f"the file it would serve cannot be trusted: "
                                           f"{exc.message}") from None
            log(f"warning: not serving {entry.path} under the signature policy: {exc.message}; "
                "filling your own store instead")
            continue
        target.hold(entry, name)
        log(("stored" if made else "stored by another process") + f": {entry.path}")
        return entry
    raise AssertionError("unreachable: the last target serves or refuses")


def _default_preset(env: Mapping[str, str]) -> str:
    name = conversion_preset(env)
    squash.preset(name)          # an unknown name: UsageError naming the presets
    return name


Converter = Callable[[Path, str], ExportResult]   # its sha256 spares the store a second read of the file


class Source:
    """Where an image comes from: its ID, and how to fetch or convert it.

    ``converter()`` is asked only on a miss (a warm hit never probes for a Docker engine) and
    returns the key options that say which converter makes the entry, and the converter."""

    def __init__(self, image_id: str, manifest_digest: str | None,
                 pull_artifact: Callable[[Store, Decision], tuple[Entry, bool]] | None,
                 converter: Callable[[], tuple[tuple[str, ...], Converter]]) -> None:
        self.image_id = image_id
        self.manifest_digest = manifest_digest
        self.pull_artifact = pull_artifact
        self.converter = converter


def source_for(uri: str, env: Mapping[str, str]) -> Source:
    if uri.startswith("dockerd://"):
        return _engine_source(uri[len("dockerd://"):])
    if uri.startswith("podman://"):
        raise UsageError(f"{uri}: podman:// images are not served by {PROG}",
                         "push the image to a registry, or use docker:// or dockerd://")
    return _registry_source(uri, env)


def _engine_source(image: str) -> Source:
    if not image:
        raise UsageError("dockerd:// names no image", "e.g. dockerd://imagekit/debian-mpi:latest")
    attrs = engine.image_attrs(image)
    platforms.check_runs_here(platforms.Platform.of(attrs), f"dockerd://{image}")
    image_id = attrs["Id"]

    def convert(tmp: Path, preset: str) -> ExportResult:
        return _write_sqsh(image_id, tmp, preset)

    return Source(image_id, None, None, lambda: ((), convert))


def _registry_source(uri: str, env: Mapping[str, str]) -> Source:
    ref = registry.parse(uri)
    client = registry.RegistryClient.for_reference(ref, env=dict(env))
    resolved = resolve_for_node(client, ref, uri)

    def pull_artifact(store: Store, decision: Decision) -> tuple[Entry, bool]:
        return _pull_artifact(store, client, resolved, env, decision)

    def converter() -> tuple[tuple[str, ...], Converter]:
        # The engine pulls over plain HTTP only from a loopback registry (or one in its own daemon.json):
        # a registry the site's Enroot configuration allows plain HTTP to is converted straight from it.
        engine_can_pull = not client.plain_http or registry.client.insecure_reason(ref.registry, {}) is not None
        if engine_can_pull and engine.available():
            return (), lambda tmp, preset: _convert_with_engine(resolved.reference, resolved.config_digest,
                                                                tmp, preset)
        return (), lambda tmp, preset: _convert_from_registry(resolved.reference, tmp, preset, env)

    return Source(resolved.config_digest, resolved.digest, pull_artifact, converter)


def _pull_artifact(store: Store, client, resolved, env: Mapping[str, str], decision: Decision) -> tuple[Entry, bool]:
    """An enroot artifact of the image from a trusted repository (or, under a signature policy, one a
    verified statement names), checked, into ``store``."""
    ref = resolved.reference
    repository_trusted = artifact_trust.trusted(ref.registry, ref.repository, env) is not None
    if not repository_trusted and not decision.enforced:
        raise ArtifactMissing(f"artifacts of {ref.registry}/{ref.repository} are not used: the repository "
                              f"is not in {artifact_trust.ENV}")
    listed, _ = client.referrers(ref.repository, resolved.digest)
    candidates = artifact_trust.enroot_candidates(listed, resolved.config_digest, lambda m: log(f"warning: {m}"))
    if decision.enforced:   # under a policy, only a .sqsh a verified statement names
        candidates = [c for c in candidates if pyxis_policy.artifact_allowed(
            decision, (c.entry.get("annotations") or {}).get(artifacts.A_SHA256))]
    if not candidates:
        raise ArtifactMissing(f"no usable enroot artifact was pushed for {resolved.digest}")
    for candidate in candidates:
        try:
            key = store.key(resolved.config_digest, "enroot", candidate.preset, (ARTIFACT_OPTION,))
        except UsageError as exc:
            log(f"warning: skipping the enroot artifact {candidate.digest}: {exc.message}")
            continue

        def download(tmp: Path, candidate=candidate) -> Made:
            layer, _ = artifacts.checked_layer(client, ref.repository, resolved, candidate.entry, "enroot")
            log(f"pulling the pushed enroot artifact ({candidate.preset}) of {resolved.digest[:19]}…")
            with open(tmp, "xb") as fh:
                client.download_blob(ref.repository, layer["digest"], fh, size=int(layer["size"]))
            artifact_trust.check_squashfs(tmp)
            decision.save_beside(tmp)
            # download_blob hashed the bytes as it wrote them and checked them against this digest.
            return Made(layer["digest"].split(":", 1)[1])

        try:
            return store.get_or_create(key, download, progress=log, extra={
                "artifact": candidate.digest, "registry": ref.registry, "repository": ref.repository,
                "subject": resolved.digest})
        except (IntegrityError, RegistryError) as exc:
            log(f"warning: not using the enroot artifact {candidate.digest}: {exc.message}")
    raise ArtifactMissing(f"no pushed enroot artifact of {resolved.digest} passed the checks")


def _convert_with_engine(ref, image_id: str, tmp: Path, preset: str) -> ExportResult:
    log(f"pulling {ref.docker} into the Docker engine")
    engine.pull(ref.docker)
    return _write_sqsh(image_id, tmp, preset)


def _convert_from_registry(ref, tmp: Path, preset: str, env: Mapping[str, str]) -> ExportResult:
    """The digest-pinned image straight from the registry: no engine, nothing unpacked."""
    log(f"converting with no Docker engine, straight from the registry: {ref.docker}")
    return _write_sqsh(RegistrySource(f"docker://{ref.docker}", env=env), tmp, preset)


def _write_sqsh(image: "str | RegistrySource", tmp: Path, preset: str) -> ExportResult:
    """The store entry's file, as `imagekit export --to enroot --preset PRESET` writes it."""
    return formats.get("enroot").convert(image, tmp, ExportRequest("enroot", preset=preset, force=True))


def _fill(store: Store, source: Source, env: Mapping[str, str], decision: Decision,
          preset: str) -> tuple[Entry, bool]:
    """Put the image in ``store`` once: a trusted pushed artifact if any, else a conversion."""
    missing = None
    if source.pull_artifact is not None:
        try:
            return source.pull_artifact(store, decision)
        except ArtifactMissing as exc:
            missing = exc.message
            if not decision.enforced or (decision.rule is not None and decision.rule.convert):
                log(f"{exc.message}; converting")
    pyxis_policy.may_convert(decision, missing or "the engine's image has no pushed .sqsh")
    options, converter = source.converter()
    key = store.key(source.image_id, "enroot", preset, options)

    def convert(tmp: Path) -> ExportResult:
        made = converter(tmp, preset)
        decision.save_beside(tmp)
        log("converted and stored")
        return made

    return store.get_or_create(key, convert, progress=log)


def main(argv: list[str] | None = None) -> int:
    return run_command(get, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
