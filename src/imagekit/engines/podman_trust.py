"""Podman's configuration and store: used only when nobody but root and the calling user can change them.

imagekit runs ``podman`` as the calling user. What Podman does is decided by files another user may be
able to write:

- its configuration: ``containers.conf`` names the programs it runs (``conmon_path``, the OCI runtime,
  helper binaries, the environment it sets for itself) and ``storage.conf`` where its store is and
  its mount program. Podman 4.3 runs ``conmon --version`` at the start of every command, so a
  ``containers.conf`` another user wrote (under a shared ``$XDG_CONFIG_HOME``, a group-writable
  ``~/.config``, ``$CONTAINERS_CONF`` in a CI template) runs their program as the user, or as root;
- its store (graph root, run root, and libpod's static, tmp and volume directories). Podman makes
  them with ``MkdirAll``: a directory another user made first at that path (a ``graphroot`` in
  ``/tmp`` or ``/var/tmp``, as HPC sites configure for a home on NFS) is used as it is, and its owner
  can rename the store's tables aside for their own. The image records are plain files, so they
  give ``NAME`` their config (entrypoint, environment, labels) over the user's own layers, and the
  export and its signature carry it.

So, before the first podman command of a process (:func:`ensure`, from :func:`podman.cli`), every
configuration file Podman 4.3 to 5 would read, and the directory it would be made in when absent,
must pass :mod:`imagekit.util.trusted_files`'s rule (root's or the user's, from ``/`` down, writable
by nobody else; sticky directories above are fine). Then one cheap podman command, at debug level,
says where the store is and which configuration files it merged; each of those must pass too.
A refusal is one line naming the path, what is wrong with it and what to do.
"""

from __future__ import annotations

import ast
import os
import pwd
import re
import subprocess
from pathlib import Path
from typing import Iterator, Mapping

from imagekit.util import trusted_files
from imagekit.util.errors import EngineError
from imagekit.util.owners import describe, user_name

# The variables that choose Podman's configuration and store: a change of one is checked again.
ENV = ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR", "CONTAINERS_CONF",
       "CONTAINERS_CONF_OVERRIDE", "CONTAINERS_STORAGE_CONF")
# The system's configuration directories (Podman 4.3 to 5 read files and drop-in directories there).
SYSTEM_DIRS = (Path("/usr/share/containers"), Path("/etc/containers"))
MAX_ENTRIES = 1000          # files below one configuration directory that are checked, at most
# What podman says, at debug level, about where its store is (libpod's runtime.go, Podman 1 to 5).
STORE_LINES = {"graph root": "Podman's graph root (its images and layers)", "run root": "Podman's run root",
               "static dir": "Podman's static directory", "tmp dir": "Podman's tmp directory",
               "volume path": "Podman's volume directory"}
_USING = re.compile(r'msg="Using (graph root|run root|static dir|tmp dir|volume path) ((?:[^"\\]|\\.)*)"')
_MERGED = re.compile(r'msg="Merged system config \\"((?:[^"\\]|\\.)*)\\""')
CONFIG_FIX = "keep Podman's configuration below a directory of your own ($XDG_CONFIG_HOME, $CONTAINERS_CONF)"
STORE_FIX = "choose a store below a directory of your own (graphroot or rootless_storage_path in storage.conf)"
PROBE = "localhost/imagekit-store-probe"     # an image nobody has: the probe looks it up and stops

_CHECKED: set[tuple] = set()


def ensure(podman: str, env: Mapping[str, str] | None = None) -> None:
    """Refuse (:class:`trusted_files.UntrustedFile`, one line) Podman configuration or a Podman store that
    someone other than root or this user can change; once per process for one binary and environment."""
    env = os.environ if env is None else env
    key = (podman, os.geteuid(), *(env.get(v) for v in ENV))
    if key in _CHECKED:
        return
    for path, what in config_paths(env):
        _check(path, what, CONFIG_FIX)
    for path, what in expected_store(env):      # before podman makes anything there
        _check(path, what, STORE_FIX)
    store, merged = probe(podman, env)
    for path in merged:
        _check(path, "Podman configuration", CONFIG_FIX)
    for name, path in store.items():
        _check(path, STORE_LINES[name], STORE_FIX)
    _CHECKED.add(key)


