"""The export store: keyed entries, one conversion across processes, atomic publication,
sweeping after kill -9, LRU eviction that spares held entries, full disks."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from imagekit.util import leases
from imagekit.util.errors import ImagekitError, IntegrityError, NoSpaceError, UsageError
from imagekit.export import formats
from imagekit.export.store import EntryGone, Store, find, link_or_copy
from helpers.polling import wait_for

IMAGE = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
WORKER = Path(__file__).resolve().parents[1] / "helpers" / "store_worker.py"


def writer(data: bytes = b"squashfs bytes", calls: list | None = None):
    def make(path: Path) -> None:
        if calls is not None:
            calls.append(path)
        path.write_bytes(data)
    return make


def refuse(path: Path) -> None:
    raise AssertionError("converted although the entry exists")


def dead_token() -> str:
    """The owner token of a process that has exited (this PID namespace of this host)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return f"{leases.where()}+{proc.pid}+1"


def foreign_token() -> str:
    return "some-other-node+4242+99"


# --- keys, layout, lookups ------------------------------------------------------------------------

def test_entry_layout_is_a_directory_per_image_and_format(tmp_path):
    st = Store.open(tmp_path / "s")
    key = st.key(IMAGE, "enroot", "shared-fs", ("squash-opt=-b", "squash-opt=1M"))
    entry, created = st.get_or_create(key, writer())
    assert created and entry.path.read_bytes() == b"squashfs bytes"
    assert entry.path.parent.parent == tmp_path / "s/entries/sha256" / ("ab" * 32) / "enroot"
    assert entry.path.name == "image.sqsh" and entry.version == formats.get("enroot").store_version
    assert entry.sha256 == hashlib.sha256(b"squashfs bytes").hexdigest() and entry.bytes == 14
    assert (entry.image_id, entry.format, entry.preset) == (IMAGE, "enroot", "shared-fs")
    assert entry.options == ("squash-opt=-b", "squash-opt=1M")
    assert not os.stat(entry.path).st_mode & 0o222, "entries are read-only (outputs are links to them)"
    again, created = st.get_or_create(key, refuse)
    assert not created and again.path == entry.path
    # what a reader on a node without Docker does: the manifest's config.digest and a listing
    assert [e.path for e in find(Store.open(tmp_path / "s"), "ab" * 32, "enroot")] == [entry.path]
    assert find(st, IMAGE, "sif") == [] and find(st, OTHER, "enroot") == []
    assert sorted(p.name for p in (tmp_path / "s/tmp").iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "s/locks").glob("*.lock")) == []


def test_every_part_of_the_key_makes_its_own_entry(tmp_path, monkeypatch):
    st = Store.open(tmp_path)
    keys = [st.key(IMAGE, "enroot", "enroot"), st.key(IMAGE, "enroot", "shared-fs"),
            st.key(IMAGE, "enroot", "enroot", ("epoch=1",)), st.key(IMAGE, "sif", "enroot"),
            st.key(OTHER, "enroot", "enroot")]
    newer = dataclasses.replace(formats.get("enroot"), store_version=99)    # a newer imagekit's format
    monkeypatch.setitem(formats.FORMATS, "enroot", newer)
    keys.append(st.key(IMAGE, "enroot", "enroot"))
    paths = {st.get_or_create(k, writer(repr(k).encode()))[0].path for k in keys}
    assert len(paths) == len(keys)
    assert [e.version for e in find(st, IMAGE, "enroot")] == [99]
    assert len(find(st, IMAGE, "enroot", any_version=True)) == 4


def test_find_lists_newest_use_first_and_lookup_marks_use(tmp_path):
    st = Store.open(tmp_path)
    a = st.get_or_create(st.key(IMAGE, "enroot", "a"), writer(b"a"))[0]
    b = st.get_or_create(st.key(IMAGE, "enroot", "b"), writer(b"b"))[0]
    os.utime(a.dir, (1000, 1000))
    os.utime(b.dir, (2000, 2000))
    assert [e.preset for e in find(st, IMAGE, "enroot")] == ["b", "a"]
    assert st.lookup(st.key(IMAGE, "enroot", "a")) is not None
    assert [e.preset for e in find(st, IMAGE, "enroot")] == ["a", "b"]


