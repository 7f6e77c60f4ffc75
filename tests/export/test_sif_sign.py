"""A SIF signed by imagekit, checked by the real ``apptainer verify --key`` (Apptainer 1.4.0 built by
scripts/setup-cluster.sh): accepted with an ECDSA P-256 and an Ed25519 key, refused after one byte of
the root file system changes, and its SBOM object listed by ``apptainer sif list`` as CycloneDX."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit.attest import bundle, keys
from imagekit.cli import main
from imagekit.export import sif_sign
from imagekit.export.verifying import keys_trust
from imagekit.sif_reader import DATA_PARTITION, FS_SQUASHFS, GROUP_MASK, PART_DATA, PARTITION_EXTRA, read_sif
from helpers.needs import need

pytestmark = pytest.mark.engine


def apptainer() -> str:
    found = shutil.which("apptainer")
    need(None if found else "apptainer is not installed (bash scripts/setup-cluster.sh)")
    return found


@pytest.fixture(scope="module")
def unsigned_sif(base_image, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sif") / "base.sif"
    res = CliRunner().invoke(main, ["export", base_image, "--to", "sif", "-o", str(out), "--no-store", "-q"])
    assert res.exit_code == 0, res.output
    return out


def site_key(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    return keys.write_pair(keys.generate(kind), tmp_path / kind)


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 1]))


@pytest.mark.parametrize("kind", keys.KINDS)
def test_apptainer_verifies_imagekits_signature_and_refuses_a_changed_rootfs(unsigned_sif, tmp_path, kind):
    binary = apptainer()
    key_path, pub_path = site_key(tmp_path, kind)
    signed = tmp_path / "signed.sif"
    shutil.copyfile(unsigned_sif, signed)
    res = CliRunner().invoke(main, ["sign", str(signed), "--key", str(key_path), "--json", "-q"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["subjects"][0]["annotations"]["io.imagekit.kind"] == "sif"
    ok = subprocess.run([binary, "verify", "--key", str(pub_path), str(signed)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "SBOM" in ok.stdout and "FS" in ok.stdout       # both objects are among those verified
    listing = subprocess.run([binary, "sif", "list", str(signed)], capture_output=True, text=True).stdout
    assert "SBOM (cyclonedx-json)" in listing and "Signature (SHA-256)" in listing
    res = CliRunner().invoke(main, ["verify", str(signed), "--key", str(pub_path)])
    assert res.exit_code == 0, res.output

    # One byte of the root file system, deep inside the partition.
    part = read_sif(signed).primary_partition()
    flip(signed, part.offset + part.size // 2)
    bad = subprocess.run([binary, "verify", "--key", str(pub_path), str(signed)], capture_output=True, text=True)
    assert bad.returncode != 0 and "integrity compromised" in bad.stdout + bad.stderr
    res = CliRunner().invoke(main, ["verify", str(signed), "--key", str(pub_path)])
    assert res.exit_code == 12 and f"object {part.id} (root file system) changed after signing" in res.output


def test_another_key_and_an_unsigned_sif_are_refused_by_both(unsigned_sif, tmp_path):
    binary = apptainer()
    key_path, _ = site_key(tmp_path, "ecdsa-p256")
    _, other_pub = keys.write_pair(keys.generate(), tmp_path / "other")
    signed = tmp_path / "signed.sif"
    shutil.copyfile(unsigned_sif, signed)
    assert CliRunner().invoke(main, ["sign", str(signed), "--key", str(key_path), "-q"]).exit_code == 0
    assert subprocess.run([binary, "verify", "--key", str(other_pub), str(signed)],
                          capture_output=True).returncode != 0
    res = CliRunner().invoke(main, ["verify", str(signed), "--key", str(other_pub)])
    assert res.exit_code == 12 and "not by an accepted key" in res.output
    res = CliRunner().invoke(main, ["verify", str(unsigned_sif), "--key", str(other_pub)])
    assert res.exit_code == 12 and "no signature (unsigned image)" in res.output


def test_signing_twice_is_refused_and_the_source_is_never_changed(unsigned_sif, tmp_path):
    key_path, pub_path = site_key(tmp_path, "ed25519")
    before = unsigned_sif.read_bytes()[:4096]
    out = tmp_path / "out.sif"
    sif_sign.sign_file(unsigned_sif, out, lambda p: {"payloadType": sif_sign.METADATA_TYPE,
                                                     "payload": "", "signatures": []}, sbom=b"{}")
    assert unsigned_sif.read_bytes()[:4096] == before
    res = CliRunner().invoke(main, ["sign", str(out), "--key", str(key_path)])
    assert res.exit_code == 2 and "signed already" in res.output


def test_the_sbom_and_provenance_inside_are_the_signed_ones(unsigned_sif, tmp_path):
    key_path, pub_path = site_key(tmp_path, "ecdsa-p256")
    signed = tmp_path / "signed.sif"
    shutil.copyfile(unsigned_sif, signed)
    assert CliRunner().invoke(main, ["sign", str(signed), "--key", str(key_path), "-q"]).exit_code == 0
    verdict = sif_sign.verify(signed, keys_trust([pub_path]))
    doc = json.loads(verdict.sbom)
    assert doc["bomFormat"] == "CycloneDX" and any(c["name"] == "bash" for c in doc["components"])
    res = CliRunner().invoke(main, ["sbom", str(signed), "--key", str(pub_path), "--format", "spdx", "-q"])
    assert res.exit_code == 0 and json.loads(res.stdout)["spdxVersion"] == "SPDX-2.3"
    assert bundle.beside(signed).exists()
    res = CliRunner().invoke(main, ["inspect", str(signed), "--key", str(pub_path), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["sbom"]["deb"] > 50


def signed_alone(unsigned_sif: Path, tmp_path: Path, name: str = "old") -> tuple[Path, Path]:
    """``imagekit sign FILE.sif`` of a file alone (no provenance inside), its side file moved away, as
    on a cluster that got only the SIF: (the SIF, the key's .pub)."""
    key_path, pub_path = keys.write_pair(keys.generate(), tmp_path / name)
    signed = tmp_path / "a.sif"
    shutil.copyfile(unsigned_sif, signed)
    assert CliRunner().invoke(main, ["sign", str(signed), "--key", str(key_path), "-q"]).exit_code == 0
    bundle.beside(signed).unlink()
    return signed, pub_path


@pytest.mark.parametrize("policy,said", [
    ("keys:\n  old: {{path: {pub}, not-after: 2020-01-31}}\n", "which expired on 2020-01-31"),
    ("keys:\n  old: {{path: {pub}}}\nrevoked: [old]\n", "which is revoked"),
], ids=["expired", "revoked by name"])
def test_h4_expiry_and_revocation_by_name_apply_to_the_sif_signature_alone(unsigned_sif, tmp_path, policy, said):
    """H4: with no statements file beside it, only the SIF's own signature is checked; a key past its
    not-after, or revoked by name (the form docs/signing.md shows), used to pass there."""
    signed, pub = signed_alone(unsigned_sif, tmp_path)
    path = tmp_path / "policy.yaml"
    path.write_text("version: 1\n" + policy.format(pub=pub) + 'repositories:\n  - match: "*"\n    signers: [old]\n')
    res = CliRunner().invoke(main, ["verify", str(signed), "--policy", str(path)])
    assert res.exit_code == 12 and said in res.output, res.output


def test_h4_an_object_group_no_signature_covers_is_refused_as_apptainer_refuses_it(unsigned_sif, tmp_path):
    """H4: a data partition added in object group 2 after signing: `apptainer verify` refuses the file
    ("signature not found for object group 2"), and so does imagekit now (it used to accept it, saying it
    checked what apptainer verify checks). The unchanged file passes both."""
    binary = apptainer()
    signed, pub = signed_alone(unsigned_sif, tmp_path)
    assert subprocess.run([binary, "verify", "--key", str(pub), str(signed)], capture_output=True).returncode == 0
    assert CliRunner().invoke(main, ["verify", str(signed), "--key", str(pub)]).exit_code == 0
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "marker").write_text("not signed\n")
    subprocess.run(["mksquashfs", str(tmp_path / "evil"), str(tmp_path / "evil.sqsh"), "-quiet", "-noappend"],
                   check=True)
    info = read_sif(signed)
    sif_sign._append(signed, info, [sif_sign.NewObject(
        DATA_PARTITION, (tmp_path / "evil.sqsh").read_bytes(), name="evil",
        extra=PARTITION_EXTRA.pack(FS_SQUASHFS, PART_DATA, b"02\0"), group_id=GROUP_MASK | 2)], 1700000000)
    theirs = subprocess.run([binary, "verify", "--key", str(pub), str(signed)], capture_output=True, text=True)
    assert theirs.returncode != 0 and "signature not found for object group 2" in theirs.stdout + theirs.stderr
    res = CliRunner().invoke(main, ["verify", str(signed), "--key", str(pub)])
    assert res.exit_code == 12 and "does not hold for object group 2" in res.output, res.output
