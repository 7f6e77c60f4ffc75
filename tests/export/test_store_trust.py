"""Who may publish into an export store, and what every hit verifies (README "The export store:
who may publish"). Regression tests for the red-team findings of ../shared/reviews/security-2.md:
F2 (any store user replaced any image), F6 (umasks broke a shared store), F7 (symlinks followed
by gc and holds), F13 (PID namespaces), F14 (malformed entry.json), F15 (full disk at lock time),
F16 (umask ignored).

Other users are real processes: numeric uids under ``setpriv`` running Debian's python3 with this
checkout's code (tests/helpers/users.py), and the cluster's ``imagekit-user`` where the store must
look a publisher up by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.users import ALICE, BOB, CAROL, TEAM, home_for, setpriv

from imagekit.util import leases
from imagekit.cli import main
from imagekit.util.errors import IntegrityError, NoSpaceError
from imagekit.export.store import Store, UntrustedEntry, UntrustedStore, find, locks, notices
from imagekit.export.store.verify import Stamps
from helpers.needs import need

IMAGE = "sha256:" + "6c" * 32
OTHER = "sha256:" + "bb" * 32

# The public Store API, run as another user: python -c PLANT STORE IMAGE CONTENT [PRESET [OPTION...]]
PLANT = textwrap.dedent("""\
    import sys
    from imagekit.util.errors import ImagekitError
    from imagekit.export.store import Store
    root, image, content, preset, *options = sys.argv[1:] + ["fast"][len(sys.argv) - 4:]
    try:
        st = Store.open(root)
        entry, made = st.get_or_create(st.key(image, "enroot", preset, tuple(options)),
                                       lambda p: p.write_bytes(content.encode()))
    except ImagekitError as exc:          # what the CLI does with it: one line and the exit code
        sys.exit(print(f"error: {exc}", file=sys.stderr) or exc.exit_code)
    print(entry.path)
    """)
# What a job's importer does with a store: the entries it would serve for IMAGE, verified.
SERVE = textwrap.dedent("""\
    import sys
    from imagekit.util.errors import ImagekitError
    from imagekit.export.store import Store
    try:
        st = Store.open(sys.argv[1], create=False)
        for e in st.servable(sys.argv[2]):
            if st.verified(e) is not None:
                st.hold(e, "job-1")
                print(e.path, open(e.path).read())
                break
        else:
            print("NOTHING")
    except ImagekitError as exc:
        sys.exit(print(f"error: {exc}", file=sys.stderr) or exc.exit_code)
    """)


def run_as(py, uid: int, code: str, *args: str, base: Path, groups: tuple[int, ...] = (),
           umask: int = 0o022, gid: int | None = None) -> subprocess.CompletedProcess:
    argv = setpriv(uid, [str(py.python), "-c", code, *args], groups=groups, umask=umask, gid=gid)
    return subprocess.run(argv, env=py.env(HOME=str(home_for(uid, base))), capture_output=True, text=True,
                          timeout=300)


def shared_store(path: Path, group: int, owner: int = 0) -> Path:
    """``imagekit store init --shared`` as root; then handed to ``owner`` (a CI account) if given."""
    res = CliRunner().invoke(main, ["store", "--store", str(path), "init", "--shared", "--group", str(group)])
    assert res.exit_code == 0, res.output
    if owner:
        for p in [path, *path.iterdir()]:
            os.chown(p, owner, -1)
    return path


def user_group() -> int:
    """imagekit-user's own group: a group the store can look members up in (by name)."""
    try:
        return pwd.getpwnam("imagekit-user").pw_gid
    except KeyError:
        need("the unprivileged test user 'imagekit-user' does not exist (bash scripts/setup-cluster.sh)")
        raise


# --- F2: only publishers change what a job starts ---------------------------------------------------------

