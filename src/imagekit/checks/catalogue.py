"""Which checks an image gets: its components', its stack file's, and the ones every image gets.

The kinds these are made of live in :mod:`.kinds`; the label writer (:mod:`imagekit.image_facts.writer`)
and the stack's ``show`` ask here, so the image carries the same list that ``imagekit check`` runs.
"""

from __future__ import annotations

from imagekit.checks.dlopen import closure_check
from imagekit.checks.kinds import Check, absent, ldd_closure, login_env

# Asked of every image: no secret may be baked into a layer.
NO_SECRETS = [
    absent("image.no_ssh_private_keys", "/root/.ssh/id_* /home/*/.ssh/id_* /etc/ssh/ssh_host_*_key",
           "no ssh private keys in the image"),
    absent("image.no_build_secrets", "/run/secrets/* /root/.docker/config.json /root/.pip/pip.conf",
           "no build secrets or registry credentials in the image"),
]
# Asked of every image: Enroot and Pyxis start commands through a login shell, as root and as users.
LOGIN_ENV = login_env("image.login_env", [0, 65534])


def stack_checks(stack, target: str = "runtime") -> list[Check]:
    """Every check for the ``target`` image: the components', the stack file's, and the generic ones.

    The devel image gets them all; the runtime image leaves out what only devel carries (nvcc).
    """
    out = []
    for component in stack.components.values():
        out += component.checks()
    prefixes = elf_prefixes(stack)
    generic = [ldd_closure("image.ldd_closure", prefixes)] if prefixes else []
    # What ldd cannot see: the names the components' libraries dlopen at run time.
    opens = [o for component in stack.components.values() for o in component.dlopens()]
    if opens:
        generic.append(closure_check(opens))
    return [c for c in out + list(stack.checks) + generic + NO_SECRETS + [LOGIN_ENV]
            if c.target is None or c.target == target]


def elf_prefixes(stack) -> list[str]:
    """The install prefixes the stack's components own (not /usr itself: dpkg keeps that closed)."""
    out: list[str] = []
    for component in stack.components.values():
        prefix = getattr(component, "prefix", None)
        if prefix and prefix not in ("/usr", "/usr/local") and prefix not in out:
            out.append(prefix)
    return out
