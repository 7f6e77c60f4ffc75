"""Waiting for another process's conversion costs nothing extra (perf-3 P3-1, P3-3).

- The waiters are woken by the converter's doorbell (``locks/<key>.wake``, a flock it holds while it
  converts), not by looking again every 0.2-2 s: a waiter looks the entry up a fixed number of times
  however long the conversion takes.
- They read none of the new file: the converter hashed the bytes it wrote and sealed them in
  entry.json (inode, size, mtime); an unchanged sealed file is served unread.
- A doorbell never blocks a converter, and one left behind by a killed converter is swept.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from imagekit.export.store import Store, wake

IMAGE = "sha256:" + "ef" * 32
WORKER = Path(__file__).resolve().parents[1] / "helpers" / "store_worker.py"


def test_waiters_are_woken_by_the_doorbell_and_hash_nothing(tmp_path):
    """Six processes (caches of their own, as on six nodes) ask for one key; the conversion takes
    about 2 s. One converts (and hashes what it wrote, once); the five others each look the entry up
    at most 4 times (polling from 0.2 s up would take 7) and hash nothing."""
    root, go, counter = tmp_path / "s", tmp_path / "go", tmp_path / "conversions"
    Store.open(root)
    # Each its own cache, as on different nodes: no process can lean on another's stamps.
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(root), IMAGE, str(go), str(counter), str(64 << 20)],
                              env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / f"cache-{i}")},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(6)]
    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    (converter,) = [r for r in results if r["created"]]
    waiters = [r for r in results if not r["created"]]
    assert len(counter.read_text().splitlines()) == 1
    assert converter["hashed"] == 0, "the converter's own hash is not a verification"
    assert [w["hashed"] for w in waiters] == [0] * 5, waiters
    assert all(w["lookups"] <= 4 for w in waiters), [w["lookups"] for w in waiters]
    assert {r["sha256"] for r in results} == {converter["recorded"]}
    assert list((root / "locks").iterdir()) == [], "no lock and no doorbell left"


def test_a_waiter_blocks_on_the_doorbell_until_the_converter_lets_go(tmp_path):
    lock = tmp_path / "k.lock"
    rang = threading.Event()
    with wake.ringing(lock, 0o644):
        waiter = wake.Waiter(lock)
        thread = threading.Thread(target=lambda: (waiter.wait(60, 60), rang.set()))
        thread.start()
        assert not rang.wait(0.5), "woken while the converter still converts"
        assert wake.path_for(lock).exists()
    thread.join(timeout=10)
    assert rang.is_set() and waiter.rang and not wake.path_for(lock).exists()


def test_a_doorbell_someone_else_holds_never_blocks_the_converter(tmp_path):
    """A converter whose lock was broken as stale may live on and hold its doorbell: the next converter
    goes on without one (its waiters poll) instead of waiting for it."""
    lock = tmp_path / "k.lock"
    bell = wake.path_for(lock)
    other = os.open(bell, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(other, fcntl.LOCK_EX)
    try:
        done = threading.Event()
        thread = threading.Thread(target=lambda: (wake.ringing(lock, 0o644).__enter__(), done.set()))
        thread.start()
        assert done.wait(10), "the converter waited for another's doorbell"
        assert bell.exists(), "not ours: left in place"
    finally:
        os.close(other)


def test_no_doorbell_means_the_old_polling(tmp_path):
    lock = tmp_path / "k.lock"
    waiter = wake.Waiter(lock)
    started = time.monotonic()
    waiter.wait(30, 0.3)
    assert waiter.done.is_set() and not waiter.rang and time.monotonic() - started >= 0.3


def test_a_doorbell_left_by_a_killed_converter_is_swept(tmp_path):
    st = Store.open(tmp_path / "s")
    bell = tmp_path / "s" / "locks" / "x.wake"
    bell.write_text("")
    assert bell not in st.sweep(), "too young"
    old = time.time() - st.tmp_stale - 60
    os.utime(bell, (old, old))
    (tmp_path / "s" / "locks" / "y.lock").write_text("host+1+1\n")
    kept = tmp_path / "s" / "locks" / "y.wake"
    kept.write_text("")
    os.utime(kept, (old, old))
    assert bell in st.sweep() and not bell.exists()
    assert kept.exists(), "its conversion lock is still there"
