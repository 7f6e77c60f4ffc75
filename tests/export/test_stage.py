"""Node-local staged copies (imagekit.export.stage) on one node: prepare, verify, seal, evict, refuse.

The transfer itself (sbcast through slurmd's tree) and the faults across nodes run on the 8-node
cluster in test_many_nodes.py; here the part a node does alone, on real small file systems.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path

import pytest
from helpers.users import BOB

from imagekit.util.errors import IntegrityError, NoSpaceError
from imagekit.export import stage
from imagekit.util import private_names

DATA = os.urandom(256 << 10)
SHA = hashlib.sha256(DATA).hexdigest()


def send(base: Path, data: bytes = DATA, sha: str = SHA, job: str = "7") -> Path:
    """What sbcast leaves on a node: the part, as the job's user."""
    part = stage.user_dir(base, create=True) / f"{sha}{stage.PART}{job}"
    part.write_bytes(data)
    return part


def test_a_part_is_verified_once_renamed_and_sealed_then_served_unread(tmp_path, monkeypatch):
    assert stage.prepare(tmp_path, SHA, len(DATA), "7") == "need"
    part = send(tmp_path)
    hashed = []
    real = stage.digests.sha256_file
    monkeypatch.setattr(stage.digests, "sha256_file", lambda p, **kw: hashed.append(p) or real(p, **kw))
    copy = stage.local_copy(tmp_path, SHA, "7")
    assert copy == part.with_name(f"{SHA}.sqsh") and copy.read_bytes() == DATA and not part.exists()
    assert json.loads(copy.with_suffix(".seal").read_text())["ino"] == os.stat(copy).st_ino
    assert len(hashed) == 1
    assert stage.local_copy(tmp_path, SHA, "8") == copy and len(hashed) == 1, "a sealed copy is not read again"
    assert stage.prepare(tmp_path, SHA, len(DATA), "9") == "have", "nothing to send"


def test_a_copy_that_changed_is_hashed_and_if_its_bytes_differ_removed_and_never_served(tmp_path):
    send(tmp_path)
    copy = stage.local_copy(tmp_path, SHA, "7")
    with open(copy, "r+b") as fh:            # the bytes change on the node's disk (its mtime moves)
        fh.seek(1000)
        fh.write(b"\0" * 10)
    assert stage.prepare(tmp_path, SHA, len(DATA), "8") == "need", "a seal that no longer matches"
    with pytest.raises(IntegrityError, match=rf"{stage.host()}: the staged copy .* has sha256:.*not served"):
        stage.local_copy(tmp_path, SHA, "8")
    assert not copy.exists() and not copy.with_suffix(".seal").exists()
    with pytest.raises(stage.StageError, match="no staged copy"):
        stage.local_copy(tmp_path, SHA, "8")


def test_a_changed_copy_with_its_bytes_intact_is_served_after_one_hash(tmp_path):
    send(tmp_path)
    copy = stage.local_copy(tmp_path, SHA, "7")
    os.utime(copy, (time.time() + 5, time.time() + 5))
    assert stage.local_copy(tmp_path, SHA, "8") == copy
    assert json.loads(copy.with_suffix(".seal").read_text())["mtime_ns"] == os.stat(copy).st_mtime_ns


