"""The export stage: an image → Enroot squashfs, SIF, or a registry.

``export_image`` is the one entry point the CLI and ``imagekit build --export``
use. The image comes from the local Docker engine, a registry, an OCI layout or a
``docker save`` tarball (:mod:`imagekit.export.image_source`). Each format is one row in
:mod:`imagekit.export.formats` naming its converter module; :mod:`imagekit.export.output` makes
every output atomic and checks free space before starting; :mod:`imagekit.export.store`
keeps each converted file once, keyed by image ID, format, preset and options.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from imagekit.util import lazy

if TYPE_CHECKING:
    from imagekit.export.output import ExportResult
    from imagekit.export.request import ExportRequest, StoreChoice, default_output, export_image, store_options

# name -> "module:attribute". The package is imported by everything under it (the Pyxis importer's hit,
# the store), so its own names load their module only when first asked for (imagekit.util.lazy).
NAMES: dict[str, str] = {
    "ExportRequest": "imagekit.export.request:ExportRequest",
    "StoreChoice": "imagekit.export.request:StoreChoice",
    "export_image": "imagekit.export.request:export_image",
    "default_output": "imagekit.export.request:default_output",
    "store_options": "imagekit.export.request:store_options",
    "ExportResult": "imagekit.export.output:ExportResult",
}


def __getattr__(name: str) -> Any:
    if name not in NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = lazy.load(NAMES[name])
    globals()[name] = value
    return value


__all__ = ["ExportRequest", "ExportResult", "export_image", "default_output"]
