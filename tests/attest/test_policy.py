"""The site policy file: what it accepts, and every mistake in it named by file, line and key."""

from __future__ import annotations

import datetime as dt
import textwrap

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from imagekit.attest import keys, policy
from imagekit.util.errors import VerificationError


@pytest.fixture
def site(tmp_path):
    """A directory with keys ci.pub and old.pub; ``write(text)`` writes policy.yaml there."""
    for name in ("ci", "old"):
        keys.write_pair(keys.generate(), tmp_path / name)

    def write(text: str):
        path = tmp_path / "policy.yaml"
        path.write_text(textwrap.dedent(text))
        return path

    write.dir = tmp_path
    return write


GOOD = """\
    version: 1
    keys:
      ci: {path: ci.pub, not-after: 2030-01-31}
      old: {path: old.pub}
    revoked: [old]
    repositories:
      - match: reg:5000/hpc/*
        signers: [ci, old]
      - match: reg:5000/scratch/*
        accept: unsigned
      - match: "dockerd://*"
        signers: [ci]
        convert: true
"""


def test_a_good_policy_and_its_first_matching_rule(site):
    p = policy.load(site(GOOD))
    rule = p.rule_for("reg:5000/hpc/mpi")
    assert [k.name for k in rule.trust.keys] == ["ci", "old"] and rule.trust.revoked == {"old"}
    assert rule.trust.keys[0].not_after == dt.datetime(2030, 1, 31, 23, 59, 59, 999999, dt.timezone.utc)
    assert policy.load(site(GOOD)).rule_for("reg:5000/scratch/x").unsigned
    assert p.rule_for("dockerd://imagekit/debian-mpi:latest").convert
    with pytest.raises(VerificationError, match="no rule .* covers it \\(fail closed\\)"):
        p.rule_for("reg:5000/other/x")


@pytest.mark.parametrize("change,line,key,said", [
    (("    ci: {path: ci.pub, not-after: 2030-01-31}", "    ci: {path: ci.pub, not-afterr: 2030}"), 3, "keys.ci.not-afterr",
     "unknown field"),
    (("ci.pub, not-after: 2030-01-31", "missing.pub"), 3, "keys.ci.path", "no such public key"),
    (("not-after: 2030-01-31", "not-after: soon"), 3, "keys.ci.not-after", "'soon' is not a date"),
    (("signers: [ci, old]", "signers: [ci, nobody]"), 8, "repositories[0].signers", "no key called 'nobody'"),
    (("accept: unsigned", "accept: anything"), 10, "repositories[1].accept", "'anything' is not a value it takes"),
    (("version: 1", "version: 2"), 1, "version", "this imagekit reads version 1"),
    (("revoked: [old]", "revoked: old"), 5, "revoked", "not a list"),
    (("      - match: reg:5000/scratch/*\n", "      - match: reg:5000/scratch/*\n        signers: [ci]\n"), 10,
     "repositories[1].signers", "both signers and `accept: unsigned`"),
    (("    keys:\n", "    keys:\n      ci: {path: x.pub}\n"), 4, "ci", "duplicate key"),
    (("      - match: \"dockerd://*\"", "      - match: [dockerd"), 12, None, "malformed YAML"),
])
def test_each_mistake_names_file_line_and_key(site, change, line, key, said):
    text = GOOD.replace(change[0], change[1], 1)
    assert text != GOOD, change
    path = site(text)
    with pytest.raises(policy.PolicyError) as err:
        policy.load(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}: "), message
    if key:
        assert message.startswith(f"{path}:{line}: {key}: "), message
    assert said in message, message


def test_a_key_of_another_type_in_the_policy_is_refused_with_its_line(site):
    private = rsa.generate_private_key(65537, 2048)
    (site.dir / "rsa.pub").write_bytes(private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    path = site(GOOD.replace("old: {path: old.pub}", "old: {path: rsa.pub}"))
    with pytest.raises(policy.PolicyError, match=r"policy.yaml:4: keys.old.path: .*rsa.pub: unknown key type RSA"):
        policy.load(path)


def test_no_rules_or_no_keys_is_an_error_not_an_open_door(site):
    with pytest.raises(policy.PolicyError, match="no repository rules"):
        policy.load(site("version: 1\nkeys: {ci: {path: ci.pub}}\nrepositories: []\n"))
    with pytest.raises(policy.PolicyError, match="names no key"):
        policy.load(site("version: 1\nrepositories: [{match: '*', accept: unsigned}]\n"))
    with pytest.raises(policy.PolicyError, match="file not found"):
        policy.load(site.dir / "absent.yaml")


def test_json_policy_files_read_too(site):
    path = site.dir / "policy.json"
    path.write_text('{"version": 1, "keys": {"ci": {"path": "ci.pub"}},\n'
                    ' "repositories": [{"match": "reg/*", "signers": ["ci"]}]}\n')
    assert policy.load(path).rule_for("reg/x").trust.keys[0].name == "ci"


SPELLINGS = """\
    version: 1
    keys:
      ci: {path: ci.pub}
    repositories:
      - match: registry.example.org:5000/hpc/*
        signers: [ci]
      - match: Docker.IO/acme/*
        signers: [ci]
      - match: registry.example.org/secure/*
        signers: [ci]
      - match: dockerd://ci/*
        signers: [ci]
      - match: "*"
        accept: unsigned
      - match: "dockerd://*"
        accept: unsigned
"""


@pytest.mark.parametrize("uri", [
    "docker://registry.example.org:5000#hpc/mpi:1", "docker://Registry.Example.org:5000#hpc/mpi:1",
    "docker://REGISTRY.EXAMPLE.ORG:5000#hpc/mpi:1", "docker://registry.example.org.:5000#hpc/mpi:1",
    "docker://registry.example.org:05000#hpc/mpi:1", "Registry.Example.Org.:005000/hpc/mpi:1",
    "docker://docker.io#acme/tool:1", "docker://index.docker.io:443#acme/tool:1", "docker://acme/tool:1",
    "docker://registry.example.org:443#secure/x:1", "docker://Registry.Example.org.#secure/x:1",
    "dockerd://ci/img:1", "dockerd://docker.io/ci/img:1", "dockerd://index.docker.io/ci/img:1"])
def test_h11_every_spelling_of_a_registry_meets_the_rule_written_for_it(site, uri):
    """Security-4 H11: host case, a trailing dot, a port's leading zeros, the default port and Docker Hub's
    aliases all reach the same repository, so the strict rule holds for each, never the later `*`
    (imagekit's own name_of, as the importer and `imagekit verify` call it)."""
    from imagekit.export import pyxis_policy

    rule = policy.load(site(SPELLINGS)).rule_for(pyxis_policy.name_of(uri)[0])
    assert not rule.unsigned and [k.name for k in rule.trust.keys] == ["ci"], rule.line


@pytest.mark.parametrize("name", ["registry.example.org:5001/hpc/mpi", "registry.example.org/hpc/mpi",
                                  "other.example.org:5000/hpc/mpi", "quay.io/acme/tool", "dockerd://cix/img:1",
                                  "dockerd://registry.example.org/ci/img:1"])
def test_h11_other_registries_stay_other(site, name):
    assert policy.load(site(SPELLINGS)).rule_for(name).unsigned
