"""Registry credentials: Enroot's credentials file first, Docker's config.json second.

Enroot reads ``$ENROOT_CONFIG_PATH/.credentials`` (default
``${XDG_CONFIG_HOME:-$HOME/.config}/enroot/.credentials``), netrc lines of the form
``machine HOST login USER password PASSWORD`` with HOST the registry (or token
server) without its port. A password starting with ``$`` is the rest of the line,
expanded by the shell like Enroot does (``password $(aws ecr get-login-password)``);
because that runs the file's text, imagekit expands it only when the file belongs
to the user (or root) and nobody else can write it. Enroot's rules are kept: a
``USER@`` in the reference picks that login, otherwise the first entry for the
host is used.

Docker's ``$DOCKER_CONFIG/config.json`` (default ``~/.docker/config.json``) is the
fallback: ``credHelpers``/``credsStore`` through their ``docker-credential-NAME get``
protocol, then ``auths``' base64 ``user:password``.

These two are the only sources: ``~/.netrc`` is not one (the client's transport never reads it). Which credential goes to which origin (the registry, its token
server) is decided in :mod:`imagekit.registry.client`.

A :class:`Credential` never shows its password: not in ``repr``, errors or logs.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.util.errors import CredentialsError

HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")


@dataclass(frozen=True)
class Credential:
    user: str
    password: str = field(repr=False)
    source: str = ""              # where it came from, for messages ("~/.config/enroot/.credentials:3")

    def __str__(self) -> str:
        return f"user {self.user!r} from {self.source}"


def enroot_credentials_file(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    config = env.get("ENROOT_CONFIG_PATH")
    if not config:
        xdg = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
        config = str(Path(xdg) / "enroot")
    return Path(config) / ".credentials"


def docker_config_file(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("DOCKER_CONFIG") or str(Path(env.get("HOME") or Path.home()) / ".docker")
    return Path(base) / "config.json"


def _host(name: str) -> str:
    """Enroot's ``${registry%:*}``: the host without its port."""
    if name.startswith("["):
        return name.split("]", 1)[0] + "]"
    return name.rsplit(":", 1)[0]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except (PermissionError, IsADirectoryError, UnicodeDecodeError) as exc:
        raise CredentialsError(f"cannot read the credentials file {path}: {exc.strerror or exc}",
                               f"make it readable by this user (chmod 600 {path}) or remove it") from None


@dataclass(frozen=True)
class _Entry:
    machine: str
    login: str
    password: str = field(repr=False)
    line: int = 0
    expand: bool = False


def _netrc_entries(path: Path, text: str) -> list[_Entry]:
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if fields[0] != "machine":
            continue  # netrc's other keywords (default, macdef) are not Enroot's
        if len(fields) < 6 or fields[2] != "login" or fields[4] != "password":
            raise CredentialsError(f"{path}:{number}: expected 'machine HOST login USER password PASSWORD'",
                                   "fix that line (Enroot reads the same file)")
        if fields[5].startswith("$"):
            # Enroot: the rest of the line after the fifth field goes through `echo` in a shell.
            rest = line.split(None, 5)[5]
            entries.append(_Entry(fields[1], fields[3], rest, number, expand=True))
        else:
            entries.append(_Entry(fields[1], fields[3], fields[5], number))
    return entries