def test_a_part_cut_short_is_refused(tmp_path):
    send(tmp_path, DATA[: len(DATA) // 2])
    with pytest.raises(IntegrityError, match="removed, not served"):
        stage.local_copy(tmp_path, SHA, "7")
    assert list(stage.user_dir(tmp_path, create=False).glob("*.sqsh")) == []


def test_a_full_local_disk_is_refused_naming_the_node_and_old_copies_go_first(small_fs):
    base = small_fs("4m")
    old = os.urandom(1 << 20)
    old_sha = hashlib.sha256(old).hexdigest()
    send(base, old, old_sha, "1")
    stage.local_copy(base, old_sha, "1")
    assert stage.prepare(base, SHA, 2 << 20, "2") == "need"      # room made: the older copy evicted
    assert not (stage.user_dir(base, create=False) / f"{old_sha}.sqsh").exists()
    with pytest.raises(NoSpaceError, match=rf"{stage.host()}: not enough space in .*: {8 << 20} bytes needed"):
        stage.prepare(base, SHA, 8 << 20, "3")


def test_parts_of_dead_transfers_are_swept_but_not_this_jobs(tmp_path):
    mine, old = send(tmp_path, job="5"), send(tmp_path, job="4")
    os.utime(old, (time.time() - 2 * stage.PART_STALE,) * 2)
    stage.prepare(tmp_path, SHA, len(DATA), "5")
    assert mine.exists() and not old.exists()


@pytest.mark.parametrize("bad", ["link", "mode", "file", "another user's"])
def test_h8_a_stage_name_someone_else_took_is_passed_over_for_one_nobody_can_guess(tmp_path, bad, monkeypatch):
    """Security-4 H8: another user made ``imagekit-stage-UID`` first (a 0777 directory of theirs, a link,
    a file): the user cannot remove it from a sticky directory, so the stage step passes it over for
    ``…-UID-TOKEN`` (the token in the user's home), leaves it as it is, and the copy is served from
    there. Without a home to keep a token in, one line says whose names they are and what to do."""
    target = tmp_path / f"imagekit-stage-{os.geteuid()}"
    if bad == "link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        target.symlink_to(tmp_path / "elsewhere")
    elif bad == "mode":
        target.mkdir(mode=0o700)
        os.chmod(target, 0o777)
    elif bad == "file":
        target.write_text("x")
    else:
        target.mkdir(mode=0o777)
        os.chown(target, BOB, BOB)
    before = os.lstat(target)
    monkeypatch.delenv("HOME")
    with pytest.raises(stage.StageError, match="(?s)no stage directory of uid .* closed to others: .*an admin removes"):
        stage.prepare(tmp_path, SHA, 10, "1")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    assert stage.prepare(tmp_path, SHA, 10, "1") == "need"
    (chosen,) = [p for p in tmp_path.iterdir() if p.name.startswith(f"{target.name}-")]
    assert chosen.name == f"{target.name}-{private_names.token()}" and stat.S_IMODE(chosen.stat().st_mode) == 0o700
    assert stage.user_dir(tmp_path, create=False) == chosen
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode, after.st_uid) == (before.st_ino, before.st_mode, before.st_uid)


def test_shas_are_checked(tmp_path):
    with pytest.raises(Exception, match="is not a sha256"):
        stage.local_copy(tmp_path, "../../etc/passwd", "1")


def test_the_failing_nodes_line_survives_the_terminated_lines_that_follow_it(tmp_path, monkeypatch):
    """With --kill-on-bad-exit, Slurm prints a "Terminated" line per node it cut off after the one that
    failed; the error must still name the failing node. srun here replays what Slurm 22.05 printed on
    the test cluster when ikmn3's disk was full (the real cluster case is in test_many_nodes.py)."""
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\ncat >&2 <<'OUT'\n"
                    "imagekit-pyxis-importer on ikmn3: error: ikmn3: not enough space in /x for the staged image\n"
                    "slurmstepd-ikmn1: error: *** STEP 364.0 ON ikmn1 CANCELLED AT 2026-11-28T02:28:59 ***\n"
                    + "".join(f"srun: error: ikmn{n}: task {n - 1}: Terminated\n" for n in (2, 7, 6, 1))
                    + "srun: Force Terminated StepId=364.0\nOUT\nexit 1\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(stage.StageError) as err:
        stage.broadcast(tmp_path / "x", "a" * 64, 1, stage.StageJob("1", 8, tmp_path, "true"))
    assert "on ikmn3: error: ikmn3: not enough space in /x" in str(err.value)
    assert "Force Terminated" in str(err.value)
