"""The registry client against real docker-registry servers: open, htpasswd (Basic) and token (Bearer).

No engine: images are tiny OCI images pushed by the client itself (local_registry.push_test_image).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from imagekit.util import platforms
from imagekit.util.platforms import Platform, PlatformError

from imagekit.util.errors import CredentialsError, IntegrityError, RegistryError
from imagekit.registry import RegistryClient, parse
from imagekit.registry.credentials import Credential
from helpers.local_registry import (blob_path, htpasswd_config, push_test_image, running_registry,
                            token_server)

PASSWORD = "s3cret-Pa55word"


@pytest.fixture(scope="module")
def open_registry(tmp_path_factory):
    root = tmp_path_factory.mktemp("open-registry")
    with running_registry(root) as addr:
        yield addr, root


def no_credentials_env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "ENROOT_CONFIG_PATH": str(tmp_path / "enroot"),
            "DOCKER_CONFIG": str(tmp_path / "docker")}


def enroot_env(tmp_path: Path, line: str, mode: int = 0o600) -> dict[str, str]:
    env = no_credentials_env(tmp_path)
    path = Path(env["ENROOT_CONFIG_PATH"]) / ".credentials"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# a comment\n{line}\n")
    path.chmod(mode)
    return env


def test_resolve_picks_this_platform_from_an_index(open_registry, tmp_path):
    addr, _ = open_registry
    client = RegistryClient(addr, env=no_credentials_env(tmp_path))
    pushed = push_test_image(client, "t/multi", "1", architectures=("amd64", "arm64", "ppc64le"))
    resolved = client.resolve(parse(f"{addr}#t/multi:1"))
    assert resolved.digest == pushed["digest"] and resolved.config_digest == pushed["config"]
    assert resolved.index_digest == pushed["index"]
    assert resolved.reference.digest == pushed["digest"]
    # By digest, the same image.
    assert client.resolve(parse(f"docker://{addr}#t/multi@{pushed['digest']}")).digest == pushed["digest"]
    with pytest.raises(PlatformError, match=r"no linux/riscv64 image \(it has: linux/amd64, linux/arm64, "
                                            r"linux/ppc64le\)"):
        client.resolve(parse(f"{addr}#t/multi:1"), platform={"os": "linux", "architecture": "riscv64"})
    # The entry's platform comes along: the importer checks it against the node without the config.
    assert client.resolve(parse(f"{addr}#t/multi:1"), platform={"os": "linux", "architecture": "arm64"}
                          ).platform == Platform("linux", "arm64")
    push_test_image(client, "t/plain", "1")
    assert client.image_platform(client.resolve(parse(f"{addr}#t/plain:1"))) == platforms.host()


def test_a_manifest_served_with_other_bytes_is_refused(open_registry, tmp_path):
    addr, root = open_registry
    client = RegistryClient(addr, env=no_credentials_env(tmp_path))
    pushed = push_test_image(client, "t/corrupt-manifest", "1", payload=b"manifest test\n")
    data = blob_path(root, pushed["digest"])
    body = data.read_bytes()
    # Same length, still valid JSON: only the digest tells.
    data.write_bytes(body.replace(b"layer.v1.tar", b"layer.v1.taR", 1))
    with pytest.raises(IntegrityError, match="served a manifest whose digest is"):
        client.get_manifest("t/corrupt-manifest", pushed["digest"])


def test_unknown_tag_and_unreachable_registry(open_registry, tmp_path):
    addr, _ = open_registry
    client = RegistryClient(addr, env=no_credentials_env(tmp_path))
    with pytest.raises(RegistryError, match="not found"):
        client.resolve(parse(f"{addr}#t/none:1"))
    from helpers.local_registry import free_port

    dead = RegistryClient(f"127.0.0.1:{free_port()}", env=no_credentials_env(tmp_path))
    with pytest.raises(RegistryError, match="cannot reach") as info:
        dead.resolve(parse(f"{dead.registry}#t/x:1"))
    assert info.value.exit_code == 4 and "is a registry listening" in str(info.value)


# --- Basic auth (htpasswd) ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def basic_registry(tmp_path_factory):
    root = tmp_path_factory.mktemp("basic-registry")
    with running_registry(root, extra_config=htpasswd_config(root, {"alice": PASSWORD})) as addr:
        yield addr


def test_basic_auth_with_enroots_credentials_file(basic_registry, tmp_path):
    # Enroot's file names the host without its port.
    env = enroot_env(tmp_path, f"machine 127.0.0.1 login alice password {PASSWORD}")
    client = RegistryClient(basic_registry, env=env)
    pushed = push_test_image(client, "t/basic", "1")
    assert client.resolve(parse(f"{basic_registry}#t/basic:1")).digest == pushed["digest"]
    assert PASSWORD not in repr(client._credential) and PASSWORD not in str(client._credential)


def test_password_command_is_expanded_like_enroot_only_from_a_private_file(basic_registry, tmp_path):
    line = f"machine 127.0.0.1 login alice password $(printf '%s' '{PASSWORD}')"
    client = RegistryClient(basic_registry, env=enroot_env(tmp_path / "ok", line))
    client.ensure_access("t/basic", push=True)
    with pytest.raises(CredentialsError, match="refusing to run the password command") as info:
        RegistryClient(basic_registry, env=enroot_env(tmp_path / "open", line, mode=0o666)).ensure_access("t/basic")
    assert info.value.exit_code == 7


def test_docker_config_is_the_fallback(basic_registry, tmp_path):
    env = no_credentials_env(tmp_path)
    Path(env["DOCKER_CONFIG"]).mkdir()
    auth = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    (Path(env["DOCKER_CONFIG"]) / "config.json").write_text(json.dumps({"auths": {basic_registry: {"auth": auth}}}))
    RegistryClient(basic_registry, env=env).ensure_access("t/basic", push=True)


@pytest.mark.parametrize("case", ["wrong-password", "no-credentials", "user-without-entry", "malformed"])
def test_bad_credentials_are_exit_7_and_never_shown(basic_registry, tmp_path, case):
    wrong = "not-the-" + PASSWORD
    lines = {"wrong-password": f"machine 127.0.0.1 login alice password {wrong}",
             "no-credentials": "machine other.example.org login bob password x",
             "user-without-entry": "machine other.example.org login bob password x",
             "malformed": f"machine 127.0.0.1 login alice {wrong}"}
    env = enroot_env(tmp_path, lines[case])
    user = "carol" if case == "user-without-entry" else None
    with pytest.raises(CredentialsError) as info:
        RegistryClient(basic_registry, user=user, env=env).resolve(parse(f"{basic_registry}#t/basic:1"))
    text = str(info.value)
    assert info.value.exit_code == 7
    assert wrong not in text and PASSWORD not in text
    expected = {"wrong-password": "rejected the credentials (user 'alice' from",
                "no-credentials": "requires credentials for t/basic",
                "user-without-entry": "no password for user 'carol'",
                "malformed": ".credentials:2: expected 'machine HOST login USER password PASSWORD'"}[case]
    assert expected in text


def test_unreadable_credentials_file(basic_registry, tmp_path):
    """As a user who cannot read the file. Root reads everything, so a root run forks and drops
    to nobody first (the child already has imagekit loaded: nobody cannot reach this Python)."""
    env = enroot_env(tmp_path, f"machine 127.0.0.1 login alice password {PASSWORD}", mode=0o600)
    if os.getuid() != 0:
        (Path(env["ENROOT_CONFIG_PATH"]) / ".credentials").chmod(0)
    tmp_path.chmod(0o755)
    (tmp_path / "enroot").chmod(0o755)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        try:
            os.close(read_end)
            if os.getuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            try:
                RegistryClient(basic_registry, env=env).ensure_access("t/basic")
                result = "0 no error"
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                result = f"{getattr(exc, 'exit_code', '?')} {exc}"
            os.write(write_end, result.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as fh:
        out = fh.read()
    os.waitpid(pid, 0)
    assert out.startswith("7 cannot read the credentials file"), out
    assert "Permission denied" in out and PASSWORD not in out


def test_cli_never_prints_a_credential(basic_registry, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from imagekit.cli import main

    for name, value in enroot_env(tmp_path, f"machine 127.0.0.1 login alice password {PASSWORD}").items():
        monkeypatch.setenv(name, value)
    res = CliRunner().invoke(main, ["pull", f"{basic_registry}#t/basic:1", "--to", "enroot",
                                    "-o", str(tmp_path / "x.sqsh")])
    assert res.exit_code == 5, res.output          # authenticated, and no artifact pushed
    assert PASSWORD not in res.output and base64.b64encode(f"alice:{PASSWORD}".encode()).decode() not in res.output
    monkeypatch.setenv("ENROOT_CONFIG_PATH", str(enroot_env(tmp_path / "w", "machine 127.0.0.1 login alice "
                                                                            "password wrong-" + PASSWORD)
                                                 ["ENROOT_CONFIG_PATH"]))
    res = CliRunner().invoke(main, ["pull", f"{basic_registry}#t/basic:1", "--to", "sif",
                                    "-o", str(tmp_path / "x.sif")])
    assert res.exit_code == 7 and "rejected the credentials" in res.output
    assert PASSWORD not in res.output
    assert not (tmp_path / "x.sif").exists()


# --- Bearer tokens ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def token_registry(tmp_path_factory):
    root = tmp_path_factory.mktemp("token-registry")
    with token_server(root / "auth", {"alice": PASSWORD}) as (config, issued):
        with running_registry(root, extra_config=config) as addr:
            yield addr, issued


def test_bearer_token_flow_with_credentials(token_registry, tmp_path):
    addr, issued = token_registry
    env = enroot_env(tmp_path, f"machine 127.0.0.1 login alice password {PASSWORD}")
    client = RegistryClient(addr, env=env)
    pushed = push_test_image(client, "t/bearer", "1")
    assert client.resolve(parse(f"docker://{addr}#t/bearer:1")).digest == pushed["digest"]
    assert ("alice", "repository:t/bearer:pull,push") in issued


def test_bearer_without_or_with_wrong_credentials(token_registry, tmp_path):
    addr, _ = token_registry
    with pytest.raises(CredentialsError, match="requires credentials for t/bearer"):
        RegistryClient(addr, env=no_credentials_env(tmp_path)).resolve(parse(f"{addr}#t/bearer:1"))
    env = enroot_env(tmp_path, "machine 127.0.0.1 login alice password nope")
    with pytest.raises(CredentialsError, match="rejected the credentials") as info:
        RegistryClient(addr, env=env).resolve(parse(f"{addr}#t/bearer:1"))
    assert "nope" not in str(info.value)


def test_credential_repr_hides_the_password():
    cred = Credential("alice", PASSWORD, "file:1")
    assert PASSWORD not in repr(cred) and PASSWORD not in str(cred) and "alice" in repr(cred)