def rootless() -> bool:
    return os.geteuid() != 0


def user_config_dir(env: Mapping[str, str]) -> Path:
    """``${XDG_CONFIG_HOME:-$HOME/.config}/containers``, which only a rootless Podman reads (its home
    from the user database when HOME is not set, as Podman's)."""
    home = env.get("HOME") or pwd.getpwuid(os.geteuid()).pw_dir
    return Path(env.get("XDG_CONFIG_HOME") or f"{home}/.config") / "containers"


def config_paths(env: Mapping[str, str]) -> Iterator[tuple[Path, str]]:
    """(path, what it is) for each configuration file or directory Podman would read, whether it is
    there or not: the files the environment names, the system directories, and (rootless) the user's
    own, with everything below them (drop-ins, ``storage.conf``, ``mounts.conf``, registries)."""
    for var in ("CONTAINERS_CONF", "CONTAINERS_CONF_OVERRIDE", "CONTAINERS_STORAGE_CONF"):
        if env.get(var):
            yield Path(env[var]), f"Podman configuration (${var})"
    for directory in (*SYSTEM_DIRS, *([user_config_dir(env)] if rootless() else [])):
        yield directory, "Podman configuration directory"
        for count, path in enumerate(_below(directory)):
            if count >= MAX_ENTRIES:
                raise EngineError(f"Podman configuration directory {directory} holds more than {MAX_ENTRIES} "
                                  "files; imagekit checks each one it could read", f"clean {directory} up")
            yield path, "Podman configuration"


def expected_store(env: Mapping[str, str]) -> Iterator[tuple[Path, str]]:
    """Where the store should be, read from the configuration as containers/storage reads it (the
    environment's file, else the system's; rootless: then the user's, ``rootless_storage_path`` with
    $UID and the environment's variables, $XDG_DATA_HOME, $XDG_RUNTIME_DIR). Only the keys that place the store, read
    from files already checked; the probe's answer (:func:`probe`) is the one that decides, this one
    stops the common case (a graph root in /tmp another user made first) before podman makes a
    directory in it."""
    system = Path(env["CONTAINERS_STORAGE_CONF"]) if env.get("CONTAINERS_STORAGE_CONF") else next(
        (p for p in (Path("/etc/containers/storage.conf"), Path("/usr/share/containers/storage.conf")) if p.is_file()),
        None)
    keys = _storage_keys(system)
    if not rootless():
        yield Path(keys.get("graphroot") or "/var/lib/containers/storage"), STORE_LINES["graph root"]
        yield Path(keys.get("runroot") or "/run/containers/storage"), STORE_LINES["run root"]
        return
    home = env.get("HOME") or pwd.getpwuid(os.geteuid()).pw_dir
    graph = _expand(keys["rootless_storage_path"], env) if keys.get("rootless_storage_path") else None
    own = _storage_keys(system if env.get("CONTAINERS_STORAGE_CONF") else user_config_dir(env) / "storage.conf")
    if own.get("rootless_storage_path") or own.get("graphroot"):
        graph = _expand(own.get("rootless_storage_path") or own["graphroot"], env)
    data = env.get("XDG_DATA_HOME") or f"{home}/.local/share"
    yield Path(graph or f"{data}/containers/storage"), STORE_LINES["graph root"]
    if own.get("runroot"):
        yield Path(_expand(own["runroot"], env)), STORE_LINES["run root"]
    if env.get("XDG_RUNTIME_DIR"):
        yield Path(env["XDG_RUNTIME_DIR"]), "the runtime directory ($XDG_RUNTIME_DIR: Podman's run root and tmp directory)"


# A key that places the store, as a TOML basic string without escapes or a literal string.
_KEY = re.compile(r"""^\s*(graphroot|runroot|rootless_storage_path)\s*=\s*(?:"([^"\\]*)"|'([^']*)')\s*(?:#.*)?$""", re.M)


