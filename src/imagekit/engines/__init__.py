"""The image engines imagekit builds, checks and exports with, behind one interface: :class:`Engine`.

``docker`` (:mod:`imagekit.engines.docker`: the Docker engine's BuildKit, the default) and
``podman`` (:mod:`imagekit.engines.podman`: Podman as the calling user, rootless). The CLI's
``--engine`` and the requests' ``engine_name`` are a name; :func:`of` turns it into the engine once,
and build, check, base and the pipeline ask it, never test the name. An engine is one module with
an object that has these members, plus one row in ``_ALL``.
"""

from __future__ import annotations

import inspect
import subprocess
from contextlib import AbstractContextManager
from typing import Mapping, Protocol, Sequence, runtime_checkable

from imagekit.engines import docker, podman
from imagekit.engines.image import BuildCommand, Image, ImageMissing
from imagekit.util.errors import UsageError

__all__ = ["ENGINES", "Engine", "Image", "ImageMissing", "of", "protocol_problems"]


@runtime_checkable
class Engine(Protocol):
    """What imagekit asks of an image engine."""

    name: str                      # the --engine value
    title: str                     # its name in a sentence ("Podman")
    store: str                     # where its images are, in a sentence ("the local engine")
    testinfra_backend: str         # testinfra's backend for its containers (``imagekit check``)
    build_log: str                 # the dialect of its build's output, which build reads: buildkit | buildah
    registry_cache: bool           # takes BuildKit's registry cache (--cache-from, --inline-cache)
    foreign_bases: bool            # imports a base image of another architecture (imagekit base --arch)
    devices: Mapping[str, Sequence[str]]   # hardware a check may need -> its container create options

    def cli(self) -> str:
        """The path of its command-line client."""

    def preflight(self) -> None:
        """The one clear error for what the host lacks, before anything is rendered or started."""

    def available(self) -> bool:
        """Whether it answers now (without raising): callers that can read a registry instead."""

    def version(self) -> str:
        """Its name and version, for a build's provenance."""

    def inspect(self, ref: str) -> Image:
        """The image; ImageMissing naming the store when it is not there."""

    def image_id(self, ref: str) -> str:
        """The image's ID (``sha256:…``, its config digest); ImageMissing when absent."""

    def image_exists(self, ref: str) -> bool: ...

    def tag(self, image: str, name: str) -> None:
        """Tag ``image`` (an id or a name) as ``name``."""

    def remove(self, *refs: str) -> None:
        """Untag/remove images; ones that are not there are skipped."""

    def throwaway(self, image: str, command: Sequence[str] = (), *, entrypoint: str | None = None,
                  options: Sequence[str] = (), idle: bool = False,
                  purpose: str = "tmp") -> AbstractContextManager[str]:
        """A container of ``image`` (its id or name), owner-labelled and removed however the ``with``
        body ends; created only, or with ``idle=True`` started with a shell that waits (for exec)."""

    def run_once(self, image: str, argv: Sequence[str], *,
                 timeout: float | None = None) -> subprocess.CompletedProcess:
        """``argv`` in a throwaway container of ``image``: its exit code and output."""

    def dockerfile(self, text: str) -> str:
        """The rendered Dockerfile as its builder can run it."""

    def build_argv(self, build: BuildCommand) -> list[str]:
        """The build's command line for ``build``."""

    def build_env(self) -> dict[str, str]:
        """The environment the build command runs in."""

    def export_source(self, name: str, image_id: str, *, pinned: bool = False) -> str:
        """What the exporter reads for an image of its store (:func:`imagekit.export.image_source.open_source`);
        ``pinned``: the very image ``image_id`` names, not whatever ``name`` tags later."""

    def command(self, words: str) -> str:
        """``words`` (``imagekit check IMAGE``) as the command line that reaches this engine's store."""

    def copy_hint(self, ref: str) -> str | None:
        """The command that copies ``ref`` from the Docker engine into its store; None for Docker's own."""


# One row per engine (its module is imported above): the first is the default.
_ALL: tuple[Engine, ...] = (docker.ENGINE, podman.ENGINE)
ENGINES = tuple(e.name for e in _ALL)


def of(name: str) -> Engine:
    """The engine called ``name``; UsageError naming the valid ones for any other."""
    for engine in _ALL:
        if engine.name == name:
            return engine
    raise UsageError(f"unknown engine {name!r}", f"use one of: {', '.join(ENGINES)}")


def protocol_problems(engine: object) -> list[str]:
    """What ``engine`` lacks of :class:`Engine`, in words: a missing member, or a method whose
    parameters (names, kinds, defaults) are not the protocol's. ``isinstance(engine, Engine)`` sees
    only that the names are there; callers pass keywords, so a renamed parameter breaks them too."""
    problems = []
    for name in sorted(Engine.__annotations__):
        if not hasattr(engine, name):
            problems.append(f"no attribute {name}")
    for name, want in inspect.getmembers(Engine, inspect.isfunction):
        if name.startswith("_"):
            continue
        have = getattr(engine, name, None)
        if not callable(have):
            problems.append(f"no method {name}")
            continue
        expected = [(p.name, p.kind, p.default) for p in inspect.signature(want).parameters.values()][1:]
        got = [(p.name, p.kind, p.default) for p in inspect.signature(have).parameters.values()]
        if got != expected:
            problems.append(f"{name}{inspect.signature(have)} is not {name}{inspect.signature(want)}")
    return problems