@pytest.mark.parametrize("image_id, fmt, preset, match", [
    ("latest", "enroot", "enroot", "not an image ID"),
    ("sha256:" + "ab" * 31, "enroot", "enroot", "not an image ID"),
    (IMAGE, "tar", "enroot", "unknown export format"),
    (IMAGE, "enroot", "../x", "bad preset name"),
    (IMAGE, "enroot", "", "bad preset name"),
])
def test_bad_keys_are_refused(tmp_path, image_id, fmt, preset, match):
    with pytest.raises(UsageError, match=match):
        Store.open(tmp_path).key(image_id, fmt, preset)


def test_store_root_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(UsageError, match="not a directory"):
        Store.open(tmp_path / "f")


def test_default_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEKIT_STORE", str(tmp_path / "env"))
    assert Store.open().root == tmp_path / "env"
    monkeypatch.delenv("IMAGEKIT_STORE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert Store.open().root == tmp_path / "xdg/imagekit/store"


# --- publication and concurrency --------------------------------------------------------------------

def test_concurrent_processes_convert_once_and_all_get_the_complete_file(tmp_path):
    """Six real processes ask for one key at the same moment: one make, six identical files."""
    root, go, counter = tmp_path / "s", tmp_path / "go", tmp_path / "conversions"
    size = 4 << 20
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(root), IMAGE, str(go), str(counter), str(size)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(6)]
    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    assert len(counter.read_text().splitlines()) == 1, "converted more than once"
    assert sum(r["created"] for r in results) == 1
    assert len({r["path"] for r in results}) == 1
    assert {(r["bytes"], r["sha256"], r["recorded"]) for r in results} == \
        {(size, results[0]["recorded"], results[0]["recorded"])}
    assert list((root / "tmp").iterdir()) == [] and list((root / "locks").glob("*.lock")) == []


