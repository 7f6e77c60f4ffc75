"""The signed importer's verdicts: a repeat hit under a signature policy is verified once, not on every start.

What the policy decides for a store entry (:mod:`imagekit.export.pyxis_policy`, steps 1-6) follows from
the bytes of the policy file, the bytes of every key file it names, the time (a key's ``not-after``),
and the question: the image as a rule matches it, the digest checked, the image ID, the entry's sha256
and whether it is the importer's own conversion. Once a full check lets an entry through, the importer
records those digests, the question, who signed, and the earliest ``not-after`` of the keys that signed, in
``${XDG_CACHE_HOME:-~/.cache}/imagekit/verified/policy-HEX.json``. A later hit that asks the same question
before that time, with the policy and every key file still holding the bytes recorded, and each of them
still one only root and the user can change (:mod:`imagekit.util.trusted_files`, as the full check asks),
is spared steps 1-6: no YAML, no key parsing, no signature check, which were most of what a signed hit
cost (perf-4, P4-2). Step 7 runs on every hit all the same: the file's own bytes against its sha256
(:mod:`imagekit.export.store.sealed`).

Why the record may be trusted as far as a read stamp is (:mod:`imagekit.export.store.verify`): it lives in
the user's own directory, created 0700 and read only while it is the user's and writable by nobody else
(:mod:`imagekit.util.private_records`), so no other user, publisher or registry can write one. Its owner
could forge one only for their own jobs, which they can start from any file of their own anyway. Any
change to what the decision was made from (a key revoked or a rule narrowed in the policy, a key file
replaced, a key past its ``not-after``) sends the hit back to the full check, whose answer is recorded
again. A refusal is never recorded: it is decided afresh each time.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from imagekit import registry
from imagekit.attest import POLICY_ENV
from imagekit.util import private_records, trusted_files
from imagekit.util.errors import UsageError
from imagekit.export.store import ARTIFACT_OPTION, Entry, sealed
from imagekit.export.store.verify import Stamps, verified_dir

VERSION = 1
RECORD_LIMIT = 64 << 10
FILE_LIMIT = 1 << 20          # a policy or a key file: a few KiB; anything larger is checked in full


def name_of(uri: str) -> tuple[str, str]:
    """(what a rule matches, the image as a message shows it)."""
    if uri.startswith("dockerd://"):
        return uri, uri
    ref = registry.parse(uri)
    return f"{ref.registry}/{ref.repository}", ref.docker


@dataclass(frozen=True)
class Question:
    """May this entry be served for this image under this policy file?"""

    policy: str
    name: str          # what a rule matches (name_of)
    digest: str        # what was verified: the manifest digest, or (dockerd://) the config digest
    image_id: str
    sha256: str        # the entry's file
    converted: bool    # the importer's own conversion, not a pushed artifact

    @classmethod
    def of(cls, policy: str | os.PathLike, uri: str, digest: str, entry: Entry) -> "Question":
        return cls(str(Path(policy)), name_of(uri)[0], digest, entry.image_id, entry.sha256,
                   ARTIFACT_OPTION not in entry.options)

    def as_list(self) -> list[Any]:
        return [self.policy, self.name, self.digest, self.image_id, self.sha256, self.converted]

    def path(self) -> Path:
        key = hashlib.sha256(json.dumps(self.as_list()).encode()).hexdigest()[:40]
        return verified_dir() / f"policy-{key}.json"


@dataclass(frozen=True)
class Verdict:
    """A full check's answer, as recorded."""

    enforced: bool            # False: the rule says `accept: unsigned`
    signers: list[str]
    rule_line: int | None

    def describe(self, question: Question, shown: str) -> str:
        if not self.enforced:
            return f"policy: {question.name} may start unsigned ({question.policy} line {self.rule_line}; checked before)"
        return (f"policy: {shown} is signed by {', '.join(self.signers)} (checked before; "
                f"{question.policy} and its keys unchanged)")


def remember(question: Question, files: list[tuple[str, str]], verdict: Verdict, not_after: float | None) -> None:
    """Record a full check that let the entry through. ``files``: (path, sha256) of the policy, then of
    every key file it names, as parsed; ``not_after``: when the first key that signed expires (POSIX time)."""
    if not files or files[0][0] != question.policy or not all(sha for _, sha in files):
        return
    base = verified_dir()
    if not private_records.make_private_dir(base):
        return
    private_records.write(question.path(), {
        "version": VERSION, "question": question.as_list(), "files": [list(f) for f in files],
        "enforced": verdict.enforced, "signers": verdict.signers, "rule_line": verdict.rule_line,
        "not_after": not_after})


def recall(question: Question, now: float | None = None) -> Verdict | None:
    """The recorded verdict for ``question``, or None (then the full check runs): no record, a record
    that is not the user's own, another question, past its time, or any file changed or no longer trusted."""
    if not private_records.own_private_dir(verified_dir()):
        return None
    doc = private_records.read(question.path(), RECORD_LIMIT)
    if not isinstance(doc, dict) or doc.get("version") != VERSION or doc.get("question") != question.as_list():
        return None
    not_after = doc.get("not_after")
    if not_after is not None and not (isinstance(not_after, (int, float)) and
                                      (time.time() if now is None else now) <= not_after):
        return None
    files = doc.get("files")
    if not (isinstance(files, list) and files and isinstance(files[0], list) and files[0][:1] == [question.policy]):
        return None
    for i, item in enumerate(files):
        if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            return None
        if not _unchanged(Path(item[0]), item[1], "signature policy" if i == 0 else "public key"):
            return None
    enforced, signers, line = doc.get("enforced"), doc.get("signers"), doc.get("rule_line")
    if not (isinstance(enforced, bool) and isinstance(signers, list) and all(isinstance(s, str) for s in signers)
            and (line is None or isinstance(line, int))):
        return None
    return Verdict(enforced, signers, line)


def _unchanged(path: Path, sha256: str, what: str) -> bool:
    """``path`` is still trusted as the full check trusts it, and holds the bytes recorded."""
    try:
        trusted_files.check(path, what)
        with open(path, "rb") as fh:
            data = fh.read(FILE_LIMIT + 1)
    except (UsageError, OSError):
        return False
    return len(data) <= FILE_LIMIT and hashlib.sha256(data).hexdigest() == sha256


def spare(uri: str, image_id: str, manifest_digest: str | None, entry: Entry, env: Mapping[str, str],
          log: Callable[[str], None]) -> bool:
    """The hit's check from a recorded verdict: True when one holds, after step 7 (the file's bytes) has
    passed; False when the full check must run (:func:`imagekit.export.pyxis_policy.enforce`)."""
    policy = env.get(POLICY_ENV)
    if not policy:
        return False
    question = Question.of(policy, uri, manifest_digest or image_id, entry)
    verdict = recall(question)
    if verdict is None:
        return False
    log(verdict.describe(question, name_of(uri)[1]))
    if verdict.enforced:
        sealed.check(entry.path, entry.sha256, Stamps())
    return True