def _expand(path: Path, entry: _Entry) -> str:
    st = path.stat()
    if st.st_uid not in (os.getuid(), 0) or st.st_mode & 0o022:
        raise CredentialsError(
            f"{path}:{entry.line}: refusing to run the password command of a file that others can write",
            f"chown it to yourself and chmod 600 {path}")
    import subprocess   # here: the importer's hit path reads credentials and runs no command
    proc = subprocess.run(["/bin/sh", "-c", "echo " + entry.password], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    value = proc.stdout.rstrip("\n")
    if proc.returncode != 0 or not value:
        # The command's output is not shown: it may hold part of a secret.
        raise CredentialsError(f"{path}:{entry.line}: the password command for {entry.machine} failed "
                               f"(exit {proc.returncode}) or printed nothing",
                               "run it by hand to see why (the same command works in `enroot import`)")
    return value


def from_enroot(hosts: list[str], user: str | None, env: dict[str, str] | None = None) -> Credential | None:
    """The first entry for any of ``hosts`` (in order) whose login is ``user`` (any login when None)."""
    path = enroot_credentials_file(env)
    text = _read(path)
    if not text:
        return None
    entries = _netrc_entries(path, text)
    for host in hosts:
        for entry in entries:
            if entry.machine == _host(host) and (user is None or entry.login == user):
                password = _expand(path, entry) if entry.expand else entry.password
                return Credential(entry.login, password, f"{path}:{entry.line}")
    return None


def enroot_user(registry: str, env: dict[str, str] | None = None) -> str | None:
    """Enroot infers the user from the first ``machine REGISTRY login USER`` line."""
    path = enroot_credentials_file(env)
    text = _read(path)
    for entry in _netrc_entries(path, text) if text else []:
        if entry.machine == _host(registry):
            return entry.login
    return None


def _helper(name: str, registry: str, source: str) -> Credential | None:
    import subprocess
    try:
        proc = subprocess.run([f"docker-credential-{name}", "get"], input=registry, capture_output=True,
                              text=True, timeout=60)
    except FileNotFoundError:
        raise CredentialsError(f"{source} names the credential helper {name!r}, which is not installed",
                               f"install docker-credential-{name} or remove it from {source}") from None
    if proc.returncode != 0:
        return None  # "credentials not found in native keychain"
    try:
        doc = json.loads(proc.stdout)
        return Credential(doc["Username"], doc["Secret"], f"{source} (docker-credential-{name})")
    except (ValueError, KeyError, TypeError):
        raise CredentialsError(f"docker-credential-{name} answered something that is not credentials",
                               "check the helper with `docker-credential-NAME get`") from None


def from_docker(registry: str, env: dict[str, str] | None = None) -> Credential | None:
    path = docker_config_file(env)
    text = _read(path)
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CredentialsError(f"{path} is not valid JSON (line {exc.lineno})",
                               "fix it, or point DOCKER_CONFIG at another directory") from None
    keys = HUB_KEYS if registry in HUB_KEYS else (registry, f"https://{registry}", f"http://{registry}",
                                                  f"https://{registry}/v1/", f"https://{registry}/v2/")
    helpers = doc.get("credHelpers") or {}
    for key in keys:
        if key in helpers:
            return _helper(helpers[key], key, str(path))
    auths = doc.get("auths") or {}
    for key in keys:
        auth = (auths.get(key) or {}).get("auth")
        if auth:
            try:
                user, _, password = base64.b64decode(auth).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                raise CredentialsError(f"{path}: the auth entry for {key} is not base64 user:password",
                                       f"docker login {registry} again") from None
            return Credential(user, password, f"{path} ({key})")
    if doc.get("credsStore"):
        return _helper(doc["credsStore"], keys[0], str(path))
    return None


def lookup(registry: str, user: str | None, hosts: list[str] | None = None,
           env: dict[str, str] | None = None) -> Credential | None:
    """Credentials for ``registry``, or None: Enroot's entry for the first of ``hosts``
    (default: the registry) that has one with login ``user``, else the registry's entry, else
    Docker's config.json for the registry (whose user must be ``user`` when one is given).
    The client calls it with the registry alone; a token server's own entry is looked up
    with :func:`from_enroot`.
    """
    cred = from_enroot(hosts or [registry], user, env)
    if cred is None and hosts and registry not in hosts:
        cred = from_enroot([registry], user, env)
    if cred is None:
        cred = from_docker(registry, env)
        if cred is not None and user is not None and cred.user != user:
            cred = None
    return cred


def describe_sources(env: dict[str, str] | None = None) -> str:
    return (f"{enroot_credentials_file(env)} (machine HOST login USER password PASSWORD) "
            f"or {docker_config_file(env)} (docker login)")


__all__ = ["Credential", "lookup", "enroot_user", "enroot_credentials_file", "docker_config_file",
           "describe_sources"]