def test_f2_a_user_outside_the_publishers_cannot_publish_or_replace(other_python, shared_dir):
    """Alice is not a publisher of the site's store (group TEAM, which she is not in): the Store API
    refuses her with the fix, the file system refuses a raw write, and Bob's job serves root's entry."""
    py = other_python
    store = shared_store(shared_dir / "shared", TEAM)
    got = run_as(py, ALICE, PLANT, str(store), IMAGE, "ALICE'S TROJAN ROOTFS", base=shared_dir)
    assert got.returncode == 1 and "Traceback" not in got.stderr, got.stderr
    assert "may read the export store" in got.stderr and "not publish" in got.stderr
    entry, _ = Store.open(store).get_or_create(Store.open(store).key(IMAGE, "enroot", "fast"),
                                               lambda p: p.write_bytes(b"root's export"))
    replace = run_as(py, ALICE, "import os,sys; os.rename(sys.argv[1], sys.argv[1] + '.old')", str(entry.path),
                     base=shared_dir)
    assert replace.returncode != 0 and "Permission denied" in replace.stderr
    bob = run_as(py, BOB, SERVE, str(store), IMAGE, base=shared_dir)
    assert bob.returncode == 0, bob.stderr
    assert bob.stdout.split(" ", 1) == [str(entry.path), "root's export\n"]


def test_f2_the_old_group_writable_layout_is_refused_with_the_fix(other_python, shared_dir):
    """The layout the README used to give (root 2775, group of all job users): anyone in the group could
    plant for everyone. It is now refused for every user, naming the directory and `store init`."""
    store = shared_dir / "legacy"
    store.mkdir()
    os.chown(store, 0, TEAM)
    os.chmod(store, 0o2775)
    with pytest.raises(UntrustedStore, match="writable by group") as err:
        Store.open(store)
    assert "init --shared --group" in str(err.value)
    bob = run_as(other_python, BOB, SERVE, str(store), IMAGE, base=shared_dir, groups=(TEAM,))
    assert bob.returncode == 2 and "writable by group" in bob.stderr and "Traceback" not in bob.stderr


def test_f2_an_entry_a_non_publisher_owns_is_not_served(other_python, shared_dir):
    """A file a non-publisher owns (a former member, or a store that was open to all) can be rewritten
    by its owner: readers skip it with a warning naming the owner and the publishers."""
    store = shared_store(shared_dir / "shared", TEAM)
    st = Store.open(store)
    entry, _ = st.get_or_create(st.key(IMAGE, "enroot", "fast"), lambda p: p.write_bytes(b"planted earlier"))
    os.chown(entry.path, ALICE, -1)
    bob = run_as(other_python, BOB, SERVE, str(store), IMAGE, base=shared_dir)
    assert bob.stdout.strip() == "NOTHING", bob.stdout
    assert f"belongs to {ALICE}, who is not a publisher" in bob.stderr
    assert "Traceback" not in bob.stderr
    listed = CliRunner().invoke(main, ["store", "--store", str(store), "ls", "--json"])
    (shown,) = json.loads(listed.stdout)
    assert f"belongs to {ALICE}, who is not a publisher" in shown["untrusted"]


def test_f2_every_hit_checks_the_bytes_against_the_recorded_digest(tmp_path):
    """A file changed after publication (same size, even) is not served: its hash no longer matches."""
    st = Store.open(tmp_path / "s")
    key = st.key(IMAGE, "enroot", "fast")
    entry, _ = st.get_or_create(key, lambda p: p.write_bytes(b"A" * 4096))
    assert st.lookup(key) is not None
    os.chmod(entry.path, 0o644)
    entry.path.write_bytes(b"B" * 4096)
    notices._said.clear()
    with pytest.raises(IntegrityError, match="publisher recorded"):
        st.verify(find(st, IMAGE, "enroot")[0])
    assert st.lookup(key) is None


def test_f2_a_symlink_entry_or_file_is_never_served(tmp_path):
    st = Store.open(tmp_path / "s")
    key = st.key(IMAGE, "enroot", "fast")
    entry, _ = st.get_or_create(key, lambda p: p.write_bytes(b"x"))
    outside = tmp_path / "outside"
    shutil.copytree(entry.dir, outside)
    shutil.rmtree(entry.dir)
    entry.dir.symlink_to(outside)
    assert st.lookup(key) is None and find(st, IMAGE, "enroot") == []


