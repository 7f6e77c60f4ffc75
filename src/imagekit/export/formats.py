"""The export formats: one row each, carrying everything that varies by format.

The export stage, the store, the registry artifacts, signing and ``imagekit build --export`` read
a format only from its row here, so an unknown format is refused the same way everywhere, before
any work starts, and a new format is one row plus one converter module (as an Apptainer assembler
is one module behind one interface). Nothing is derived from the table at import time: a row added
later (a test adds one) is seen by every reader.

A row names its converter as ``"module:function"``, loaded when an export converts
(:mod:`imagekit.util.lazy`): the export store, a store hit and the Pyxis importer read the
rows on every call and convert nothing, so they never load the converters and the tar pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Union

from imagekit.util import lazy
from imagekit.util.errors import UsageError
from imagekit.export import presets
from imagekit.registry.client import OCI_EMPTY

if TYPE_CHECKING:
    from pathlib import Path

    from imagekit.export.output import Convert, ConvertRequest, ExportResult

# Registry artifact media types (export/artifacts.py lays the manifests out). No type exists for an
# Enroot squashfs, so imagekit defines one; the SIF types are the ones Apptainer pushes (oras://).
ENROOT_ARTIFACT_TYPE = "application/vnd.imagekit.enroot.v1"
ENROOT_LAYER = "application/vnd.imagekit.enroot.layer.v1.squashfs"
SIF_CONFIG = "application/vnd.sylabs.sif.config.v1+json"     # Apptainer's oras:// config type
SIF_LAYER = "application/vnd.sylabs.sif.layer.v1.sif"         # Sylabs' registered SIF layer type


@dataclass(frozen=True)
class ArtifactKind:
    """How an export of the format travels as an OCI 1.1 artifact beside its image."""

    artifact_type: str
    config_media_type: str
    layer_media_type: str


@dataclass(frozen=True)
class Format:
    name: str
    suffix: str                  # of an exported file, with its dot
    mode: int                    # of an exported file, before the umask: a SIF runs as a program
    converter: Union[str, "Convert"]   # "module:function" (or the function): see convert()
    default_preset: str          # what a request naming none gets; the store keys entries by it
    presets: tuple[str, ...]     # the preset names the converter takes
    # The store's format version: bump it whenever imagekit writes the format differently, so
    # entries made by older code are neither served nor overwritten, and age out by LRU.
    store_version: int
    artifact: ArtifactKind | None = None     # None: not pushed as a registry artifact
    # A SIF carries its signature objects inside (`apptainer verify` reads them); any other file's
    # signature is a bundle beside it.
    signed_inside: bool = False
    vias: tuple[str, ...] = ("native",)      # the ways it can be written (--via)
    preset_noun: str = "compression preset"  # in the error for an unknown preset
    preset_hint: str = ""                    # that error's hint (default: the names)

    def load_converter(self) -> Convert:
        """The converter function the row names (its module is imported now, on the first export)."""
        return lazy.load(self.converter) if isinstance(self.converter, str) else self.converter

    def convert(self, source, target: Path, request: ConvertRequest, *,
                progress: Callable[[int, bool], None] | None = None) -> ExportResult:
        """Write ``source`` as this format at ``target``, atomically, as ``request`` says
        (:class:`imagekit.export.output.Convert`)."""
        return self.load_converter()(source, target, request, progress=progress)

    def check_preset(self, name: str) -> None:
        """UsageError unless ``name`` is one of this format's presets."""
        if name not in self.presets:
            raise UsageError(f"unknown {self.preset_noun} {name!r}",
                             self.preset_hint or f"use one of: {', '.join(self.presets)}")


# The enroot default preset follows from bench/compression.py (docs/export.md, "Compression presets").
FORMATS: dict[str, Format] = {
    "enroot": Format("enroot", ".sqsh", 0o644, "imagekit.export.enroot:convert", presets.DEFAULT_PRESET,
                     tuple(presets.PRESETS), store_version=4,
                     artifact=ArtifactKind(ENROOT_ARTIFACT_TYPE, OCI_EMPTY, ENROOT_LAYER)),
    # 0o755: sif_reader.FILE_MODE, which tests/export/test_formats.py holds equal (importing the reader
    # here would load it, and uuid, on every importer start).
    "sif": Format("sif", ".sif", 0o755, "imagekit.export.sif:convert", presets.SIF_DEFAULT,
                  presets.SIF_COMPRESSIONS, store_version=3, artifact=ArtifactKind(SIF_CONFIG, SIF_CONFIG, SIF_LAYER),
                  signed_inside=True, vias=("native", "apptainer"), preset_noun="SIF compression",
                  preset_hint=presets.SIF_COMPRESSIONS_HINT),
}


def get(name: str) -> Format:
    """The format ``name``; a UsageError naming the valid ones otherwise."""
    if name not in FORMATS:
        raise UsageError(f"unknown export format {name!r}", f"use one of: {', '.join(FORMATS)}")
    return FORMATS[name]


def names() -> tuple[str, ...]:
    """Every format's name, in the table's order."""
    return tuple(FORMATS)


def with_artifacts() -> tuple[str, ...]:
    """The formats pushed as registry artifacts."""
    return tuple(name for name, row in FORMATS.items() if row.artifact is not None)


def vias() -> tuple[str, ...]:
    """Every way some format can be written (``--via``), ``native`` first."""
    return tuple(dict.fromkeys(via for row in FORMATS.values() for via in row.vias))


def signed_inside(name: str) -> bool:
    """Whether an export of format ``name`` carries its signature inside the file (else: a bundle beside it)."""
    return get(name).signed_inside
