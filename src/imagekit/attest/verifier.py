"""Verifying signed statements against trusted keys, and their subjects against what is at hand.

A statement counts only when a trusted key signed its envelope, that key is not revoked and not past
its ``not-after``. Every refusal is a :class:`~imagekit.util.errors.VerificationError` that says what was
found (signed by whom, about which digest) and what was wanted, so an admin can act on one line.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from imagekit.attest import PAYLOAD_TYPE, statement
from imagekit.attest.dsse import Envelope
from imagekit.attest.keys import Key
from imagekit.attest.statement import Statement, Subject
from imagekit.util.errors import VerificationError


@dataclass(frozen=True)
class TrustedKey:
    name: str
    key: Key
    not_after: dt.datetime | None = None

    def label(self) -> str:
        return f"{self.name} ({self.key.keyid})" if self.name != self.key.keyid else self.key.keyid


@dataclass
class Trust:
    """Who may sign: named keys, and key IDs that are revoked."""

    keys: list[TrustedKey]
    revoked: set[str] = field(default_factory=set)

    def describe(self) -> str:
        return ", ".join(k.label() for k in self.keys) or "no key"

    def unusable(self, key: TrustedKey, when: dt.datetime | None = None) -> str | None:
        """Why a signature by ``key`` does not count now (None: it does): revoked, by name or key ID, or
        past its ``not-after``. The one decision every signature path makes (statements, SIF objects,
        registry referrers)."""
        if key.key.keyid in self.revoked or key.name in self.revoked:
            return f"signed by {key.label()}, which is revoked"
        if key.not_after is not None and (when or now()) > key.not_after:
            return f"signed by {key.label()}, which expired on {key.not_after.isoformat()}"
        return None


@dataclass
class Signed:
    statement: Statement
    signers: list[TrustedKey]
    where: str


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def verify(envelopes: list[Envelope], trust: Trust, what: str, *, when: dt.datetime | None = None) -> list[Signed]:
    """The statements among ``envelopes`` that a usable trusted key signed. VerificationError when
    none is, saying why: unsigned, signed by another key, by a revoked key or an expired one."""
    when = when or now()
    if not envelopes:
        raise VerificationError(f"{what}: no signed statement (unsigned image)",
                                f"sign it with a key the site accepts ({trust.describe()}): imagekit sign")
    by_id = {k.key.keyid: k for k in trust.keys}
    good: list[Signed] = []
    problems: list[str] = []
    for env in envelopes:
        where = f"{what} ({_where(env)})"
        if env.payload_type != PAYLOAD_TYPE:
            problems.append(f"an envelope of type {env.payload_type!r}, not an in-toto statement")
            continue
        valid = env.signed_by([k.key for k in trust.keys])
        usable = []
        for key in valid:
            tk = by_id[key.keyid]
            problem = trust.unusable(tk, when)
            if problem:
                problems.append(problem)
            else:
                usable.append(tk)
        if not valid:
            ids = sorted({kid for kid, _ in env.signatures if kid}) or ["a key with no key ID"]
            problems.append(f"signed by {', '.join(ids)}, not by a key the site accepts")
        if usable:
            try:
                good.append(Signed(statement.parse(env.payload, where), usable, where))
            except statement.StatementError as exc:    # signed, but not a statement imagekit can use
                problems.append(exc.message.split(": ", 1)[-1])
    if not good:
        unique = list(dict.fromkeys(problems))
        raise VerificationError(f"{what}: no statement signed by an accepted key: {'; '.join(unique)}",
                                f"accepted signers: {trust.describe()}")
    return good


def _where(env: Envelope) -> str:
    ids = [kid for kid, _ in env.signatures if kid]
    return "signatures by " + ", ".join(ids) if ids else "envelope"


def of_type(signed: list[Signed], predicate_type: str) -> list[Signed]:
    return [s for s in signed if s.statement.predicate_type == predicate_type]


def require(signed: list[Signed], kind: str, sha256: str, what: str, *, platform: str | None = None) -> Signed:
    """The first verified statement that names ``sha256`` as a subject of ``kind``. VerificationError
    otherwise, naming the digests and platforms the signed statements are about."""
    want = statement.hex_of(sha256)
    for s in signed:
        hits = [sub for sub in s.statement.names(want) if sub.kind == kind]
        if hits and (platform is None or not hits[0].platform or hits[0].platform == platform):
            return s
    for s in signed:
        hits = [sub for sub in s.statement.names(want) if sub.kind == kind]
        if hits and platform is not None:
            raise VerificationError(f"{what}: the signed statement about sha256:{want} is for {hits[0].platform}, "
                                    f"not {platform}", "sign each platform's image on its own")
    seen = sorted({_show(sub) for s in signed for sub in s.statement.subjects if sub.kind == kind})
    raise VerificationError(f"{what}: no signed statement names this {kind} sha256:{want}"
                            + (f" ({platform})" if platform else "")
                            + f"; they name {', '.join(seen) if seen else 'no ' + kind}",
                            "the file or image changed after signing, or the statements are about another "
                            "image or platform: sign this one")


def _show(sub: Subject) -> str:
    return f"sha256:{sub.sha256[:16]}…" + (f" ({sub.platform})" if sub.platform else "")


def signers(signed: list[Signed]) -> list[str]:
    return list(dict.fromkeys(k.label() for s in signed for k in s.signers))