def test_a_sealed_entry_is_served_unread_and_a_changed_one_is_hashed_then_stamped(tmp_path, monkeypatch):
    """The publisher sealed the file it hashed (its inode, size and mtime in entry.json): a reader's
    first hit reads none of it. Once the file is touched the seal no longer matches: the next hit
    hashes it in full and stamps it in the reader's own cache, and later hits read the stamp."""
    from imagekit.export.store import verify

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    st = Store.open(tmp_path / "s")
    key = st.key(IMAGE, "enroot", "fast")
    entry, _ = st.get_or_create(key, lambda p: p.write_bytes(b"data" * 1000))
    hashed = []
    real = verify.sha256_file
    monkeypatch.setattr(verify, "sha256_file", lambda p: hashed.append(p) or real(p))
    reader = Store.open(tmp_path / "s")
    reader.stamps = Stamps(tmp_path / "reader-cache")
    assert reader.lookup(key) is not None and hashed == [], "a sealed file is not read"
    os.utime(entry.path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert reader.lookup(key) is not None and len(hashed) == 1
    assert reader.lookup(key) is not None and len(hashed) == 1, "a stamp hit hashes nothing"
    os.utime(entry.path, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    assert reader.lookup(key) is not None and len(hashed) == 2
    os.chmod(reader.stamps.dir, 0o777)
    assert not Stamps(reader.stamps.dir).usable(), "a stamp directory others can write is not used"


def test_a_file_put_in_place_of_a_sealed_one_is_hashed_and_refused(tmp_path):
    """The seal names the inode: other bytes renamed over the entry's file, of the same size and with
    the sealed mtime set back, are hashed, found wrong and not served."""
    st = Store.open(tmp_path / "s")
    key = st.key(IMAGE, "enroot", "fast")
    entry, _ = st.get_or_create(key, lambda p: p.write_bytes(b"A" * 4096))
    assert entry.seal == {"ino": os.stat(entry.path).st_ino, "size": 4096,
                          "mtime_ns": os.stat(entry.path).st_mtime_ns}
    other = entry.dir / "other"
    other.write_bytes(b"B" * 4096)
    os.utime(other, ns=(entry.seal["mtime_ns"], entry.seal["mtime_ns"]))
    os.chmod(entry.dir, 0o755)
    os.rename(other, entry.path)
    notices._said.clear()
    with pytest.raises(IntegrityError, match="publisher recorded"):
        st.verify(find(st, IMAGE, "enroot")[0])
    assert st.lookup(key) is None


# --- F5: content-changing variants are never served for a plain reference ---------------------------------

def test_f5_a_squash_opt_variant_is_not_servable(tmp_path):
    st = Store.open(tmp_path)
    slim = st.get_or_create(st.key(IMAGE, "enroot", "fast", ("squash-opt=-e", "squash-opt=usr")),
                            lambda p: p.write_bytes(b"SLIM VARIANT: /usr excluded"))[0]
    assert st.servable(IMAGE) == []
    plain = st.get_or_create(st.key(IMAGE, "enroot", "shared-fs", ("tool=tar2sqfs", "epoch=1700000000")),
                             lambda p: p.write_bytes(b"plain"))[0]
    art = st.get_or_create(st.key(IMAGE, "enroot", "fast", ("source=artifact",)), lambda p: p.write_bytes(b"a"))[0]
    assert {e.path for e in st.servable(IMAGE)} == {plain.path, art.path}
    assert slim.path not in {e.path for e in st.servable(IMAGE)}


# --- F6: a shared store works for every member, whatever their umask ---------------------------------------

def test_f6_publishers_with_any_umask_and_readers_share_one_store(other_python, shared_dir):
    """Carol (the store's CI account, in the publishers' group, umask 077) and imagekit-user (a member
    by its primary group, umask 022) publish entries of one image; Alice and Bob (readers, umasks 022 and 077) hold and read
    them; a reader's gc explains what it may not evict; a publisher's gc evicts only its own entries (the
    entry tree is sticky: no publisher removes or replaces what another published), and the store's owner,
    whose directories they are, evicts the rest."""
    py, group = other_python, user_group()
    user = pwd.getpwnam("imagekit-user").pw_uid
    store = shared_store(shared_dir / "shared", group, owner=CAROL)
    carol = run_as(py, CAROL, PLANT, str(store), IMAGE, "carol's", "fast", base=shared_dir, umask=0o077,
                   groups=(group,))
    assert carol.returncode == 0, carol.stderr
    member = run_as(py, user, PLANT, str(store), IMAGE, "member's", "shared-fs", base=shared_dir, gid=group,
                    umask=0o022)
    assert member.returncode == 0, member.stderr
    for path in (Path(carol.stdout.strip()), Path(member.stdout.strip())):
        assert (path.stat().st_mode & 0o777, path.stat().st_gid) == (0o444, group)
        assert (path.parent.stat().st_mode & 0o7777, path.parent.stat().st_gid) == (0o3775, group)
    image_dir = Path(carol.stdout.strip()).parents[2]
    assert image_dir.stat().st_mode & 0o7777 == 0o3775, "made by a umask-077 publisher, open to the group"
    for uid, umask in ((ALICE, 0o022), (BOB, 0o077)):
        read = run_as(py, uid, SERVE, str(store), IMAGE, base=shared_dir, umask=umask)
        assert read.returncode == 0 and read.stdout.split(" ", 1)[1] in ("carol's\n", "member's\n"), read.stderr
    gc = run_as(py, ALICE, "from imagekit.cli import main; main()", "store", "--store", str(store), "gc",
                "--max-size", "0", base=shared_dir)
    assert gc.returncode == 0 and "Traceback" not in gc.stderr, gc.stderr
    assert "0 evicted" in gc.stdout and "held" in gc.stdout
    for uid in (ALICE, BOB):
        assert run_as(py, uid, "from imagekit.export.store import Store; import sys; "
                      "Store.open(sys.argv[1]).release(None, 'job-1')", str(store), base=shared_dir).returncode == 0
    gc = run_as(py, ALICE, "from imagekit.cli import main; main()", "store", "--store", str(store), "gc",
                "--max-size", "0", base=shared_dir)
    assert gc.returncode == 0 and "Traceback" not in gc.stderr, gc.stderr
    assert gc.stderr.count("cannot evict") == 2 and "Permission denied" in gc.stderr, gc.stderr
    gc = run_as(py, user, "from imagekit.cli import main; main()", "store", "--store", str(store), "gc",
                "--max-size", "0", base=shared_dir, gid=group)
    assert gc.returncode == 0 and "1 evicted" in gc.stdout, gc.stdout + gc.stderr
    assert gc.stderr.count("cannot evict") == 1 and "Operation not permitted" in gc.stderr, gc.stderr
    assert [e.preset for e in Store.open(store).entries()] == ["fast"], "carol's is left to her"
    gc = run_as(py, CAROL, "from imagekit.cli import main; main()", "store", "--store", str(store), "gc",
                "--max-size", "0", base=shared_dir, groups=(group,))
    assert gc.returncode == 0 and "1 evicted" in gc.stdout, gc.stdout + gc.stderr
    assert Store.open(store).entries() == []


def test_f6_a_private_store_refuses_another_publisher_with_the_fix(other_python, shared_dir):
    """Root's own store (made with umask 022) is readable by Alice, who trusts its owner, but her
    conversions must go to her own store: one clear line, never a PermissionError traceback."""
    store = shared_dir / "roots"
    st = Store.open(store)
    st.get_or_create(st.key(IMAGE, "enroot", "fast"), lambda p: p.write_bytes(b"root's"))
    read = run_as(other_python, ALICE, SERVE, str(store), IMAGE, base=shared_dir)
    # Root's private store has no holds/ Alice may write: she is told, and nothing is served.
    assert read.returncode == 1 and "holds" in read.stderr and "Traceback" not in read.stderr
    plant = run_as(other_python, ALICE, PLANT, str(store), OTHER, "alice's", base=shared_dir)
    assert plant.returncode == 1 and "not publish" in plant.stderr and "Traceback" not in plant.stderr


# --- F7: nothing is followed through a planted symbolic link -----------------------------------------------

def test_f7_gc_measures_its_clock_on_its_own_file_never_through_a_planted_link(tmp_path):
    root = tmp_path / "s"
    Store.open(root)
    target = tmp_path / "rootonly" / "CREATED-BY-ROOTS-GC"
    target.parent.mkdir(mode=0o700)
    (root / "locks" / ".clock").symlink_to(target)
    (root / "tmp" / "x@otherhost.ns1.b1+1+1@y").mkdir()       # another host's temporary: its age is read
    (root / "locks" / "k.lock").write_text("otherhost.ns1.b1+1+1\n")
    res = CliRunner().invoke(main, ["store", "--store", str(root), "gc"])
    assert res.exit_code == 0, res.output
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_f7_a_planted_hold_never_redirects_or_blocks_another_users_hold(other_python, shared_dir):
    """Alice plants, in the shared holds/, a link and a file under the very name Bob's job holds by:
    Bob's hold lands as his own file beside them, counts, and the link's target is never created."""
    store = shared_store(shared_dir / "shared", TEAM)
    st = Store.open(store)
    entry, _ = st.get_or_create(st.key(IMAGE, "enroot", "fast"), lambda p: p.write_bytes(b"x"))
    victim = shared_dir / "victim-dir"
    victim.mkdir(mode=0o700)
    os.chown(victim, BOB, BOB)
    slug = st.slug(entry)
    plant = run_as(other_python, ALICE,
                   f"import os,sys; os.symlink(sys.argv[2], sys.argv[1] + '/holds/' + sys.argv[3] + '@{BOB}@job-1');"
                   f"open(sys.argv[1] + '/holds/' + sys.argv[3] + '@{BOB}@job-2', 'w').close();"
                   f"os.chmod(sys.argv[1] + '/holds/' + sys.argv[3] + '@{BOB}@job-2', 0o666)",
                   str(store), str(victim / "CREATED"), slug, base=shared_dir)
    assert plant.returncode == 0, plant.stderr
    hold = run_as(other_python, BOB, "import sys; from imagekit.export.store import Store; st = Store.open(sys.argv[1]);"
                  "e = st.entries()[0]; [print(st.hold(e, n)) for n in ('job-1', 'job-2')]",
                  str(store), base=shared_dir)
    assert hold.returncode == 0, hold.stderr
    assert not (victim / "CREATED").exists()
    paths = [Path(p) for p in hold.stdout.split()]
    assert all(p.stat().st_uid == BOB and not p.is_symlink() and "~" in p.name for p in paths)
    assert sorted(Store.open(store).held(entry)) == ["job-1", "job-2"], "only Bob's own files count"


# --- F13: owners in another PID namespace are never judged dead ---------------------------------------------

NS_CONVERTER = textwrap.dedent("""\
    import sys, time
    from imagekit.util import leases
    from imagekit.export.store import Store
    st = Store.open(sys.argv[1])
    def make(path):
        open(sys.argv[2], "w").write(leases.me())
        time.sleep(4)
        path.write_bytes(b"made in the namespace")
    entry, made = st.get_or_create(st.key(sys.argv[3], "enroot", "fast"), make)
    print(made, entry.path.read_bytes().decode())
    """)


def test_f13_a_live_converter_in_another_pid_namespace_keeps_its_lock_and_work(tmp_path):
    """Same host name, another PID namespace (a container with host networking, a CI runner): its pid
    means nothing here, so its lock is waited for, never broken, and its temporary never swept."""
    need(None if os.geteuid() == 0 and shutil.which("unshare") else "unshare --pid needs root")
    store, started = tmp_path / "s", tmp_path / "started"
    Store.open(store)
    inner = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", NS_CONVERTER,
                              str(store), str(started), IMAGE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    from helpers.polling import wait_for

    wait_for(lambda: started.exists() and started.read_text(), "the namespaced converter to take the lock")
    st = Store.open(store)
    st.poll = st.poll_max = 0.1
    assert st.sweep() == [], "nothing of a live converter in another namespace is swept"
    entry, made = st.get_or_create(st.key(IMAGE, "enroot", "fast"), lambda p: p.write_bytes(b"made here"))
    out, err = inner.communicate(timeout=60)
    assert inner.returncode == 0, err
    assert out.split()[0] == "True" and not made and entry.path.read_bytes() == b"made in the namespace"
    token = started.read_text()
    assert not leases.local(token) and leases.alive(token), token


def test_f13_tokens_name_the_pid_namespace_and_boot():
    me = leases.me()
    where, pid, start = me.rsplit("+", 2)
    assert where == leases.where() and f".ns{os.stat('/proc/self/ns/pid').st_ino}." in where
    assert int(pid) == os.getpid() and leases.local(me) and leases.alive(me)
    other = f"{where.split('.ns')[0]}.ns1.b0+{os.getpid()}+{start}"     # same host, another namespace
    assert not leases.local(other) and leases.alive(other)
    old = f"{where.split('.ns')[0]}+{os.getpid() + 1}+1"                   # an older imagekit's token
    assert not leases.local(old) and leases.alive(old)


# --- F14: a malformed entry.json is skipped with a warning ------------------------------------------------

@pytest.mark.parametrize("doc", ["{}", "[]", "not json", '{"image_id": 1}', "BADVERSION", "{" + " " * 70000 + "}"])
def test_f14_a_malformed_entry_is_skipped_by_ls_gc_and_lookups(tmp_path, doc, capsys):
    st = Store.open(tmp_path)
    good, _ = st.get_or_create(st.key(IMAGE, "enroot", "fast"), lambda p: p.write_bytes(b"good"))
    bad = good.dir.parent / "junk"
    bad.mkdir()
    (bad / "image.sqsh").write_bytes(b"x")
    if doc == "BADVERSION":
        meta = json.loads((good.dir / "entry.json").read_text())
        doc = json.dumps({**meta, "version": "2x"})
    (bad / "entry.json").write_text(doc)
    notices._said.clear()
    assert [e.path for e in st.entries()] == [good.path]
    assert [e.path for e in find(st, IMAGE, "enroot")] == [good.path]
    res = CliRunner().invoke(main, ["store", "--store", str(tmp_path), "ls", "--json"])
    assert res.exit_code == 0 and res.exception is None, res.output
    assert [e["path"] for e in json.loads(res.stdout)] == [str(good.path)]
    gc = CliRunner().invoke(main, ["store", "--store", str(tmp_path), "gc", "--max-size", "1G"])
    assert gc.exit_code == 0 and gc.exception is None, gc.output
    said = capsys.readouterr().err
    assert f"skipping store entry {bad}: entry.json" in said


# --- F15: a full disk when taking the lock ------------------------------------------------------------------

def test_f15_full_disk_at_lock_time_is_exit_8_and_leaves_no_lock(small_fs):
    root = small_fs("1m") / "store"
    st = Store.open(root)
    filler = root.parent / "filler"
    with open(filler, "wb", buffering=0) as fh:       # fill the file system to the last block
        try:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
        except OSError:
            pass
    key = st.key(IMAGE, "enroot", "fast")
    with pytest.raises(NoSpaceError) as err:
        st.get_or_create(key, lambda p: p.write_bytes(b"x"))
    assert err.value.exit_code == 8
    assert [p.name for p in (root / "locks").iterdir()] == [], "no lock, not even an empty one"
    filler.unlink()
    calls = []
    st.poll = st.poll_max = 0.05
    entry, made = st.get_or_create(key, lambda p: calls.append(p) or p.write_bytes(b"x"))
    assert made and calls, "converted at once: nothing stalls the key"


def test_f15_an_empty_lock_is_swept_after_seconds_not_minutes(tmp_path):
    """An empty lock (an older imagekit killed between create and write) names no owner: it counts as
    stale after EMPTY_STALE seconds, not the 2 minutes a silent lock of another host gets."""
    st = Store.open(tmp_path)
    key = st.key(IMAGE, "enroot", "fast")
    lock = tmp_path / "locks" / f"{key.slug}.lock"
    lock.write_text("")
    assert st.sweep() == [] and lock.exists(), "a fresh empty lock may be mid-write: kept"
    old = time.time() - 2 * locks.EMPTY_STALE
    os.utime(lock, (old, old))
    assert locks.EMPTY_STALE < st.lock_stale
    assert st.sweep() == [lock] and not lock.exists()


# --- F16: outputs honour the umask --------------------------------------------------------------------------

def test_f16_store_entries_and_direct_outputs_honour_umask_077(tmp_path):
    from imagekit.util import atomic

    old = os.umask(0o077)
    try:
        st = Store.open(tmp_path / "s")
        entry, _ = st.get_or_create(st.key(IMAGE, "enroot", "fast"), lambda p: p.write_bytes(b"private"))
        sif, _ = st.get_or_create(st.key(IMAGE, "sif", "gzip"),
                                  lambda p: (p.write_bytes(b"SIF"), p.chmod(0o755)))   # ./x.sif runs it
        out = tmp_path / "direct.sqsh"
        with atomic.target(out, mode=0o644) as part:
            part.write_bytes(b"private")
    finally:
        os.umask(old)
    assert entry.path.stat().st_mode & 0o777 == 0o400 and sif.path.stat().st_mode & 0o777 == 0o500
    assert entry.dir.stat().st_mode & 0o777 == 0o700 and (tmp_path / "s").stat().st_mode & 0o777 == 0o700
    assert out.stat().st_mode & 0o777 == 0o600


@pytest.mark.engine
def test_f16_a_real_export_under_umask_077_is_private(odd_image, tmp_path):
    for extra in ([], ["--no-store"]):
        out = tmp_path / f"x{len(extra)}.sqsh"
        proc = subprocess.run(["sh", "-c", 'umask 077; exec "$@"', "sh", sys.executable, "-m", "imagekit", "export",
                               odd_image, "--to", "enroot", "-o", str(out), "-q", *extra],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert out.stat().st_mode & 0o077 == 0, (extra, oct(out.stat().st_mode))


def test_an_unverifiable_entry_in_the_way_is_replaced_by_a_publisher(tmp_path):
    """A damaged entry (bytes changed) does not block the key forever: the next conversion replaces it."""
    st = Store.open(tmp_path)
    key = st.key(IMAGE, "enroot", "fast")
    entry, _ = st.get_or_create(key, lambda p: p.write_bytes(b"good"))
    os.chmod(entry.path, 0o644)
    entry.path.write_bytes(b"evil")
    again, made = st.get_or_create(key, lambda p: p.write_bytes(b"fresh"))
    assert made and again.path.read_bytes() == b"fresh"
    assert hashlib.sha256(b"fresh").hexdigest() == again.sha256


def test_trust_of_a_store_names_the_writable_directory_above_it(tmp_path):
    above = tmp_path / "open"
    above.mkdir()
    os.chmod(above, 0o777)
    with pytest.raises(UntrustedStore, match=f"{above}, above the export store .* writable by everyone"):
        Store.open(above / "store")
    os.chmod(above, 0o1777)               # sticky, like /tmp: others cannot replace what is ours
    assert Store.open(above / "store").root == above / "store"
    with pytest.raises(UntrustedEntry, match="not inside the export store"):
        Store.open(above / "store").trust.check_entry(above / "elsewhere", [])
