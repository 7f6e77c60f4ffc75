"""``imagekit-pyxis-importer-signed``: the Pyxis importer with the site's signature policy in force.

The same program as :mod:`imagekit.export.pyxis_importer` (same protocol, stores, hits, holds and
fill), plus :mod:`imagekit.export.pyxis_policy` checking every hit before its path is printed; a miss
becomes :mod:`imagekit.export.pyxis_fill`, which checks the image before it pulls or converts anything
and the file before it prints it. A separate program so that sites without a policy never load the
verification code (its import is most of what a check costs), and a repeat hit loads it only when
the verdict recorded for it no longer holds (:mod:`imagekit.export.pyxis_verdicts`). The plain importer hands over to this
one whenever ``IMAGEKIT_POLICY`` is set, so a wrapper that names the plain one is slower, never open.

Site wrapper (docs/signing.md)::

    export IMAGEKIT_POLICY=/etc/imagekit/policy.yaml
    exec /opt/imagekit/.venv/bin/python -I -m imagekit.export.pyxis_signed "$@"
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

from imagekit.attest import POLICY_ENV
from imagekit.util import lazy
from imagekit.util.errors import UsageError
from imagekit.export import pyxis_verdicts
from imagekit.export.pyxis_importer import hand_over, log, release, run_command, serve
from imagekit.export.store import Entry

# The full check, loaded by name: a hit whose recorded verdict holds never imports it (nor YAML or cryptography).
ENFORCE = "imagekit.export.pyxis_policy:enforce"


def _accept(uri: str, image_id: str, manifest_digest: str | None, entry: Entry, env: Mapping[str, str]) -> None:
    if not pyxis_verdicts.spare(uri, image_id, manifest_digest, entry, env, log):
        lazy.load(ENFORCE)(uri, image_id, manifest_digest, entry, env, log=log)


def _get(uri: str) -> Path:
    if not os.environ.get(POLICY_ENV):
        raise UsageError(f"{POLICY_ENV} is not set: imagekit-pyxis-importer-signed needs the site's policy file",
                         "set it in the importer's wrapper, or use imagekit-pyxis-importer")
    path = serve(uri, accept=_accept)
    if path is None:
        hand_over(["get", uri])
    return path


def main(argv: list[str] | None = None) -> int:
    return run_command(_get, argv, release=release)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
