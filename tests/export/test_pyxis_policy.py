"""The Pyxis importer under a site signature policy (``IMAGEKIT_POLICY``), driven as Pyxis 0.24.0 drives it
(pyxis_calls.py): a real registry, the real Docker engine, a real store, real keys. Only signed images
are served, and every refusal is one ``error:`` line naming the image, its digest and the accepted
signers, with exit status 12 and nothing on stdout (Pyxis then starts nothing). Under the real Pyxis:
test_pyxis_cluster_signed.py."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.pyxis_calls import EXE, is_squashfs, job_env, pyxis_get
from helpers.registry_standin import Server, forward

from imagekit.attest import PAYLOAD_TYPE, SLSA_PROVENANCE, bundle, keys, signer
from imagekit.attest.statement import Statement, Subject
from imagekit.cli import main
from imagekit.export import attestation_push, attestations
from imagekit.export.artifacts import RegistrySubject
from imagekit.export.push import push_image
from imagekit.registry import RegistryClient, parse
from imagekit.export import stage

pytestmark = pytest.mark.engine


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test's importer keeps its records (read stamps, policy verdicts) in the test's own cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


PREFIX = f"imagekit-pyxis-importer on {stage.host()}: "   # one line per node: the host says which


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Keys ``ci`` (the site's) and ``rogue`` (nobody's), and ``policy(text)`` writing the policy file."""
    root = tmp_path_factory.mktemp("site")
    for name in ("ci", "rogue"):
        keys.write_pair(keys.generate(), root / name)

    class Site:
        dir = root
        ci_id = keys.load_public(root / "ci.pub").keyid
        rogue_id = keys.load_public(root / "rogue.pub").keyid

        @staticmethod
        def policy(text: str) -> Path:
            path = root / "policy.yaml"
            path.write_text(textwrap.dedent(text).format(dir=root))
            return path

    return Site


POLICY = """\
    version: 1
    keys:
      ci: {{path: {dir}/ci.pub}}
    repositories:
      - match: "*/ik-signed/*"
        signers: [ci]
      - match: "*/ik-convert/*"
        signers: [ci]
        convert: true
"""


def push_signed(image: str, ref: str, key: Path, tmp_path: Path, with_: str = "enroot") -> None:
    res = CliRunner().invoke(main, ["push", image, "--to", ref, "--with", with_, "--sign", str(key), "-q"])
    assert res.exit_code == 0, res.output


def refusal(call) -> str:
    """The one error line of a refused get (and nothing else said as an error, nothing on stdout)."""
    assert call.rc == 12 and call.path == "", (call.rc, call.path, call.log)
    errors = [line for line in call.log.splitlines() if line.startswith(PREFIX + "error:")]
    assert len(errors) == 1, call.log
    assert "\n  fix:" not in call.log, call.log
    return errors[0]


SIGNED = Path(sys.executable).parent / "imagekit-pyxis-importer-signed"


def get(uri: str, tmp_path: Path, policy: Path, step: int = 0, argv: list[str] | None = None, **extra: str):
    """``imagekit-pyxis-importer-signed get URI`` (what a site with a policy names in its wrapper)."""
    return pyxis_get(uri, job_env(tmp_path / "store", tmp_path / "run", step, IMAGEKIT_POLICY=str(policy), **extra),
                     argv or [str(SIGNED)])