def _storage_keys(path: Path | None) -> dict[str, str]:
    """The keys that place the store, from one storage.conf ({} when it cannot be read). Another form
    (an escape, a quoted key) is not read here: Podman's own answer (:func:`probe`) is checked then, and
    a link on the way is judged by where it leads at that moment (docs/security.md, "Rootless Podman")."""
    try:
        text = path.read_text() if path is not None else ""
    except (OSError, UnicodeDecodeError):
        return {}
    return {m.group(1): m.group(2) if m.group(2) is not None else m.group(3) for m in _KEY.finditer(text)}


def _expand(value: str, env: Mapping[str, str]) -> str:
    """A store path as containers/storage expands it: $UID, then the environment's variables (Go's
    os.ExpandEnv: ``$NAME`` or ``${NAME}``, empty when unset)."""
    value = value.replace("$UID", str(os.geteuid()))
    return re.sub(r"\$\{([^}]*)\}|\$([A-Za-z0-9_]+)", lambda m: env.get(m.group(1) or m.group(2), ""), value)


def _below(directory: Path) -> Iterator[Path]:
    """Everything below ``directory``, links not followed (each is checked, with where it leads)."""
    for root, subdirs, files in os.walk(directory):
        for name in sorted(subdirs) + sorted(files):
            yield Path(root) / name


def probe(podman: str, env: Mapping[str, str]) -> tuple[dict[str, Path], list[Path]]:
    """(where the store's parts are, the configuration files podman merged), from one podman command at
    debug level (a look-up of an image nobody has: about 0.1 s, against 0.6 s for ``podman info``,
    which runs conmon, the OCI runtime and slirp4netns to ask their versions)."""
    try:
        proc = subprocess.run([podman, "--log-level=debug", "image", "exists", PROBE], capture_output=True,
                              text=True, env=dict(env), timeout=300, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"podman could not be asked where its store is: {exc}") from None
    store = {m.group(1): Path(_unquote(m.group(2))) for m in _USING.finditer(proc.stderr)}
    merged = [Path(_unquote(m.group(1))) for m in _MERGED.finditer(proc.stderr)]
    if not {"graph root", "run root"} <= set(store):
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise EngineError(f"podman did not say where its store is ({podman} --log-level=debug image exists "
                          f"{PROBE}: {last})", "check that `podman info` works for this user")
    return store, merged


def _unquote(text: str) -> str:
    """A value as Go's %q and logrus's quoting escaped it (a Python string literal reads it back)."""
    return ast.literal_eval(f'"{text}"') if "\\" in text else text


def _check(path: Path, what: str, elsewhere: str) -> None:
    """:class:`trusted_files.UntrustedFile` naming ``path`` when someone other than root or this user can
    change it or, where it is not there yet, make it; ``elsewhere``: how to choose another path."""
    found = trusted_files.problem(path, made=True)
    if found is None:
        return
    where, st, wrong = found
    me = user_name(os.geteuid())
    owners = "root" if me == "root" else f"root or {me}"
    at = "" if where == Path(os.path.abspath(path)) else f": {where}"
    if st.st_uid not in (0, os.geteuid()):
        fix = f"{user_name(st.st_uid)} made {where}: {elsewhere}, or have an admin remove it"
    elif not os.path.lexists(path):
        fix = f"make {path} yourself first (mkdir -p -m 0700 {path}), or {elsewhere}"
    else:
        fix = f"{'an admin: ' if st.st_uid != os.geteuid() else ''}chmod go-w {where}, or {elsewhere}"
    raise trusted_files.UntrustedFile(
        f"{what} {path}{at} {wrong} ({describe(st)}): whoever can change it chooses the programs podman runs "
        f"and the images it gives, so imagekit does not use it",
        f"{fix}; it and every directory above it must be {owners}'s and writable by nobody else "
        "(docs/security.md, \"Rootless Podman\")")
