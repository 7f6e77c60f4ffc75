"""Talking to OCI registries: references, credentials and the distribution API.

``parse`` reads every reference form Pyxis and Enroot pass; ``RegistryClient``
resolves it to a manifest digest, moves manifests and blobs with their digests
checked, and lists referrers. The export artifacts (imagekit.export.artifacts)
and the Pyxis importer build on these.
"""

from __future__ import annotations

from imagekit.registry.client import (ACCEPT_ALL, OCI_EMPTY, OCI_INDEX, OCI_MANIFEST, Manifest, NotFound,
                                      RegistryClient, Resolved, referrers_tag, sha256_digest)
from imagekit.registry.reference import Reference, parse

__all__ = ["ACCEPT_ALL", "OCI_EMPTY", "OCI_INDEX", "OCI_MANIFEST", "Manifest", "NotFound", "Reference", "RegistryClient",
           "Resolved", "parse", "referrers_tag", "sha256_digest"]
