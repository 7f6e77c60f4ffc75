"""Signing end to end on the real engine and registry: ``build --sign`` on debian-mpi (its .sqsh, its SIF
under the real ``apptainer verify``, its SBOM and provenance), ``push --sign`` with referrers, and every
kind of bad input: a changed file, a truncated or oversized envelope, a statement about another platform,
an unknown key type, a policy file with an error. And the private key is nowhere it should not be."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from imagekit.engines import docker as engine
from imagekit.attest import PAYLOAD_TYPE, SLSA_PROVENANCE, bundle, dsse, keys, signer
from imagekit.attest.statement import Statement, Subject, hex_of
from imagekit.cli import main
from imagekit.export import attestation_push
from imagekit.export.artifacts import RegistrySubject
from imagekit.registry import RegistryClient, parse

pytestmark = pytest.mark.engine


@pytest.fixture
def ci(tmp_path, monkeypatch):
    """The site key (ci.key, ci.pub) and an attestation directory of this test's own."""
    monkeypatch.setenv("IMAGEKIT_ATTESTATIONS", str(tmp_path / "attestations"))
    (tmp_path / "keys").mkdir()
    keys.write_pair(keys.generate(), tmp_path / "keys" / "ci")
    return tmp_path / "keys" / "ci.key", tmp_path / "keys" / "ci.pub"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def secrets_of(key_path: Path) -> list[bytes]:
    """What would give the private key away: its PEM body lines and its raw private number/bytes."""
    private = serialization.load_pem_private_key(key_path.read_bytes(), None)
    lines = [line.encode() for line in key_path.read_text().splitlines() if not line.startswith("-----")]
    raw = private.private_numbers().private_value.to_bytes(32, "big")
    return lines + [raw, base64.b64encode(raw)]


def assert_nowhere(secrets: list[bytes], data: bytes, where: str) -> None:
    for secret in secrets:
        assert secret not in data, f"the private key is in {where}"


def test_build_sign_debian_mpi_then_its_sqsh_and_image_verify_and_the_key_is_nowhere(mpi_image, ci, tmp_path):
    """CI's check on debian-mpi: build --sign (cached layers), its .sqsh export signed, the engine image's
    statements; the SBOM names the stack's components and the image's packages; the private key is in
    no layer, log, store entry or output. (Its SIF under the real apptainer verify:
    test_pyxis_cluster_signed.py; SIF signatures in depth: test_sif_sign.py.)"""
    key, pub = ci
    logs, out = tmp_path / "logs", tmp_path / "out"
    res = invoke("build", "debian-mpi", "--sign", str(key), "--export", "enroot", "--no-check",
                 "-o", str(out), "--log-dir", str(logs), "--json")
    assert res.exit_code == 0, res.output
    (result,) = json.loads(res.stdout)
    image = result["build"]["image_id"]      # not the tag: another build may move it meanwhile
    assert result["signed"]["subjects"][0]["digest"]["sha256"] == hex_of(result["build"]["image_id"])

    for target in (image, str(out / "debian-mpi.sqsh")):
        res = invoke("verify", target, "--key", str(pub))
        assert res.exit_code == 0, (target, res.output)

    res = invoke("inspect", str(out / "debian-mpi.sqsh"), "--key", str(pub), "--json")
    assert res.exit_code == 0, res.output
    seen = json.loads(res.stdout)
    labels = engine.inspect(image).labels
    assert seen["provenance"]["stack"] == "debian-mpi"
    assert seen["provenance"]["recipe_sha256"] == labels["io.imagekit.recipe.sha256"]
    assert {"openmpi 4.1.4", "ucx 1.13.1"} & set(seen["sbom"]["stack"])
    res = invoke("sbom", str(out / "debian-mpi.sqsh"), "--key", str(pub), "-q")
    doc = json.loads(res.stdout)
    names = {c["name"] for c in doc["components"]}
    assert {"openmpi", "ucx", "pmix", "nccl", "libopenmpi3", "python3-mpi4py"} <= names, sorted(names)
    nccl = next(c for c in doc["components"] if c["bom-ref"] == "stack:nccl")
    assert nccl["evidence"]["occurrences"] == [{"location": "/usr/local/nccl"}]   # wheel files copied there

    secrets = secrets_of(key)
    for path in [*logs.rglob("*"), *out.rglob("*"), *(tmp_path / "attestations").rglob("*")]:
        if path.is_file():
            assert_nowhere(secrets, path.read_bytes(), str(path))
    store = Path(result["exports"][0]["store_entry"]).parents[4]
    for path in store.rglob("*"):
        if path.is_file() and path.stat().st_size < 64 << 20:
            assert_nowhere(secrets, path.read_bytes(), str(path))
    with subprocess.Popen([engine.docker_cli(), "save", image], stdout=subprocess.PIPE) as proc:
        tail = b""
        while chunk := proc.stdout.read(8 << 20):       # streamed: a window over chunk boundaries
            assert_nowhere(secrets, tail + chunk, f"the layers of {image}")
            tail = chunk[-256:]
    assert proc.returncode == 0