def test_kill9_of_a_converter_leaves_no_entry_and_the_next_run_sweeps(tmp_path):
    root, go, counter = tmp_path / "s", tmp_path / "go", tmp_path / "conversions"
    go.touch()
    proc = subprocess.Popen([sys.executable, str(WORKER), str(root), IMAGE, str(go), str(counter),
                             str(4 << 20), "hang"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: any(p.stat().st_size > (1 << 20) for p in (root / "tmp").glob("*/*")),
             "the converter writing")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    st = Store.open(root)
    key = st.key(IMAGE, "enroot", "test")
    assert st.lookup(key) is None and find(st, IMAGE, "enroot") == []
    assert len(list((root / "tmp").iterdir())) == 1 and len(list((root / "locks").glob("*.lock"))) == 1
    entry, created = st.get_or_create(key, writer(b"whole"))   # the dead owner's lock is broken at once
    assert created and entry.path.read_bytes() == b"whole"
    assert list((root / "tmp").iterdir()) == [] and list((root / "locks").glob("*.lock")) == []


def test_a_live_foreign_lock_is_waited_for_then_broken_when_its_heartbeat_stops(tmp_path):
    st = Store.open(tmp_path)
    st.lock_stale, st.poll, st.poll_max = 3.0, 0.05, 0.1
    key = st.key(IMAGE, "enroot", "enroot")
    lock = tmp_path / "locks" / f"{key.slug}.lock"
    lock.write_text(foreign_token() + "\n")
    calls, messages, got = [], [], []
    waiter = threading.Thread(target=lambda: got.append(st.get_or_create(key, writer(calls=calls),
                                                                         progress=messages.append)))
    waiter.start()
    wait_for(lambda: messages, "the waiting notice")
    assert "some-other-node+4242+99" in messages[0]
    for _ in range(20):                      # the other node's heartbeat keeps the lock live
        os.utime(lock)
        assert calls == [] and waiter.is_alive()
        time.sleep(0.1)
    waiter.join(timeout=30)                  # heartbeat stopped: broken, converted here
    assert len(calls) == 1 and got[0][1] is True and not lock.exists()


def test_an_entry_published_by_another_node_ends_the_wait(tmp_path):
    st = Store.open(tmp_path / "s")
    st.poll = st.poll_max = 0.05
    key = st.key(IMAGE, "enroot", "enroot")
    (tmp_path / "s/locks" / f"{key.slug}.lock").write_text(foreign_token() + "\n")
    got, messages = [], []
    waiter = threading.Thread(target=lambda: got.append(st.get_or_create(key, refuse, progress=messages.append)))
    waiter.start()
    wait_for(lambda: messages, "the waiting notice")
    # The other node builds in its tmp/ and renames the finished directory into place.
    made, _ = Store.open(tmp_path / "s/tmp/other-node-build").get_or_create(key, writer(b"theirs"))
    final = st.entry_dir(key)
    final.parent.mkdir(parents=True)
    os.rename(made.dir, final)
    waiter.join(timeout=30)
    entry, created = got[0]
    assert not created and entry.path.read_bytes() == b"theirs"


def test_a_second_publisher_keeps_the_first_entry(tmp_path):
    """What happens when a lock was wrongly broken: both convert, the first rename wins, nothing mixes."""
    st = Store.open(tmp_path)
    key = st.key(IMAGE, "enroot", "enroot")
    lock = tmp_path / "locks/x.lock"
    first, created1 = st._create(key, writer(b"first"), lock, None)
    second, created2 = st._create(key, writer(b"second"), lock, None)
    assert (created1, created2) == (True, False)
    assert second.path == first.path and first.path.read_bytes() == b"first"
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_failed_make_leaves_nothing(tmp_path):
    st = Store.open(tmp_path)
    key = st.key(IMAGE, "sif", "gzip")

    def broken(path: Path) -> None:
        path.write_bytes(b"half")
        raise ImagekitError("sqfstar failed")

    with pytest.raises(ImagekitError, match="sqfstar failed"):
        st.get_or_create(key, broken)
    with pytest.raises(ImagekitError, match="wrote no file"):
        st.get_or_create(key, lambda path: None)
    assert st.lookup(key) is None and list((tmp_path / "tmp").iterdir()) == []
    assert list((tmp_path / "locks").glob("*.lock")) == []


def test_sweep_removes_only_dead_or_silent_owners_things(tmp_path):
    st = Store.open(tmp_path)
    st.tmp_stale = 60
    tmp = tmp_path / "tmp"
    dead = tmp / f"k@{dead_token()}@abc"
    live = tmp / f"k@{leases.me()}@abc"
    foreign_fresh = tmp / f"k@{foreign_token()}@abc"
    foreign_silent = tmp / f"k@{foreign_token()}@def"
    for d in (dead, live, foreign_fresh, foreign_silent):
        d.mkdir()
        (d / "image.sqsh").write_bytes(b"x")
    for p in (foreign_silent / "image.sqsh", foreign_silent):
        os.utime(p, (time.time() - 3600, time.time() - 3600))
    dead_lock = tmp_path / "locks/a.lock"
    dead_lock.write_text(dead_token())
    live_lock = tmp_path / "locks/b.lock"
    live_lock.write_text(leases.me())
    removed = set(st.sweep())
    assert removed == {dead, foreign_silent, dead_lock}
    assert live.exists() and foreign_fresh.exists() and live_lock.exists()


# --- holds, eviction ------------------------------------------------------------------------------

def _entries(st: Store, n: int, size: int = 1 << 20):
    out = []
    for i in range(n):
        entry, _ = st.get_or_create(st.key(IMAGE, "enroot", f"p{i}"), writer(bytes([i]) * size))
        out.append(entry)
    return out


def test_gc_evicts_least_recently_used_first_and_spares_held_entries(tmp_path):
    st = Store.open(tmp_path)
    e = _entries(st, 6)
    linked = tmp_path / "out.sqsh"
    os.link(e[0].path, linked)                           # an output made earlier
    st.hold(e[1])                                        # this live process
    st.hold(e[2], "slurm-77.0@node1")                    # a job step, fresh
    stale = st.hold(e[3], "slurm-12.0@node2")            # a job step that never released
    os.utime(stale, (time.time() - 30 * 86400,) * 2)
    st.hold(e[4], dead_token())                          # a process that died
    for i, entry in enumerate(e):                        # (a hold is a use: set the order again)
        os.utime(entry.dir, (1000 + i, 1000 + i))
    evicted = st.gc(max_size=3 << 20)
    assert [x.preset for x in evicted] == ["p0", "p3", "p4"]
    assert sorted(x.preset for x in st.entries()) == ["p1", "p2", "p5"]
    assert linked.read_bytes() == bytes([0]) * (1 << 20), "an output's data outlives the entry"
    assert list((tmp_path / "trash").iterdir()) == []
    assert [x.preset for x in st.gc(max_size=0)] == ["p5"]
    assert sorted(x.preset for x in st.entries()) == ["p1", "p2"], "held entries stay above the limit"


def test_hold_release_is_idempotent_and_a_gone_entry_says_so(tmp_path):
    st = Store.open(tmp_path)
    entry = _entries(st, 1)[0]
    hold = st.hold(entry.path, "job-1")
    assert st.held(entry) == ["job-1"] and hold.exists()
    st.release(entry.path, "job-1")
    st.release(entry.path, "job-1")
    assert st.held(entry) == [] and st.evict(entry)
    st.release(entry, "job-1")                            # after eviction too
    with pytest.raises(EntryGone, match="evicted"):
        st.hold(entry, "job-2")
    with pytest.raises(UsageError, match="bad hold name"):
        st.hold(entry, "../x")


def test_an_evicted_entry_is_converted_again(tmp_path):
    st = Store.open(tmp_path)
    key = st.key(IMAGE, "enroot", "enroot")
    entry, _ = st.get_or_create(key, writer(b"one"))
    assert st.evict(entry) and st.lookup(key) is None
    calls = []
    assert st.get_or_create(key, writer(b"two", calls))[0].path.read_bytes() == b"two" and calls


# --- pulled files, full disks, outputs -----------------------------------------------------------

def test_add_file_verifies_the_digest_and_keeps_nothing_on_mismatch(tmp_path):
    st = Store.open(tmp_path / "s")
    pulled = tmp_path / "pulled.sqsh"
    pulled.write_bytes(b"artifact")
    key = st.key(IMAGE, "enroot", "enroot")
    with pytest.raises(IntegrityError, match="expected sha256:00"):
        st.add_file(key, pulled, sha256="sha256:" + "00" * 32)
    assert st.lookup(key) is None and list((tmp_path / "s/tmp").iterdir()) == []
    entry = st.add_file(key, pulled, sha256="sha256:" + hashlib.sha256(b"artifact").hexdigest())
    assert entry.path.read_bytes() == b"artifact" and pulled.exists()
    assert not os.path.samefile(entry.path, pulled)
    assert st.add_file(key, pulled).path == entry.path


def test_full_disk_mid_write_raises_no_space_and_keeps_nothing(tmp_path, small_fs):
    """A real 8 MiB tmpfs under the store, filled by a make that writes 16 MiB."""
    st = Store.open(small_fs("8m") / "store")
    key = st.key(IMAGE, "enroot", "enroot")
    with pytest.raises(NoSpaceError, match="ran out of space") as err:
        st.get_or_create(key, writer(b"x" * (16 << 20)))
    assert err.value.exit_code == 8
    assert st.lookup(key) is None and list((st.root / "tmp").iterdir()) == []
    assert list((st.root / "locks").glob("*.lock")) == []
    # A tool's own message (sqfstar/tar2sqfs print strerror) counts as a full disk too.
    with pytest.raises(NoSpaceError):
        st.get_or_create(key, lambda p: (_ for _ in ()).throw(
            ImagekitError("sqfstar failed (exit 1): Write on destination failed because No space left on device")))
    big = tmp_path / "big"
    big.write_bytes(b"y" * (16 << 20))
    with pytest.raises(NoSpaceError, match="not enough free space"):
        st.add_file(key, big)
    assert list((st.root / "tmp").iterdir()) == [] and st.entries() == []


def test_outputs_are_links_on_the_same_file_system_and_copies_elsewhere(tmp_path, small_fs):
    st = Store.open(tmp_path / "s")
    entry, _ = st.get_or_create(st.key(IMAGE, "enroot", "enroot"), writer(b"z" * 1000))
    same = tmp_path / "a.sqsh"
    assert link_or_copy(entry, same) == "link" and os.path.samefile(same, entry.path)
    assert link_or_copy(entry, same) == "same"
    (tmp_path / "b.sqsh").write_text("someone's file")
    with pytest.raises(UsageError, match="already exists"):
        link_or_copy(entry, tmp_path / "b.sqsh")
    assert link_or_copy(entry, tmp_path / "b.sqsh", force=True) == "link"
    other = small_fs("4m") / "c.sqsh"
    assert link_or_copy(entry, other) == "copy"
    assert other.read_bytes() == b"z" * 1000 and os.stat(other).st_nlink == 1
    assert [p.name for p in other.parent.iterdir()] == ["c.sqsh"]
    with pytest.raises(NoSpaceError):
        link_or_copy(st.get_or_create(st.key(IMAGE, "enroot", "big"), writer(b"b" * (8 << 20)))[0],
                     other.parent / "d.sqsh")
    assert [p.name for p in other.parent.iterdir()] == ["c.sqsh"]


# --- real exports through the store (Docker engine) ---------------------------------------------

@pytest.mark.engine
def test_reexport_of_an_unchanged_image_is_a_lookup(odd_image, tmp_path, monkeypatch):
    """The second export neither converts, nor talks to the docker package, nor hashes."""
    from imagekit.util import ledger
    from imagekit.engines import docker as engine
    from imagekit.export import ExportRequest, export_image, output, squash

    monkeypatch.setenv("IMAGEKIT_STATE", str(tmp_path / "state"))
    first = export_image(odd_image, ExportRequest("enroot"), tmp_path / "a.sqsh")
    assert not first.store_hit and first.output_is == "link"
    assert os.path.samefile(first.path, first.store_entry)
    assert output.sha256_file(Path(first.path)) == first.sha256

    def forbidden(*args, **kwargs):
        raise AssertionError("the hit path converted, hashed or loaded the docker package")

    monkeypatch.setattr(squash, "stream_to_squashfs", forbidden)
    monkeypatch.setattr(output, "sha256_file", forbidden)
    monkeypatch.setattr(engine, "client", forbidden)
    second = export_image(odd_image, ExportRequest("enroot"), tmp_path / "b.sqsh")
    assert second.store_hit and os.path.samefile(second.path, first.path)
    assert (second.sha256, second.bytes, second.tool) == (first.sha256, first.bytes, first.tool)
    assert json.loads(second.to_json())["store_hit"] is True
    # imagekit report still lists both outputs (the records are per output path)
    image_id = engine.image_id(odd_image)
    paths = {r["path"] for r in ledger.for_image(image_id) if r["kind"] == "export"}
    assert {str(tmp_path / "a.sqsh"), str(tmp_path / "b.sqsh")} <= paths


@pytest.mark.engine
def test_no_store_and_other_keys_convert(odd_image, tmp_path, monkeypatch):
    from imagekit.export import ExportRequest, export_image

    store = Store.open()
    plain = export_image(odd_image, ExportRequest("enroot"), tmp_path / "plain.sqsh", store=False)
    assert not plain.store_hit and plain.store_entry == "" and os.stat(plain.path).st_nlink == 1
    assert store.entries() == []
    stored = export_image(odd_image, ExportRequest("enroot"), tmp_path / "a.sqsh")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    dated = export_image(odd_image, ExportRequest("enroot"), tmp_path / "b.sqsh")
    assert not stored.store_hit and not dated.store_hit
    assert dated.store_entry != stored.store_entry
    assert sorted(e.options for e in store.entries()) == [(), ("epoch=1700000000",)]
    with pytest.raises(UsageError, match="already exists"):
        export_image(odd_image, ExportRequest("enroot"), tmp_path / "plain.sqsh")


@pytest.mark.engine
def test_concurrent_exports_of_one_image_convert_once(odd_image, tmp_path):
    """Four real `imagekit export` processes at once: one conversion, four links to one file."""
    procs = [subprocess.Popen([sys.executable, "-m", "imagekit", "export", odd_image, "--to", "enroot",
                               "-o", str(tmp_path / f"out{i}.sqsh"), "--json", "-q"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    docs = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        docs.append(json.loads(out))
    assert sorted(d["store_hit"] for d in docs) == [False, True, True, True]
    assert len({d["store_entry"] for d in docs}) == 1 and len({d["sha256"] for d in docs}) == 1
    assert len({os.stat(d["path"]).st_ino for d in docs}) == 1
    listing = subprocess.run(["unsquashfs", "-l", docs[0]["path"]], capture_output=True, text=True, check=True)
    assert "squashfs-root/etc/rc" in listing.stdout


@pytest.mark.engine
def test_kill9_of_a_real_export_leaves_no_entry_and_the_next_export_sweeps(base_image, tmp_path):
    store = Store.open()
    proc = subprocess.Popen([sys.executable, "-m", "imagekit", "export", base_image, "--to", "enroot",
                             "--preset", "none", "-o", str(tmp_path / "x.sqsh"), "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    wait_for(lambda: any(p.is_file() and p.stat().st_size > (1 << 20)
                         for p in (store.root / "tmp").glob("*/*")) or proc.poll() is not None,
             "the export writing into the store", seconds=120)
    assert proc.poll() is None, proc.stderr.read()
    os.killpg(proc.pid, signal.SIGKILL)       # imagekit and its pipeline, as a killed job step
    proc.wait(timeout=30)
    assert store.entries() == [] and not (tmp_path / "x.sqsh").exists()
    assert list((store.root / "tmp").iterdir()) and list((store.root / "locks").glob("*.lock"))
    from imagekit.export import ExportRequest, export_image

    result = export_image(base_image, ExportRequest("enroot", preset="none"), tmp_path / "x.sqsh")
    assert not result.store_hit and os.path.getsize(result.path) == result.bytes
    assert list((store.root / "tmp").iterdir()) == [] and list((store.root / "locks").glob("*.lock")) == []
    assert [p.name for p in tmp_path.iterdir()] == ["x.sqsh"]


@pytest.mark.engine
def test_full_disk_under_the_store_is_no_space_and_leaves_nothing(base_image, tmp_path, small_fs):
    """A real 24 MiB tmpfs holds the store: refused up front, and (space check off) mid-way."""
    from click.testing import CliRunner

    from imagekit.cli import main
    from imagekit.export import ExportRequest, export_image

    root = small_fs("24m") / "store"
    with pytest.raises(NoSpaceError, match="not enough free space"):
        export_image(base_image, ExportRequest("enroot", preset="none"), tmp_path / "x.sqsh", store=root)
    with pytest.raises(NoSpaceError, match="ran out of space"):
        export_image(base_image, ExportRequest("enroot", preset="none", check_space=False), tmp_path / "x.sqsh",
                     store=root)
    res = CliRunner().invoke(main, ["export", base_image, "--to", "sif", "--store", str(root),
                                    "--no-space-check", "-o", str(tmp_path / "x.sif"), "-q"])
    assert res.exit_code == 8, res.output
    assert "ran out of space" in res.output
    st = Store.open(root)
    assert st.entries() == [] and list((root / "tmp").iterdir()) == []
    assert list((root / "locks").glob("*.lock")) == [] and list(tmp_path.glob("x.*")) == []
