"""A recorded policy verdict spares a repeat hit's check only while everything it was made from holds:
the same question, the policy's and every key file's bytes, each file still trusted, the time before the
first signer's expiry, and a record in the user's own private directory. Each test changes one of them
and shows the hit goes back to the full check (recall says None). The importer end to end, with a real
registry and the real keys: tests/export/test_pyxis_policy.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from imagekit.attest import keys, policy as policy_mod
from imagekit.export import pyxis_verdicts as verdicts


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A policy with one key, parsed as the full check parses it, and a question about one entry."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    site = tmp_path / "site"
    site.mkdir()
    keys.write_pair(keys.generate(), site / "ci")
    keys.write_pair(keys.generate(), site / "rogue")
    path = site / "policy.yaml"
    path.write_text("version: 1\nkeys: {ci: {path: ci.pub}}\nrepositories: [{match: \"*/hpc/*\", signers: [ci]}]\n")
    parsed = policy_mod.load(path)
    question = verdicts.Question(str(path), "registry.example.org/hpc/mpi", "sha256:" + "a" * 64,
                                 "sha256:" + "b" * 64, "c" * 64, False)
    verdict = verdicts.Verdict(True, ["ci (SHA256:x)"], 5)

    class Site:
        dir = site

        @staticmethod
        def remember(not_after: float | None = None, files: list[tuple[str, str]] | None = None) -> None:
            verdicts.remember(question, parsed.files() if files is None else files, verdict, not_after)

    Site.policy, Site.question, Site.verdict, Site.parsed = path, question, verdict, parsed
    return Site


def test_the_policy_s_files_are_the_bytes_parsed(site):
    files = site.parsed.files()
    assert [Path(p).name for p, _ in files] == ["policy.yaml", "ci.pub"]
    assert all(len(sha) == 64 for _, sha in files)


def test_a_verdict_is_recalled_for_the_same_question_and_files(site):
    assert verdicts.recall(site.question) is None
    site.remember()
    assert verdicts.recall(site.question) == site.verdict
    record = site.question.path()
    assert record.parent == Path(os.environ["XDG_CACHE_HOME"]) / "imagekit" / "verified"
    assert oct(record.parent.stat().st_mode & 0o777) == "0o700" and oct(record.stat().st_mode & 0o777) == "0o600"


def test_an_edited_policy_is_checked_again(site):
    site.remember()
    site.policy.write_text(site.policy.read_text() + "revoked: [ci]\n")
    assert verdicts.recall(site.question) is None


def test_a_replaced_key_file_is_checked_again(site):
    site.remember()
    (site.dir / "ci.pub").write_bytes((site.dir / "rogue.pub").read_bytes())
    assert verdicts.recall(site.question) is None


def test_a_policy_someone_else_could_now_change_is_checked_again(site):
    """The bytes are those recorded, but the full check would refuse the file (H14): so is the record."""
    site.remember()
    site.policy.chmod(0o646)
    assert verdicts.recall(site.question) is None
    site.policy.chmod(0o644)
    assert verdicts.recall(site.question) == site.verdict


def test_a_verdict_ends_when_the_first_signer_expires(site):
    now = time.time()
    site.remember(not_after=now + 60)
    assert verdicts.recall(site.question, now=now) == site.verdict
    assert verdicts.recall(site.question, now=now + 61) is None


@pytest.mark.parametrize("field,value", [("sha256", "d" * 64), ("digest", "sha256:" + "e" * 64),
                                         ("name", "registry.example.org/other/mpi"), ("converted", True),
                                         ("policy", "/etc/imagekit/policy.yaml")])
def test_a_record_answers_only_its_own_question(site, field, value):
    """Even copied to the other question's name, a record is about what it says it is about."""
    site.remember()
    other = verdicts.Question(**{**site.question.__dict__, field: value})
    other.path().write_bytes(site.question.path().read_bytes())
    assert verdicts.recall(other) is None


def test_a_record_outside_the_user_s_own_directory_is_never_read(site):
    site.remember()
    directory = site.question.path().parent
    directory.chmod(0o770)
    assert verdicts.recall(site.question) is None
    directory.chmod(0o700)
    record = site.question.path()
    moved = record.with_name("elsewhere.json")
    record.rename(moved)
    record.symlink_to(moved)
    assert verdicts.recall(site.question) is None


def test_a_record_that_names_no_policy_or_another_file_first_is_refused(site):
    site.remember(files=[(str(site.dir / "ci.pub"), site.parsed.files()[1][1])])
    assert not site.question.path().exists()                  # never written
    site.remember()
    doc = json.loads(site.question.path().read_text())
    doc["files"] = doc["files"][1:]
    site.question.path().write_text(json.dumps(doc))
    assert verdicts.recall(site.question) is None


def test_a_broken_record_is_passed_over(site):
    site.question.path().parent.mkdir(mode=0o700, parents=True)
    site.question.path().write_text("{not json")
    assert verdicts.recall(site.question) is None