def test_a_signed_image_is_served_its_signed_sqsh_then_warm_hits_check_offline(base_image, registry, site, tmp_path):
    """No IMAGEKIT_TRUSTED_ARTIFACTS: the .sqsh is pulled because a verified statement names it; the
    statements go beside the store entry, and the next job's hit verifies them with no referrer fetch
    (a user with no verdicts recorded yet), and the one after is spared it (pyxis_verdicts)."""
    ref = f"{registry}/ik-signed/base:1"
    push_signed(base_image, ref, site.dir / "ci.key", tmp_path)
    policy = site.policy(POLICY)
    cold = get(f"docker://{registry}#ik-signed/base:1", tmp_path, policy)
    assert cold.rc == 0, cold.log
    assert "policy: " in cold.log and f"signed by ci ({site.ci_id})" in cold.log
    assert "pulling the pushed enroot artifact" in cold.log and "convert" not in cold.log, cold.log
    served = Path(cold.path)
    assert is_squashfs(str(served)) and (served.parent / bundle.ENTRY_NAME).is_file()
    sha = hashlib.sha256(served.read_bytes()).hexdigest()
    named = [json.loads(line) for line in (served.parent / bundle.ENTRY_NAME).read_bytes().splitlines()]
    assert len(named) == 2
    cache = str(tmp_path / "another-user-cache")        # no verdict recorded there yet
    warm = get(f"docker://{registry}#ik-signed/base:1", tmp_path, policy, step=1, XDG_CACHE_HOME=cache)
    assert warm.rc == 0 and warm.path == cold.path, warm.log
    assert "(beside the entry)" in warm.log and "store hit" in warm.log
    again = get(f"docker://{registry}#ik-signed/base:1", tmp_path, policy, step=2, XDG_CACHE_HOME=cache)
    assert again.rc == 0 and again.path == cold.path, again.log
    assert f"signed by ci ({site.ci_id}) (checked before; {policy} and its keys unchanged)" in again.log
    res = CliRunner().invoke(main, ["verify", f"docker://{ref}", "--key", str(site.dir / "ci.pub"), "--json"])
    assert res.exit_code == 0 and any(s["digest"]["sha256"] == sha for s in json.loads(res.stdout)["subjects"])


def test_unsigned_image_is_refused_in_one_line_and_nothing_is_stored(base_image, registry, site, tmp_path):
    pushed = push_image(base_image, f"{registry}/ik-signed/plain:1")
    call = get(f"docker://{registry}#ik-signed/plain:1", tmp_path, site.policy(POLICY))
    line = refusal(call)
    assert f"{registry}/ik-signed/plain:1" in line and pushed.digest in line
    assert "unsigned" in line and f"accepted signers: ci ({site.ci_id})" in line
    assert not list((tmp_path / "store" / "entries").rglob("image.sqsh"))


def test_a_signer_the_policy_does_not_name_is_refused(base_image, registry, site, tmp_path):
    push_signed(base_image, f"{registry}/ik-signed/rogue:1", site.dir / "rogue.key", tmp_path)
    line = refusal(get(f"docker://{registry}#ik-signed/rogue:1", tmp_path, site.policy(POLICY)))
    assert f"signed by {site.rogue_id}, not by a key the site accepts" in line
    assert f"accepted signers: ci ({site.ci_id})" in line


@pytest.mark.parametrize("change,said", [
    (("      ci: {{path: {dir}/ci.pub}}\n", "      ci: {{path: {dir}/ci.pub}}\n    revoked: [ci]\n"), "which is revoked"),
    (("{dir}/ci.pub}}", "{dir}/ci.pub, not-after: 2020-01-01}}"), "which expired on 2020-01-01"),
    (("signers: [ci]\n      - match: \"*/ik-convert/*\"", "signers: [ci, nobody]\n      - match: \"*/ik-convert/*\""),
     "the policy cannot be used: "),
    (("*/ik-signed/*", "*/elsewhere/*"), "no rule of"),
])
def test_revoked_expired_broken_policy_and_no_rule_refuse(base_image, registry, site, tmp_path, change, said):
    ref = f"{registry}/ik-signed/base:1"
    push_signed(base_image, ref, site.dir / "ci.key", tmp_path)
    policy = site.policy(POLICY.replace(change[0], change[1], 1))
    line = refusal(get(f"docker://{registry}#ik-signed/base:1", tmp_path, policy))
    assert said in line, line
    if "cannot be used" in said:
        assert f"{policy}:6: repositories[0].signers: no key called 'nobody'" in line


