"""Under a signature policy, a signature covers the bytes that start (H2 of ../shared/reviews/security-4.md).

A publisher of a shared store (imagekit-user, a member of its group) holds no signing key. Before the fix
they could replace a signed entry's ``image.sqsh`` and rewrite its seal in ``entry.json`` keeping the
signed sha256: the signed importer served their file as "signed by ci", and CI's next ``export --store
--sign`` (a store hit) signed it with the site key. Now:

- the entry tree of a shared store is sticky: a publisher cannot rename or replace what root published
  (nor the file the importer printed, after it exited);
- the signed importer serves only a file nobody but root and the job's user can change, hashed on its
  first use on each node (:mod:`imagekit.export.store.sealed`); a publisher's seal is never trusted;
- ``export --sign`` signs only bytes it converted, or a store entry only root (or the signer) could have
  written, hashed in full in that run.

Real users (setpriv), the real engine, real squashfs files and the real importer, run as Pyxis runs it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pwd
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.needs import need
from helpers.pyxis_calls import job_env, pyxis_get
from helpers.users import setpriv

from imagekit.attest import bundle, keys
from imagekit.cli import main
from imagekit.util.errors import IntegrityError
from imagekit.export.store import sealed
from imagekit.export.store.verify import Stamps

pytestmark = pytest.mark.engine
SIGNED = Path(sys.executable).parent / "imagekit-pyxis-importer-signed"

# What a publisher can do to an entry (as themselves, Debian's python3): put their file in the entry's
# directory, rename it over image.sqsh, and rewrite entry.json's seal for it, keeping the signed sha256.
FORGE = textwrap.dedent("""\
    import json, os, shutil, sys
    entry, evil = sys.argv[1:]
    shutil.copyfile(evil, os.path.join(entry, "evil.sqsh"))
    os.chmod(os.path.join(entry, "evil.sqsh"), 0o444)
    os.rename(os.path.join(entry, "evil.sqsh"), os.path.join(entry, "image.sqsh"))
    meta = os.path.join(entry, "entry.json")
    doc = json.load(open(meta))
    st = os.stat(os.path.join(entry, "image.sqsh"))
    doc["bytes"], doc["sealed"] = st.st_size, {"ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    with open(meta + ".new", "w") as fh:
        json.dump(doc, fh)
    os.chmod(meta + ".new", 0o444)
    os.rename(meta + ".new", meta)
    """)


def publisher() -> tuple[int, int]:
    """imagekit-user: (uid, gid), its own group being the store's publishers' group (looked up by name)."""
    try:
        user = pwd.getpwnam("imagekit-user")
    except KeyError:
        need("the unprivileged test user 'imagekit-user' does not exist (bash scripts/setup-cluster.sh)")
        raise
    return user.pw_uid, user.pw_gid


def as_publisher(argv: list[str]) -> subprocess.CompletedProcess:
    uid, gid = publisher()
    return subprocess.run(setpriv(uid, argv, gid=gid), capture_output=True, text=True, timeout=120)


@pytest.fixture
def site(shared_dir, base_image):
    """A shared store (publishers: imagekit-user's group) into which root exported and signed the base
    image as CI does; the policy that accepts only the site key; and a squashfs nobody signed."""
    _, group = publisher()
    store = shared_dir / "store"
    res = CliRunner().invoke(main, ["store", "--store", str(store), "init", "--shared", "--group", str(group)])
    assert res.exit_code == 0, res.output
    keys.write_pair(keys.generate(), shared_dir / "ci")
    policy = shared_dir / "policy.yaml"
    policy.write_text(f"version: 1\nkeys:\n  ci: {{path: {shared_dir}/ci.pub}}\n"
                      "repositories:\n  - match: \"dockerd://*\"\n    signers: [ci]\n")
    out = shared_dir / "out.sqsh"
    res = CliRunner().invoke(main, ["export", base_image, "--to", "enroot", "--store", str(store),
                                    "--sign", str(shared_dir / "ci.key"), "-o", str(out), "--json", "-q"])
    assert res.exit_code == 0, res.output
    entry = Path(json.loads(res.stdout.splitlines()[-1])["store_entry"])
    evil_root = shared_dir / "evil-root"
    (evil_root / "etc").mkdir(parents=True)
    (evil_root / "etc" / "evil-marker").write_text("NOT THE SIGNED IMAGE\n")
    evil = shared_dir / "evil.sqsh"
    subprocess.run(["mksquashfs", str(evil_root), str(evil), "-quiet", "-noappend"], check=True)
    os.chmod(evil, 0o644)

    class Site:
        pass

    s = Site()
    s.dir, s.store, s.policy, s.entry, s.evil, s.image = shared_dir, store, policy, entry, evil, base_image
    s.signed_sha = hashlib.sha256(entry.read_bytes()).hexdigest()
    s.evil_sha = hashlib.sha256(evil.read_bytes()).hexdigest()
    return s


def signed_get(site, tmp_path: Path, step: int = 0):
    """Root's job, as Pyxis runs the importer a site with a policy names."""
    env = job_env(tmp_path / "own-store", tmp_path / "run", step, IMAGEKIT_SHARED_STORE=str(site.store),
                  IMAGEKIT_POLICY=str(site.policy), XDG_CACHE_HOME=str(tmp_path / "cache"))
    return pyxis_get(f"dockerd://{site.image}", env, [str(SIGNED)])


def sha_of(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def legacy_layout(site) -> None:
    """The entry tree as a store made before the fix has it: group-writable, not sticky."""
    for path in (site.entry.parents[i] for i in range(4)):
        os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & ~stat.S_ISVTX)


def test_h2_a_publisher_cannot_replace_a_signed_entry_root_published(site, tmp_path):
    """(a) and (b): the publisher's rename over root's image.sqsh (and over entry.json, and of the entry's
    directory) is refused by the sticky entry tree, before and after the importer printed the path; the
    job starts the signed bytes. Before the fix the forgery worked and the job started the planted file."""
    first = signed_get(site, tmp_path)
    assert first.rc == 0 and first.path == str(site.entry), first.log
    assert "signed by ci" in first.log
    forged = as_publisher(["/usr/bin/python3", "-c", FORGE, str(site.entry.parent), str(site.evil)])
    assert forged.returncode != 0 and "Operation not permitted" in forged.stderr, forged.stderr
    moved = as_publisher(["mv", str(site.entry.parent), str(site.entry.parent) + ".mine"])
    assert moved.returncode != 0 and "Operation not permitted" in moved.stderr, moved.stderr
    assert sha_of(first.path) == site.signed_sha, "the path Pyxis opens after the importer exited"
    again = signed_get(site, tmp_path, step=1)
    assert again.rc == 0 and sha_of(again.path) == site.signed_sha, again.log


def test_h2_a_forged_seal_in_an_old_layout_is_never_served(site, tmp_path):
    """(a) where the tree is not sticky yet (a store made before the fix): the publisher's forgery lands,
    and the store's own check passes on the forged seal, but the signed importer serves nothing a
    publisher could have changed: it refuses (exit 12, one line), and never starts the planted file."""
    legacy_layout(site)
    forged = as_publisher(["/usr/bin/python3", "-c", FORGE, str(site.entry.parent), str(site.evil)])
    assert forged.returncode == 0, forged.stderr
    assert sha_of(site.entry) == site.evil_sha
    call = signed_get(site, tmp_path)
    assert call.path == "" and call.rc == 12, (call.rc, call.path, call.log)
    assert f"not serving {site.entry} under the signature policy" in call.log
    assert "not sticky" in call.log or "belongs to uid" in call.log, call.log


def test_h2_the_signed_importer_hashes_a_root_entry_once_per_node(site, tmp_path):
    """Root's entry in a sticky tree is served; its bytes are hashed on the first get of this user on this
    node (a stamp in the user's cache, naming the host), and never on the publisher's seal."""
    call = signed_get(site, tmp_path)
    assert call.rc == 0, call.log
    stamps = [p for p in (tmp_path / "cache" / "imagekit" / "verified").iterdir() if not p.name.startswith("policy-")]
    assert len(stamps) == 1 and json.loads(stamps[0].read_text())["sha256"] == site.signed_sha
    assert "ctime_ns" in json.loads(stamps[0].read_text())


def test_h2_export_sign_never_signs_a_planted_entry(site, tmp_path):
    """(c) CI's next `export --store --sign` after the forgery is a store hit on the planted file: it now
    converts afresh and signs only the bytes it made; the planted entry gets no signature beside it."""
    legacy_layout(site)
    (site.entry.parent / bundle.ENTRY_NAME).unlink()
    forged = as_publisher(["/usr/bin/python3", "-c", FORGE, str(site.entry.parent), str(site.evil)])
    assert forged.returncode == 0, forged.stderr
    out = tmp_path / "ci-out.sqsh"
    res = CliRunner().invoke(main, ["export", site.image, "--to", "enroot", "--store", str(site.store),
                                    "--sign", str(site.dir / "ci.key"), "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert "not signing the export store's file" in res.output and "converting" in res.output
    listing = subprocess.run(["unsquashfs", "-l", str(out)], capture_output=True, text=True, check=True).stdout
    assert "evil-marker" not in listing and "etc/debian_version" in listing
    signed = [json.loads(line) for line in bundle.beside(out).read_bytes().splitlines()]
    named = {s["digest"]["sha256"] for env in signed for s in json.loads(base64.b64decode(env["payload"]))["subject"]}
    assert sha_of(out) in named and site.evil_sha not in named
    assert not (site.entry.parent / bundle.ENTRY_NAME).exists()


def test_root_publishing_takes_over_the_directories_a_publisher_made_first(shared_dir, base_image, other_python,
                                                                           tmp_path):
    """A publisher converted the image first (another preset), so the image's directories were theirs: root
    publishing into them takes them over (through descriptors), so the entry root signs is servable under
    a policy; the publisher's own entry stays theirs."""
    uid, group = publisher()
    store = shared_dir / "store"
    assert CliRunner().invoke(main, ["store", "--store", str(store), "init", "--shared", "--group",
                                     str(group)]).exit_code == 0
    image_id = json.loads(subprocess.run(["/usr/bin/docker", "image", "inspect", base_image], capture_output=True,
                                         text=True, check=True).stdout)[0]["Id"]
    plant = ("import sys; from imagekit.export.store import Store; st = Store.open(sys.argv[1]); "
             "print(st.get_or_create(st.key(sys.argv[2], 'enroot', 'shared-fs'), "
             "lambda p: p.write_bytes(b'theirs'))[0].path)")
    theirs = subprocess.run(setpriv(uid, [str(other_python.python), "-c", plant, str(store), image_id], gid=group),
                            env=other_python.env(HOME=str(tmp_path)), capture_output=True, text=True, timeout=120)
    assert theirs.returncode == 0, theirs.stderr
    image_dir = Path(theirs.stdout.strip()).parents[1]
    assert image_dir.stat().st_uid == uid
    res = CliRunner().invoke(main, ["export", base_image, "--to", "enroot", "--store", str(store), "-o",
                                    str(tmp_path / "out.sqsh"), "--json", "-q"])
    assert res.exit_code == 0, res.output
    entry = Path(json.loads(res.stdout.splitlines()[-1])["store_entry"])
    assert sealed.problem(entry) is None
    assert image_dir.stat().st_uid == 0 and Path(theirs.stdout.strip()).parent.stat().st_uid == uid


def test_a_stamp_is_of_one_inode_as_it_was_hashed_ctime_included(tmp_path):
    """Setting the mtime back (what a file's owner may do) changes the ctime: the file is hashed again."""
    path = tmp_path / "image.sqsh"
    path.write_bytes(b"bytes")
    sha = hashlib.sha256(b"bytes").hexdigest()
    stamps = Stamps(tmp_path / "stamps")
    assert sealed.check(path, sha, stamps) is True
    assert sealed.check(path, sha, stamps) is False
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert sealed.check(path, sha, stamps) is True
    with open(path, "r+b") as fh:
        fh.write(b"B")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(IntegrityError, match="has sha256:"):
        sealed.check(path, sha, stamps)


def test_a_path_others_can_change_is_named(tmp_path):
    """Group-writable and not sticky, another owner, a link on the way: each named, never followed."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "f").write_bytes(b"x")
    assert sealed.problem(d / "f") is None
    os.chmod(d, 0o2775)
    os.chown(d, -1, 3000)
    assert "is writable by others and not sticky" in sealed.problem(d / "f")
    os.chmod(d, 0o3775)
    assert sealed.problem(d / "f") is None
    os.chown(d / "f", 2001, -1)
    assert "belongs to uid 2001" in sealed.problem(d / "f")
    (tmp_path / "link").symlink_to(d)
    assert "symbolic link" in sealed.problem(tmp_path / "link" / "f")
