"""What root does in an export store never follows what another user planted (issue 33, G1;
../shared/reviews/security-3.md).

`store init --shared` used to chgrp and chmod whatever a planted symbolic link at ``entries``,
``tmp``, ``holds``… pointed to (``/etc`` would have become world-writable). The fix is for the
class: everything below the store's root is opened one name at a time with O_NOFOLLOW and
changed through descriptors (imagekit.export.store.nofollow). The property test plants a link,
as a real other user, at every name root creates, renames, touches or removes in a store, and
runs every store operation as root: the link's target never changes.

Other users are real processes: numeric uids under ``setpriv`` (tests/helpers/users.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.users import ALICE, BOB, TEAM, setpriv

from imagekit.attest import keys
from imagekit.attest.sbom import ImageRecord
from imagekit.util import leases
from imagekit.cli import main
from imagekit.export import signing
from imagekit.export.output import ExportResult
from imagekit.util.errors import ImagekitError
from imagekit.export.store import Store
from imagekit.export.store.setup import init_store

IMAGE = "sha256:" + "6c" * 32
OTHER = "sha256:" + "bb" * 32
DEAD = "otherhost.ns1.b1+999999+1"      # another host's owner token: judged by age, never alive here


def as_user(uid: int, script: str, *args: str, groups: tuple[int, ...] = ()) -> None:
    """``sh -c script`` as ``uid`` (a real unprivileged process); it must succeed."""
    proc = subprocess.run(setpriv(uid, ["sh", "-c", script, "sh", *args], groups=groups),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def snapshot(top: Path) -> dict[str, tuple]:
    """Every name below ``top`` (and ``top``) with its type, owner, mode, size and mtime."""
    out = {}
    for path in [top, *sorted(top.rglob("*"))]:
        st_ = os.lstat(path)
        out[str(path.relative_to(top))] = (stat.S_IFMT(st_.st_mode), st_.st_uid, st_.st_gid,
                                           stat.S_IMODE(st_.st_mode), st_.st_size, st_.st_mtime_ns)
    return out


def victim_dir(base: Path, name: str = "victim") -> Path:
    """A directory only root may enter (stands in for /etc)."""
    victim = base / name
    victim.mkdir(mode=0o700)
    (victim / "secret").write_text("root's\n")
    return victim


def legacy_store(base: Path) -> Path:
    """The layout the old README advised: root's, group-writable by every job user, setgid."""
    old = base / "oldstore"
    old.mkdir()
    os.chown(old, 0, TEAM)
    os.chmod(old, 0o2775)
    return old


# --- G1: store init --------------------------------------------------------------------------------------

@pytest.mark.parametrize("names", [("holds", "entries"), ("used",), ("tmp",)])
def test_g1_init_over_planted_links_changes_nothing_outside_the_store(shared_dir, names):
    """Alice (a job user of the old group-writable store) plants links at the store's subdirectories;
    root's `store init --shared` refuses, naming the link, and the target keeps its owner and mode:
    Alice still cannot write there."""
    victim = victim_dir(shared_dir)
    old = legacy_store(shared_dir)
    for name in names:
        as_user(ALICE, 'ln -s "$1" "$2"', str(victim), str(old / name), groups=(TEAM,))
    before = snapshot(victim)
    res = CliRunner().invoke(main, ["store", "--store", str(old), "init", "--shared", "--group", str(TEAM)])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "symbolic link" in res.output and any(str(old / n) in res.output for n in names), res.output
    assert snapshot(victim) == before
    probe = subprocess.run(setpriv(ALICE, ["touch", str(victim / "planted")], groups=(TEAM,)),
                           capture_output=True, text=True)
    assert probe.returncode != 0 and not (victim / "planted").exists()


def test_g1_init_moves_aside_a_subdirectory_another_user_owns(shared_dir, capsys):
    """A real directory Alice made at `tmp` (she could write the old store) is renamed aside with a
    warning, never adopted: the store's own tmp/ is root's and sticky, and nothing Alice put there is used."""
    old = legacy_store(shared_dir)
    as_user(ALICE, 'mkdir "$1" && echo hers > "$1/x@host.ns1.b1+1+1@y"', str(old / "tmp"), groups=(TEAM,))
    root = init_store(old, str(TEAM))
    err = capsys.readouterr().err
    assert "moved aside" in err and str(old / "tmp") in err, err
    tmp = os.lstat(root / "tmp")
    assert (tmp.st_uid, tmp.st_gid, stat.S_IMODE(tmp.st_mode)) == (0, TEAM, 0o3775)
    aside = [p for p in root.iterdir() if p.name.startswith("tmp.untrusted-")]
    assert len(aside) == 1 and aside[0].stat().st_uid == ALICE
    assert os.listdir(root / "tmp") == []
    assert stat.S_IMODE(os.lstat(root).st_mode) == 0o755, "the root is no longer group-writable"


@pytest.mark.parametrize("command", [["init", "--shared", "--group", str(TEAM)], ["gc", "--max-size", "0"],
                                     ["ls"]])