def test_statements_of_another_manifest_are_refused(base_image, odd_image, registry, site, tmp_path):
    """The tag moved to another image, and the old signed statements were listed for the new manifest
    too: they name the old manifest, so nothing is served."""
    ref = f"{registry}/ik-signed/moved:1"
    push_signed(base_image, ref, site.dir / "ci.key", tmp_path)
    client = RegistryClient.for_reference(parse(ref))
    old = client.resolve(parse(ref))
    envelopes = attestations.fetch(client, "ik-signed/moved", old).envelopes
    moved = push_image(odd_image, ref)
    new = client.resolve(parse(ref))
    assert new.digest == moved.digest != old.digest
    for env in envelopes:      # listed again as they were: same predicate type, same signer
        attestation_push.push(RegistrySubject(client, "ik-signed/moved", new), json.loads(env.raw),
                              json.loads(env.payload)["predicateType"], site.ci_id)
    line = refusal(get(f"docker://{registry}#ik-signed/moved:1", tmp_path, site.policy(POLICY)))
    assert new.digest in line and "no signed statement names this oci-manifest" in line, line
    assert old.digest[:23] in line      # what the statements are about instead


def test_a_store_file_that_is_not_the_signed_one_is_never_served(base_image, registry, site, tmp_path):
    """Someone with the store's write rights swapped the entry's file and its recorded sha256: the store's
    own check passes, the policy's does not."""
    push_signed(base_image, f"{registry}/ik-signed/swap:1", site.dir / "ci.key", tmp_path)
    policy = site.policy(POLICY)
    first = get(f"docker://{registry}#ik-signed/swap:1", tmp_path, policy)
    assert first.rc == 0, first.log
    served = Path(first.path)
    os.chmod(served, 0o644)
    with open(served, "r+b") as fh:          # a byte inside the squashfs's data, superblock left as is
        fh.seek(served.stat().st_size // 2)
        fh.write(b"\x00" if fh.read(1) != b"\x00" else b"\x01")
    meta = served.parent / "entry.json"
    os.chmod(meta, 0o644)
    doc = json.loads(meta.read_text())
    doc["sha256"] = hashlib.sha256(served.read_bytes()).hexdigest()
    meta.write_text(json.dumps(doc))
    os.chmod(served, 0o444)
    os.chmod(meta, 0o444)
    line = refusal(get(f"docker://{registry}#ik-signed/swap:1", tmp_path, policy, step=1))
    assert f"the .sqsh it would serve (sha256:{doc['sha256']}) is named by no signed statement" in line


def test_convert_true_serves_a_conversion_of_a_verified_image_and_false_refuses(base_image, registry, site, tmp_path):
    """Signed without a pushed .sqsh (`imagekit sign docker://…`): only `convert: true` lets the importer
    convert the verified image itself; otherwise it refuses before converting anything."""
    for repo in ("ik-convert/base:1", "ik-signed/noart:1"):
        push_image(base_image, f"{registry}/{repo}")
        res = CliRunner().invoke(main, ["sign", f"docker://{registry}/{repo}", "--key", str(site.dir / "ci.key"), "-q"])
        assert res.exit_code == 0, res.output
    policy = site.policy(POLICY)
    ok = get(f"docker://{registry}#ik-convert/base:1", tmp_path, policy)
    assert ok.rc == 0 and "converted and stored" in ok.log, ok.log
    assert (Path(ok.path).parent / bundle.ENTRY_NAME).is_file()
    again = get(f"docker://{registry}#ik-convert/base:1", tmp_path, policy, step=1)
    assert again.rc == 0 and "store hit" in again.log, again.log
    line = refusal(get(f"docker://{registry}#ik-signed/noart:1", tmp_path / "other", policy))
    assert "no signed .sqsh to serve" in line and "convert: true" in line
    assert "converting" not in get(f"docker://{registry}#ik-signed/noart:1", tmp_path / "other", policy).log


def test_the_plain_importer_hands_a_policy_over_never_ignores_it(base_image, registry, site, tmp_path):
    """A wrapper that names imagekit-pyxis-importer with IMAGEKIT_POLICY set is slower, never open."""
    push_image(base_image, f"{registry}/ik-signed/plain2:1")
    call = get(f"docker://{registry}#ik-signed/plain2:1", tmp_path, site.policy(POLICY), argv=[str(EXE)])
    assert "handing over to imagekit-pyxis-importer-signed" in call.log
    assert "unsigned" in refusal(call)


def test_the_signed_importer_without_a_policy_refuses_to_guess(base_image, registry, tmp_path):
    env = job_env(tmp_path / "store", tmp_path / "run", 0)
    env.pop("IMAGEKIT_POLICY", None)
    call = pyxis_get(f"docker://{registry}#ik-signed/open:1", env, [str(SIGNED)])
    assert call.rc == 2 and "IMAGEKIT_POLICY is not set" in call.log and call.path == ""


def test_without_a_policy_nothing_changes(base_image, registry, tmp_path):
    push_image(base_image, f"{registry}/ik-signed/open:1")
    env = job_env(tmp_path / "store", tmp_path / "run", 0)
    env.pop("IMAGEKIT_POLICY", None)
    call = pyxis_get(f"docker://{registry}#ik-signed/open:1", env)
    assert call.rc == 0 and "policy:" not in call.log and "refused" not in call.log, call.log


@pytest.mark.parametrize("plant", ["fifo", "deep envelope"])
def test_h7_what_a_publisher_leaves_beside_an_entry_never_hangs_or_breaks_the_importer(base_image, registry, site,
                                                                                      tmp_path, plant):
    """H7: the statements beside the entry replaced by a FIFO (it used to hang the job until killed), or by
    an envelope nested 200,000 deep (it used to end the importer as "a bug", exit 1): a warning names the
    file, and the statements come from the registry instead. The subprocess timeout is a hang guard."""
    push_signed(base_image, f"{registry}/ik-signed/h7:1", site.dir / "ci.key", tmp_path)
    policy = site.policy(POLICY)
    first = get(f"docker://{registry}#ik-signed/h7:1", tmp_path, policy)
    assert first.rc == 0, first.log
    side = Path(first.path).parent / bundle.ENTRY_NAME
    side.unlink()
    if plant == "fifo":
        os.mkfifo(side)
    else:
        side.write_bytes(b'{"payloadType":"x","payload":"","signatures":' + b"[" * 200_000 + b"]" * 200_000 + b"}\n")
    # A cache without the first get's verdict: the check reads what lies beside the entry.
    again = get(f"docker://{registry}#ik-signed/h7:1", tmp_path, policy, step=1, XDG_CACHE_HOME=str(tmp_path / "c2"))
    assert again.rc == 0 and again.path == first.path, again.log
    assert f"the signatures beside {first.path} are unreadable" in again.log, again.log
    assert "Traceback" not in again.log and "a bug" not in again.log


def flood(registry_addr: str, repo: str, key_path: Path, n: int) -> list[str]:
    """What anyone who may push to ``repo`` can do (the red team's flood.py): ``n`` well-formed provenance
    statements about the image, signed by their own key, listed after the genuine ones. Their digests."""
    ref = parse(f"{registry_addr}#{repo}:1")
    client = RegistryClient.for_reference(ref)
    subject = client.resolve(ref)
    key = keys.load_private(key_path)
    pushed = []
    for i in range(n):
        st = Statement([Subject("oci-manifest", subject.digest.split(":")[1], f"junk-{i}")], SLSA_PROVENANCE, {"i": i})
        pushed.append(attestation_push.push(RegistrySubject(client, repo, subject),
                                            signer.sign(st.payload(), PAYLOAD_TYPE, key), SLSA_PROVENANCE,
                                            key.key.keyid))
    return pushed


@pytest.mark.parametrize("n", [32, 100])
def test_h5_junk_statements_pushed_after_the_genuine_ones_never_evict_them(base_image, registry, site, tmp_path, n):
    """H5: 32 (and 100) statements signed by a pusher's own key used to push the genuine ones out of the
    window of the last 32 read, so the image was refused everywhere. The genuine statements still verify
    (importer and `imagekit verify`), and the junk is skipped unread: the front of the real registry
    sees none of its manifests fetched."""
    repo = f"ik-signed/flood{n}"
    push_signed(base_image, f"{registry}/{repo}:1", site.dir / "ci.key", tmp_path)
    junk = flood(registry, repo, site.dir / "rogue.key", n)
    with Server(lambda seen, server: forward(registry, seen)) as front:
        call = get(f"docker://{front.addr}#{repo}:1", tmp_path, site.policy(POLICY))
        assert call.rc == 0 and f"signed by ci ({site.ci_id})" in call.log, call.log
        assert f"skipping {n} listed statements unread" in call.log
        res = CliRunner().invoke(main, ["verify", f"docker://{front.addr}/{repo}:1", "--key",
                                        str(site.dir / "ci.pub")])
        assert res.exit_code == 0, res.output
        read = {s.path.rsplit("/", 1)[-1] for s in front.requests("GET", "/manifests/sha256:")}
    assert not read & set(junk), "a junk statement was downloaded"


def test_h5_only_junk_is_a_refusal_that_names_its_signer(base_image, registry, site, tmp_path):
    """The image signed only by keys the site does not accept: refused, naming them, reading none."""
    push_image(base_image, f"{registry}/ik-signed/onlyjunk:1")
    flood(registry, "ik-signed/onlyjunk", site.dir / "rogue.key", 3)
    line = refusal(get(f"docker://{registry}#ik-signed/onlyjunk:1", tmp_path, site.policy(POLICY)))
    assert f"3 listed, signed by {site.rogue_id}, not by a key the site accepts" in line, line


def test_a_recorded_verdict_holds_only_while_the_policy_its_keys_and_their_trust_do(base_image, registry, site,
                                                                                    tmp_path):
    """A repeat hit is spared the signature check (pyxis_verdicts), and each change the full check would
    refuse is refused at once: a key revoked in the policy, the policy made writable by others, the key
    file replaced by another key. Put back, the image is served again, checked in full first."""
    push_signed(base_image, f"{registry}/ik-signed/held:1", site.dir / "ci.key", tmp_path)
    own = tmp_path / "site"
    own.mkdir()
    for name in ("ci.pub", "rogue.pub"):
        (own / name).write_bytes((site.dir / name).read_bytes())
    policy = own / "policy.yaml"
    good = POLICY.replace("{dir}", str(own)).replace("{{", "{").replace("}}", "}")
    policy.write_text(textwrap.dedent(good))
    uri, cache = f"docker://{registry}#ik-signed/held:1", str(tmp_path / "cache")
    steps = iter(range(100))

    def hit():
        return get(uri, tmp_path, policy, step=next(steps), XDG_CACHE_HOME=cache)

    first = hit()
    assert first.rc == 0 and "checked before" not in first.log, first.log
    spared = hit()
    assert spared.rc == 0 and spared.path == first.path and "checked before" in spared.log, spared.log
    policy.write_text(textwrap.dedent(good) + "revoked: [ci]\n")
    assert "which is revoked" in refusal(hit())
    policy.write_text(textwrap.dedent(good) + "# ci unrevoked\n")     # new bytes: checked in full, recorded
    served = hit()
    assert served.rc == 0 and "checked before" not in served.log, served.log
    assert "checked before" in hit().log
    policy.chmod(0o646)
    line = refusal(hit())
    assert f"signature policy {policy} is writable by everyone" in line, line
    policy.chmod(0o644)
    assert "checked before" in hit().log
    (own / "ci.pub").write_bytes((own / "rogue.pub").read_bytes())
    assert "not by a key the site accepts" in refusal(hit())