def test_bad_input_each_gets_a_clear_error_and_a_non_zero_exit(base_image, ci, tmp_path, monkeypatch):
    key, pub = ci
    sqsh = tmp_path / "b.sqsh"
    assert invoke("export", base_image, "--to", "enroot", "-o", str(sqsh), "--sign", str(key), "-q").exit_code == 0
    assert invoke("verify", str(sqsh), "--key", str(pub)).exit_code == 0
    side = bundle.beside(sqsh)
    good = side.read_bytes()

    # A changed .sqsh (a copy: the output is a hard link to the store's read-only entry).
    changed = tmp_path / "changed.sqsh"
    data = bytearray(sqsh.read_bytes())
    data[len(data) // 2] ^= 1
    changed.write_bytes(bytes(data))
    shutil.copyfile(side, bundle.beside(changed))
    res = invoke("verify", str(changed), "--key", str(pub))
    assert res.exit_code == 12 and "no signed statement names this enroot" in res.output

    # A truncated envelope: alone, refused; beside an intact one, skipped with a note (H7: one malformed
    # envelope is one envelope, never the whole file). Then an oversized one.
    first, second = good.split(b"\n")[:2]
    side.write_bytes(first[: len(first) // 2])
    res = invoke("verify", str(sqsh), "--key", str(pub))
    assert res.exit_code == 12 and "not complete JSON" in res.output and f"{side}:1" in res.output
    side.write_bytes(first + b"\n" + second[: len(second) // 2])
    res = invoke("verify", str(sqsh), "--key", str(pub))
    assert res.exit_code == 0 and "skipping an envelope" in res.output and f"{side}:2" in res.output
    side.write_bytes(good)
    monkeypatch.setattr(dsse, "MAX_ENVELOPE", 1000)
    res = invoke("verify", str(sqsh), "--key", str(pub))
    assert res.exit_code == 12 and "more than the 1000 imagekit reads" in res.output
    monkeypatch.undo()

    # No statements at all.
    side.unlink()
    res = invoke("verify", str(sqsh), "--key", str(pub))
    assert res.exit_code == 12 and "unsigned image" in res.output

    # An unknown key type, to sign and to verify with.
    rsa_key = tmp_path / "rsa.key"
    private = rsa.generate_private_key(65537, 2048)
    rsa_key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    rsa_key.chmod(0o600)
    res = invoke("sign", str(sqsh), "--key", str(rsa_key))
    assert res.exit_code == 2 and "unknown key type RSA" in res.output
    res = invoke("verify", str(sqsh), "--key", str(rsa_key))
    assert res.exit_code == 2 and "unknown key type RSA" in res.output

    # A policy file with an error: file, line and key.
    policy = tmp_path / "policy.yaml"
    policy.write_text(textwrap.dedent(f"""\
        version: 1
        keys:
          ci: {{path: {pub}, not-after: someday}}
        repositories: [{{match: "file:*", signers: [ci]}}]
        """))
    res = invoke("verify", str(sqsh), "--policy", str(policy))
    assert res.exit_code == 2 and f"{policy}:3: keys.ci.not-after: 'someday' is not a date" in res.output


def test_push_sign_lists_statements_and_a_statement_for_another_platform_is_refused(base_image, registry, ci,
                                                                                    tmp_path):
    key, pub = ci
    ref = f"{registry}/ik-sign/base:1"
    res = invoke("push", base_image, "--to", ref, "--with", "enroot,sif", "--sign", str(key), "--json", "-q")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    kinds = {s["annotations"]["io.imagekit.kind"] for s in doc["signed"]["subjects"]}
    assert kinds == {"oci-manifest", "oci-config", "enroot", "sif"}
    sif_art = next(a for a in doc["artifacts"] if a["format"] == "sif")
    assert any(s["digest"]["sha256"] == hex_of(sif_art["file_sha256"]) for s in doc["signed"]["subjects"])
    res = invoke("verify", f"docker://{ref}", "--key", str(pub), "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["platform"] == "linux/amd64", res.output
    res = invoke("push", base_image, "--to", ref, "--with", "sbom")
    assert res.exit_code == 2 and "add --sign KEY" in res.output

    # The same manifest, signed as if it were another platform's image, on a repository of its own.
    other = f"{registry}/ik-sign/elsewhere:1"
    assert invoke("push", base_image, "--to", other).exit_code == 0
    client = RegistryClient.for_reference(parse(other))
    subject = client.resolve(parse(other))
    statement = Statement([Subject("oci-manifest", hex_of(subject.digest), other, "linux/arm64")], SLSA_PROVENANCE, {})
    envelope = signer.sign(statement.payload(), PAYLOAD_TYPE, keys.load_private(key))
    attestation_push.push(RegistrySubject(client, "ik-sign/elsewhere", subject), envelope, SLSA_PROVENANCE,
                          keys.load_private(key).key.keyid)
    res = invoke("verify", f"docker://{other}", "--key", str(pub))
    assert res.exit_code == 12 and "is for linux/arm64, not linux/amd64" in res.output