@pytest.mark.parametrize("where", ["the store path", "a directory above it"])
def test_h3_a_link_another_user_made_at_the_store_path_is_never_followed(shared_dir, command, where):
    """H3 (a G1 variant): Alice makes the store's path, or a directory on it, a link to a directory only
    root may enter (standing in for /root or /etc/munge). Root's init, gc and ls refuse it in one line
    naming the link; the target keeps its owner, mode and contents. (Before: init gave it to the group,
    0755, and made holds/ and used/ 1777 inside.)"""
    victim = victim_dir(shared_dir)
    sticky = shared_dir / "sticky"
    sticky.mkdir(mode=0o1777)
    os.chmod(sticky, 0o1777)
    if where == "the store path":
        as_user(ALICE, 'ln -s "$1" "$2"', str(victim), str(sticky / "store"))
        store = sticky / "store"
    else:
        as_user(ALICE, 'mkdir -m 755 "$1"', str(sticky / "evilparent"))
        res = CliRunner().invoke(main, ["store", "--store", str(sticky / "evilparent" / "store"), *command])
        assert res.exit_code != 0 and "belongs to 2001, who is not a publisher" in res.output, res.output
        as_user(ALICE, '{ ! [ -e "$1/store" ] || mv "$1/store" "$1/old"; } && ln -s "$2" "$1/store"',
                str(sticky / "evilparent"), str(shared_dir))
        victim = shared_dir
        store = sticky / "evilparent" / "store" / "victim"
    before = snapshot(victim)
    res = CliRunner().invoke(main, ["store", "--store", str(store), *command])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "is a symbolic link" in res.output and "belongs to uid 2001" in res.output, res.output
    assert len(res.output.strip().splitlines()) <= 2, res.output      # the error and its fix
    assert snapshot(victim) == before


def test_h3_links_root_made_where_only_root_writes_are_followed(shared_dir):
    """A site's own link (``/scratch -> /lustre/scratch``: root's, in a directory only root writes) is fine."""
    real = shared_dir / "real"
    real.mkdir()
    (shared_dir / "link").symlink_to(real)
    assert init_store(shared_dir / "link" / "store", str(TEAM)) == real / "store"
    assert Store.open(shared_dir / "link" / "store").root == real / "store"


def test_g1_root_publishes_only_where_nobody_else_can_redirect_a_tools_path(shared_dir):
    """Export tools write their file by path, below the store's tmp/: root does not publish into a store
    another account owns (it could rename tmp/ while the tool writes); it is told why and how to fix it."""
    store = shared_dir / "ci-owned"
    init_store(store, str(TEAM))
    for path in (store, store / "tmp"):
        os.chown(path, ALICE, -1)
    st_ = Store.open(store)
    with pytest.raises(ImagekitError, match="root does not publish") as err:
        st_.get_or_create(st_.key(IMAGE, "enroot", "fast"), lambda p: p.write_bytes(b"x"))
    assert f"belongs to {ALICE}" in str(err.value) and not any((store / "entries").iterdir())


# --- the class: a planted link is never followed, whatever root does -------------------------------------

def _setup(base: Path) -> tuple[Path, Store, Path]:
    """A shared store (publishers: group TEAM) with one entry root published, in directories Alice owns
    (as if she had published that image first): the entry tree is sticky, so only there may she
    rename root's names (test_store_trust.py shows she cannot where root made the directories)."""
    root = init_store(base / "store", str(TEAM))
    store = Store.open(root)
    entry, _ = store.get_or_create(store.key(IMAGE, "enroot", "fast"), lambda p: p.write_bytes(b"root's image"))
    rel = entry.dir.relative_to(root / "entries").parts
    for depth in range(1, len(rel) + 1):
        os.chown(root / "entries" / Path(*rel[:depth]), ALICE, -1)
    return root, store, entry.dir


def _points(root: Path, entry: Path, slug: str) -> dict[str, tuple[Path, int]]:
    """Every name root makes, renames, touches or removes in a store, and who can plant there."""
    rel = entry.relative_to(root)
    return {
        "entries/sha256": (root / "entries" / "sha256", ALICE),
        "entries/sha256/IMAGE": (root / rel.parents[2], ALICE),
        "entries/sha256/IMAGE/enroot": (root / rel.parents[1], ALICE),
        "entry directory": (entry, ALICE),
        "entry file": (entry / "image.sqsh", ALICE),
        "entry.json": (entry / "entry.json", ALICE),
        "a lock": (root / "locks" / f"{slug}.lock", ALICE),
        "a lock's part": (root / "locks" / f".{slug}.lock.{DEAD}.abcd.part", ALICE),
        "a dead owner's temporary": (root / "tmp" / f"x@{DEAD}@y", ALICE),
        "a dead owner's trash": (root / "trash" / f"x@{DEAD}@y", ALICE),
        "root's hold": (root / "holds" / f"{slug}@0@job-1", BOB),
        "a lapsed hold": (root / "holds" / f"{slug}@{BOB}@old", BOB),
        "root's use mark": (root / "used" / f"{slug}@0", BOB),
        "a use mark of an evicted entry": (root / "used" / f"gone.enroot.x@{BOB}", BOB),
    }


