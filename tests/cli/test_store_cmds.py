"""`imagekit store ls|gc`: what a site's cron job and a person read."""

from __future__ import annotations

import json
import os

from click.testing import CliRunner

from imagekit.cli import main
from imagekit.export.store import Store

IMAGE = "sha256:" + "ef" * 32


def _fill(root, n: int, size: int = 1 << 20) -> Store:
    st = Store.open(root)
    for i in range(n):
        entry, _ = st.get_or_create(st.key(IMAGE, "enroot", f"p{i}"), lambda p, i=i: p.write_bytes(bytes([i]) * size))
        os.utime(entry.dir, (1000 + i, 1000 + i))
    return st


def test_ls_json_lists_entries_newest_use_first(tmp_path):
    st = _fill(tmp_path, 3)
    st.hold(st.entries()[0], "job-1")
    for i in range(3):
        os.utime(st.entry_dir(st.key(IMAGE, "enroot", f"p{i}")), (1000 + i, 1000 + i))
    res = CliRunner().invoke(main, ["store", "--store", str(tmp_path), "ls", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [e["preset"] for e in doc] == ["p2", "p1", "p0"]
    assert {e["image_id"] for e in doc} == {IMAGE} and all(e["bytes"] == 1 << 20 for e in doc)
    assert sum(bool(e["held"]) for e in doc) == 1
    text = CliRunner().invoke(main, ["store", "ls"], env={"IMAGEKIT_STORE": str(tmp_path)})
    assert text.exit_code == 0 and text.stdout.count("sha256:efefefefefef") == 3 and "(held)" in text.stdout


def test_gc_max_size_evicts_lru_and_reports(tmp_path):
    _fill(tmp_path, 4)
    res = CliRunner().invoke(main, ["store", "--store", str(tmp_path), "gc", "--max-size", "2M", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [e["preset"] for e in doc["evicted"]] == ["p0", "p1"]
    assert doc["freed"] == 2 << 20 and doc["total"] == 2 << 20 and doc["entries"] == 2
    text = CliRunner().invoke(main, ["store", "--store", str(tmp_path), "gc"])
    assert text.exit_code == 0 and "0 evicted" in text.stdout


def test_gc_bad_size_is_a_usage_error(tmp_path):
    res = CliRunner().invoke(main, ["store", "--store", str(tmp_path), "gc", "--max-size", "big"])
    assert res.exit_code == 2 and "bad size 'big'" in res.output and "50G" in res.output


def test_help_has_examples():
    for args in (["store", "--help"], ["store", "ls", "--help"], ["store", "gc", "--help"]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0 and "Examples:" in res.output and "imagekit store" in res.output


def test_store_verify_hashes_every_entry_and_finds_a_sealed_file_damaged_in_place(tmp_path):
    """A hit trusts the publisher's seal; `store verify` reads everything: bytes changed under an
    unchanged mtime (a disk's silent damage) are found, named, and the exit status says so."""
    st = Store.open(tmp_path / "s")
    good, _ = st.get_or_create(st.key(IMAGE, "enroot", "p1"), lambda p: p.write_bytes(b"a" * 8192))
    bad, _ = st.get_or_create(st.key(IMAGE, "enroot", "p2"), lambda p: p.write_bytes(b"b" * 8192))
    mtime = os.stat(bad.path).st_mtime_ns
    os.chmod(bad.path, 0o644)
    with open(bad.path, "r+b") as fh:
        fh.write(b"X")
    os.utime(bad.path, ns=(mtime, mtime))
    assert st.lookup(st.key(IMAGE, "enroot", "p2")) is not None, "a hit trusts the seal (no read)"
    res = CliRunner().invoke(main, ["store", "--store", str(tmp_path / "s"), "verify", "--json"])
    assert res.exit_code == 1, res.output
    found = {e["preset"]: e["problem"] for e in json.loads(res.stdout)}
    assert found["p1"] == "" and "publisher recorded" in found["p2"], found
