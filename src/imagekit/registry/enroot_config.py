"""A site's Enroot configuration, as ``enroot import`` sees it: what changes a pull.

Pyxis gives the programs it runs (Enroot, and an ``importer=``) the job's environment minus
``ENROOT_ALLOW_HTTP``, ``ENROOT_*_PATH`` and a few others (pyxis_slurmstepd.c,
``enroot_deny_env``). Enroot itself then reads its settings from its configuration files, so a
site allows a plain-HTTP registry, or puts the credentials somewhere, there. The Pyxis importer
reads the same files (:func:`site_environment`), so that it pulls what ``enroot import`` pulls
with no setting of its own.

What Enroot 4.1.2 does (the ``enroot`` script's config functions), and what is kept here:

- the file is ``SYSCONFDIR/enroot.conf`` (``/etc/enroot/enroot.conf`` as Enroot installs it;
  :data:`CONF_ENV` names another), then every ``enroot.conf.d/*.conf`` in name order;
- a line is ``NAME VALUE`` (or ``NAME=VALUE``): the name runs to the first blank or ``=``, the
  value is the rest, trailing blanks dropped; other lines (comments) name nothing Enroot reads;
- the value goes through the shell (``eval echo VALUE``, as the job's user, with the job's
  environment): ``$HOME``, ``$(id -u)`` and quotes work as in Enroot;
- a variable already set (not empty) in the environment is kept, and so is the first value the
  files give: a later file does not replace an earlier one;
- an ``ENROOT_*`` value that is a false word (``n``, ``no``, ``false``, ...) counts as unset.

Only :data:`PULL_SETTINGS` are read: plain HTTP, where the credentials file is, the CA bundle
and the proxies. The timeouts, retries and connection counts keep imagekit's own values
(:mod:`imagekit.registry.client`), and the squashfs options are the store's preset, which the
store key names. A value runs through the shell only when it needs to, and only from a file
that belongs to root (or this user) and that no one else may write: another user could
otherwise put code into every job that reads it. Such a file is skipped with a warning.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from imagekit.util.errors import UsageError

CONF = Path("/etc/enroot/enroot.conf")
CONF_ENV = "IMAGEKIT_ENROOT_CONF"
PULL_SETTINGS = ("ENROOT_ALLOW_HTTP", "ENROOT_CONFIG_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR",
                 "http_proxy", "https_proxy", "all_proxy", "no_proxy")
FALSE_VALUE = re.compile(r"no?|N[oO]?|[fF](alse)?|FALSE")
# A value the shell would give back unchanged: no expansion, quote, glob or blank in it.
_LITERAL = re.compile(r"[A-Za-z0-9_./:,@%+=-]*")
_NAME_END = re.compile(r"[ \t=]")
# The shell's half: `eval echo VALUE` joins the words with one space, as `set -- VALUE; "$*"` does.
_EXPAND = 'eval "set -- $1" && printf "%s" "$*"'


@dataclass(frozen=True)
class Setting:
    name: str
    raw: str
    file: Path
    line: int


def conf_file(env: Mapping[str, str]) -> Path:
    return Path(env.get(CONF_ENV) or CONF)


def files(conf: Path) -> list[Path]:
    """Enroot's order: the file, then its drop-ins by name (the C locale's order)."""
    drop_ins = conf.with_name(conf.name + ".d")
    found = sorted(drop_ins.glob("*.conf"), key=lambda p: p.name.encode()) if drop_ins.is_dir() else []
    return [conf, *found]


def parse_line(text: str) -> tuple[str, str] | None:
    """(name, raw value) of one line as Enroot's ``read`` splits it, or None when it names nothing."""
    text = text.lstrip(" \t")
    m = _NAME_END.search(text)
    name, rest = (text, "") if m is None else (text[:m.start()], text[m.start():])
    if not name:
        return None
    rest = rest.lstrip(" \t")
    if rest.startswith("="):
        rest = rest[1:].lstrip(" \t")
    return name, rest.rstrip(" \t\r")


def _trusted(path: Path) -> str | None:
    """Why ``path`` must not run through the shell, or None."""
    st = path.stat()
    if st.st_uid not in (0, os.getuid()):
        return f"it belongs to uid {st.st_uid}, not root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "others may write it"
    return None


def settings(conf: Path, warn: Callable[[str], None] | None = None) -> list[Setting]:
    """Every line of ``conf`` and its drop-ins that sets one of :data:`PULL_SETTINGS`, in order."""
    out: list[Setting] = []
    for path in files(conf):
        try:
            text = path.read_text(errors="replace")
            problem = _trusted(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            if warn is not None:
                warn(f"not reading Enroot's configuration {path}: {exc.strerror or exc}")
            continue
        if problem is not None:
            if warn is not None:
                warn(f"not reading Enroot's configuration {path}: {problem}")
            continue
        for number, line in enumerate(text.splitlines(), 1):
            parsed = parse_line(line)
            if parsed is not None and parsed[0] in PULL_SETTINGS:
                out.append(Setting(parsed[0], parsed[1], path, number))
    return out


def expand(setting: Setting, env: Mapping[str, str]) -> str:
    """The value as Enroot's ``eval echo`` gives it, run by the shell as this user with ``env``."""
    if _LITERAL.fullmatch(setting.raw):
        return setting.raw
    import subprocess   # here: a literal setting (the usual one) starts no shell, and the importer no module
    try:
        proc = subprocess.run(["/bin/bash", "-c", _EXPAND, "enroot.conf", setting.raw], env=dict(env),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"{setting.file}:{setting.line}: {setting.name}: the shell could not expand "
                         f"{setting.raw!r}: {exc}") from None
    if proc.returncode != 0:
        said = " ".join(proc.stderr.split())[:200]
        raise UsageError(f"{setting.file}:{setting.line}: {setting.name}: the shell could not expand "
                         f"{setting.raw!r}: {said or f'exit {proc.returncode}'}",
                         "fix the line: `enroot import` fails on it as well")
    return proc.stdout


def read(env: Mapping[str, str], warn: Callable[[str], None] | None = None) -> dict[str, str]:
    """The :data:`PULL_SETTINGS` that Enroot's configuration adds to ``env`` (names ``env`` already
    sets, non-empty, are not read); an ``ENROOT_*`` false word is left out, as Enroot unsets it."""
    found: dict[str, str] = {}
    for setting in settings(conf_file(env), warn):
        if env.get(setting.name) or found.get(setting.name):
            continue
        found[setting.name] = expand(setting, {**env, **found})
    return {k: v for k, v in found.items() if not (k.startswith("ENROOT_") and FALSE_VALUE.fullmatch(v))}


def site_environment(env: Mapping[str, str], warn: Callable[[str], None] | None = None) -> dict[str, str]:
    """``env`` with what the site's Enroot configuration sets for a pull, as ``enroot import`` has it."""
    return {**env, **read(env, warn)}
