"""The image's environment under Enroot's login shell: the one profile script that keeps it.

Enroot (and so Pyxis) starts every command through a login shell (``ENROOT_LOGIN_SHELL``,
default yes), which runs the image's ``/etc/profile``. Debian's sets ``PATH`` unconditionally,
so an image's ``ENV PATH`` (which Enroot writes to ``/etc/environment``) is lost before the
command runs; ``docker run`` starts no login shell and never shows it. The fix has to live in
the image, because sites run the same image three ways:

- a host-side Enroot hook or ``ENROOT_LOGIN_SHELL=no`` would need every cluster's admin to
  install it, and would not travel with the image;
- ``/etc/rc`` (which runs after the profile) is rewritten by every ``enroot import``, so it
  helps only imagekit's own exports, not Pyxis pulling the image from a registry;
- a script in ``/etc/profile.d`` runs at the end of ``/etc/profile`` on Debian, Ubuntu and
  the RHEL family, for root and for users, and does nothing under Docker and Apptainer,
  which start no login shell. It puts back each variable ``/etc/environment`` names with
  the value the runtime started the shell with (``/proc/$$/environ``), so a user's
  ``--env``/``--container-env`` value still wins over the image's, as Enroot documents.

``imagekit build`` writes it as the last step of every stage (``_blocks.login_environment``),
and ``imagekit export --to enroot`` writes it into every ``.sqsh`` (:data:`PATH`), so an
image imagekit did not build is fixed on export rather than refused.
"""

from __future__ import annotations

import functools
from pathlib import Path

# Last in glob order, so it also undoes another profile.d script's change to a declared variable;
# a user's own ~/.profile still runs after it.
PATH = "etc/profile.d/zz-imagekit-environment.sh"
SCRIPT_FILE = Path(__file__).parent / "data" / "login-environment.sh"


@functools.lru_cache(maxsize=1)
def script() -> str:
    """The profile script's text (POSIX sh; dash, bash and busybox sh read it)."""
    return SCRIPT_FILE.read_text()