def _plant(point: Path, uid: int, victims: Path) -> Path:
    """As ``uid``: move what is at ``point`` away (if anything) and put a link to a root-only copy of
    it there (a copy, so that an operation which follows the link finds what it looks for)."""
    victim = victims / "target"
    if os.path.lexists(point):
        if point.is_dir():
            shutil.copytree(point, victim, symlinks=True)
        else:
            shutil.copy2(point, victim)
    else:
        victim.mkdir()
        (victim / "secret").write_text("root's\n")
    as_user(uid, '{ ! [ -e "$1" ] || mv "$1" "$1.moved"; } && ln -s "$2" "$1"', str(point), str(victim),
            groups=(TEAM,) if uid == ALICE else ())
    return victim


def _sign_beside_the_entry(root: Path, store: Store) -> None:
    """What root's `export --store --sign` does after the inventories were read (seconds, during which a
    publisher may swap the entry's directory): the statements go beside the entry (H6)."""
    entry = store.entry_dir(store.key(IMAGE, "enroot", "fast"))
    out = root.parent / "out.sqsh"
    out.write_bytes(b"root's image")
    sha = hashlib.sha256(b"root's image").hexdigest()
    key = root.parent / "ci"
    if not key.with_suffix(".key").exists():
        keys.write_pair(keys.generate(), key)
    exported = ExportResult(path=str(out), format="enroot", image="x", bytes=12, sha256=sha, seconds=0.0,
                            store_hit=True, store_entry=str(entry / "image.sqsh"))
    described = signing.Described(ImageRecord("x", IMAGE, "linux/amd64"), b"{}", {})
    signing.sign_export(exported, keys.load_private(key.with_suffix(".key")), described)


OPERATIONS = {
    "init": lambda root, store: init_store(root, str(TEAM)),
    "open": lambda root, store: Store.open(root),
    "publish another preset": lambda root, store: store.get_or_create(
        store.key(IMAGE, "enroot", "shared-fs"), lambda p: p.write_bytes(b"another")),
    "publish another image": lambda root, store: store.get_or_create(
        store.key(OTHER, "enroot", "fast"), lambda p: p.write_bytes(b"other")),
    "lookup": lambda root, store: store.lookup(store.key(IMAGE, "enroot", "fast")),
    "hold and release": lambda root, store: [(store.hold(e, "job-1"), store.release(e, "job-1"))
                                             for e in store.entries()],
    "mark used": lambda root, store: store.holds.mark_used(store.slug(store.entries()[0])),
    "sweep": lambda root, store: store.sweep(),
    "gc": lambda root, store: store.gc(0),
    "ls": lambda root, store: store.entries(),
    "sign beside the entry": _sign_beside_the_entry,
}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(point=st.sampled_from(sorted(_points(Path("/r"), Path("/r/entries/sha256/h/enroot/e"), "s"))),
       operation=st.sampled_from(sorted(OPERATIONS)))
def test_a_link_another_user_plants_is_never_followed_by_root(shared_dir, point, operation):
    """For every name root creates, renames, touches or removes in a store, and every store operation
    root runs (writing the signatures beside an entry too: H6 of ../shared/reviews/security-4.md): a link
    another user planted at that name leaves its target exactly as it was (owner, mode, contents, times).
    Refusing (an ImagekitError) is fine; following is not."""
    base = Path(shared_dir) / f"case-{os.urandom(4).hex()}"
    base.mkdir()
    victims = base / "victims"
    victims.mkdir(mode=0o700)
    try:
        root, store, entry = _setup(base)
        path, uid = _points(root, entry, store.slug(entry))[point]
        _plant(path, uid, victims)
        before = snapshot(victims)
        store = Store.open(root, create=False)
        store.tmp_stale = store.lock_stale = 0.0        # every dead owner's leftovers are swept at once
        store.holds.max_age = 0.0
        try:
            OPERATIONS[operation](root, store)
        except (ImagekitError, OSError, IndexError):
            pass    # refused (or nothing left to act on): fine, as long as nothing was followed
        assert snapshot(victims) == before, f"{operation} followed a link planted at {point}"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("point", ["entries/sha256", "entries/sha256/IMAGE", "entries/sha256/IMAGE/enroot",
                                   "entry directory"])
def test_h6_root_never_writes_the_signatures_through_a_publishers_link(shared_dir, point):
    """H6: the publisher swaps the entry's directory (or one above it) for a link to a directory of
    theirs while root's `export --sign` reads the inventories: root writes nothing there (it refuses
    with a warning; the statements beside the output still travel)."""
    base = Path(shared_dir) / "h6"
    base.mkdir()
    victims = base / "victims"
    victims.mkdir(mode=0o700)
    root, store, entry = _setup(base)
    _plant(_points(root, entry, store.slug(entry))[point][0], ALICE, victims)
    before = snapshot(victims)
    _sign_beside_the_entry(root, Store.open(root, create=False))
    assert snapshot(victims) == before
    assert (root.parent / "out.sqsh.intoto.jsonl").is_file()


def test_the_dead_owner_token_is_not_alive_here():
    """The property test's leftovers must look like a dead (or long gone) owner's to be swept at all."""
    assert leases.local(DEAD) is False
