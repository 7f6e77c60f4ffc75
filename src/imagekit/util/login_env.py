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
- a script in ``/etc/profile.d`` runs inside ``/etc/profile`` on Debian, Ubuntu, Alpine and
  the RHEL family, for root and for users, and does nothing under Docker and Apptainer,
  which start no login shell.

**Where it runs, and why there.** A login shell runs, in order: the base's ``/etc/profile``
(which may reset a variable), the scripts in ``/etc/profile.d`` in name order (the image's
own: module systems, conda, vendor tool chains add to ``PATH`` or ``LD_LIBRARY_PATH``), then
the user's ``~/.profile``. The script is named to run *first* in ``/etc/profile.d``
(``00-imagekit-…``: first in the C locale's order, and before the names bases and tools use,
e.g. Ubuntu's ``01-locale-fix.sh``, Lmod's ``00-modulepath.sh``), that is right after the body
of ``/etc/profile``. There it puts back each variable that
``/etc/environment`` names with the value the runtime started the shell with
(``/proc/$$/environ``: the image's value, or the user's ``--env``/``--container-env``, which
wins as Enroot documents). Every later script and ``~/.profile`` then works on the declared
value exactly as it would under ``enroot import`` of a base that does not reset it: the result
is ``enroot import``'s, minus the base's reset. Two other places were rejected: *last*
(``zz-``, imagekit before issue 34) undoes what the image's own profile.d scripts add
(``sitetool: not found`` under Pyxis where ``enroot import`` worked); "only when the value
still equals what /etc/profile set" needs that value, which only a script running at this
same first place can see. A profile.d script that sorts before ``00-imagekit`` and changes
a declared variable has that change undone, as every script's was before.

Names a shell refuses from its environment, or reads as its own settings, are never given
back (:data:`NEVER_RESTORED`; red-team finding G5): ``IFS``, the prompts ``PS0``–``PS4``
(bash ignores ``PS4`` from the environment when run as root: given back with ``SHELLOPTS=xtrace``
it ran a command substitution in root's login shell), ``ENV``, ``BASH_ENV`` and every
``BASH_*``, ``SHELLOPTS``, ``BASHOPTS``, ``PROMPT_COMMAND``, ``CDPATH``, ``GLOBIGNORE``, the
shell's read-only and counter names, and the script's own ``_imagekit_*``. Whatever value
the runtime gave them stays as the shell took it.

``imagekit build`` writes it in every stage (``_blocks.login_environment``), and ``imagekit
export --to enroot`` writes it into every ``.sqsh`` (:data:`PATH`), so an image imagekit did
not build is fixed on export rather than refused; both remove the old last-place script
(:data:`LEGACY_PATHS`) an image built by an older imagekit carries.
"""

from __future__ import annotations

import fnmatch
import functools
from pathlib import Path

PATH = "etc/profile.d/00-imagekit-environment.sh"
# Where imagekit before issue 34 wrote it (last in glob order): removed from builds and exports,
# so that an image built then stops undoing its own profile.d scripts once rebuilt or exported.
LEGACY_PATHS = ("etc/profile.d/zz-imagekit-environment.sh",)
SCRIPT_FILE = Path(__file__).parent.parent / "data" / "login-environment.sh"
# The script's own skip list, as shell patterns (tests/test_login_env.py holds the two together).
NEVER_RESTORED = ("IFS", "PS[0-9]", "ENV", "BASH_*", "SHELLOPTS", "BASHOPTS", "PROMPT_COMMAND", "CDPATH",
                  "GLOBIGNORE", "EXECIGNORE", "UID", "EUID", "PPID", "SHLVL", "OPTIND", "OPTARG", "LINENO",
                  "RANDOM", "SECONDS", "HISTCMD", "HISTFILE", "POSIXLY_CORRECT", "_", "_imagekit_*")


def never_restored(name: str) -> bool:
    """True for a variable the script leaves as the shell has it, whatever the image declares."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in NEVER_RESTORED)


@functools.lru_cache(maxsize=1)
def script() -> str:
    """The profile script's text (POSIX sh; dash, bash and busybox sh read it)."""
    return SCRIPT_FILE.read_text()
