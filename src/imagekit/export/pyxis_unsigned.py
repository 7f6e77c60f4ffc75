"""Unsigned by omission, said out loud: the plain importer warns once per job when its wrapper sets no
signature policy (``IMAGEKIT_POLICY``) although the site keeps one in its usual place.

A site that writes ``/etc/imagekit/policy.yaml`` and forgets the wrapper's ``export IMAGEKIT_POLICY=...``
line had every unsigned image served with no word (review 4). The check is a ``stat`` of the usual
places, so the importer's hit path stays as fast; the warning goes to stderr, which Pyxis shows in the
job's output, once per job (a marker file per user and job, created exclusively), not on every step.
``imagekit doctor`` shows the whole set-up on one screen.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping

from imagekit.attest import POLICY_ENV

# Where docs/signing.md puts a site's policy; a policy anywhere else is named by the wrapper only.
SITE_POLICY_FILES = (Path("/etc/imagekit/policy.yaml"), Path("/etc/imagekit/policy.yml"),
                     Path("/etc/imagekit/policy.json"))


def site_policy(files: tuple[Path, ...] | None = None) -> Path | None:
    """The site's policy file in its usual place (``files``: :data:`SITE_POLICY_FILES`), if there is one."""
    return next((f for f in (files if files is not None else SITE_POLICY_FILES) if f.is_file()), None)


def warn_once(env: Mapping[str, str], say: Callable[[str], None], *,
              files: tuple[Path, ...] | None = None, markers: Path | None = None) -> bool:
    """Say, once for this user and job, that no policy is in force while the site has one; True when said.
    Outside a job (no ``SLURM_JOB_ID``) it is said every time."""
    if env.get(POLICY_ENV):
        return False
    found = site_policy(files)
    if found is None:
        return False
    job = env.get("SLURM_JOB_ID", "")
    if job.isdigit():
        import tempfile   # here: only a job under a kept policy pays for it (and random, which it loads)
        where = markers if markers is not None else Path(tempfile.gettempdir())
        marker = where / f"imagekit-unsigned-warned-{os.getuid()}-{job}"
        try:
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        except FileExistsError:
            return False
        except OSError:
            pass   # no marker to be had: say it anyway
    say(f"warning: no signature policy is in force ({POLICY_ENV} is not set in this importer's "
        f"environment), yet the site has {found}: unsigned images are served (fix: in the importer's "
        f"wrapper, `export {POLICY_ENV}={found}` and exec imagekit-pyxis-importer-signed; `imagekit doctor` "
        f"shows the set-up)")
    return True
