"""The Pyxis importer's signature step: under a site policy, only signed images start. Fail closed.

With ``IMAGEKIT_POLICY`` set (the importer's wrapper sets it, as it sets the store, and runs
``imagekit-pyxis-importer-signed``), before the importer prints a path (:mod:`imagekit.export.pyxis_signed`
on a hit, :mod:`imagekit.export.pyxis_fill` after a fill):

1. the policy file is read whole; an error in it refuses every image (file:line: key: what);
2. the rule for the image is the first whose pattern matches ``REGISTRY/REPOSITORY`` (``docker://``)
   or ``dockerd://IMAGE``; no rule refuses it; ``accept: unsigned`` lets it through unchecked;
3. the signed statements come from beside the store entry (``attestations.intoto.jsonl``, no network),
   else from the registry (referrers of the manifest the reference resolved to);
4. a statement counts when a signer of the rule signed it with a key neither revoked nor expired;
5. it must name the image: the manifest digest the importer resolved (``docker://``), or the config
   digest (``dockerd://``);
6. it must name the file about to be served: the entry's sha256 among its ``.sqsh`` subjects. Only a
   rule with ``convert: true`` lets the importer serve its own conversion of the verified image instead;
7. that file must be one nobody but root and the job's user can replace or rewrite, and its bytes are
   hashed against that sha256 on its first use on each node (:mod:`imagekit.export.store.sealed`): a
   publisher's seal or recorded sha256 is never taken on trust. A store entry that fails this is not
   served (the importer looks further, and fills the user's own store).

A refusal is one line, ``error: IMAGE (DIGEST): refused: WHY; accepted signers: …``, and exit
status 12; nothing is printed on stdout, so Pyxis starts nothing. An entry let through is recorded
(:mod:`imagekit.export.pyxis_verdicts`): the user's next hit on it is spared steps 1-6 while the policy,
its keys and their trust are as they were, and no signer has expired.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from imagekit import registry
from imagekit.attest import bundle, policy, verifier
from imagekit.attest.verifier import Signed, Trust
from imagekit.attest.dsse import Envelope
from imagekit.util.errors import ImagekitError, VerificationError
from imagekit.export import attestations, pyxis_verdicts
from imagekit.export.pyxis_verdicts import name_of
from imagekit.export.store import ARTIFACT_OPTION, Entry, sealed
from imagekit.export.store.verify import Stamps
from imagekit.registry import client as reg


class Refused(VerificationError):
    """The policy refuses the image: one line, no hint (Pyxis shows the importer's stderr as is)."""

    def __init__(self, image: str, digest: str, why: str, trust: Trust | None = None) -> None:
        signers = f"; accepted signers: {trust.describe()}" if trust is not None else ""
        super().__init__(f"{image} ({digest}): refused by the signature policy: {why}{signers}")


@dataclass
class Decision:
    """The outcome of the image check, kept for the file check that follows it."""

    uri: str
    digest: str                       # what was verified: manifest digest, or config digest (dockerd)
    rule: policy.Rule | None
    signed: list[Signed] = field(default_factory=list)
    envelopes: list[Envelope] = field(default_factory=list)
    policy: policy.Policy | None = None   # what the rule came from (its files' digests: a verdict's record)

    @property
    def enforced(self) -> bool:
        return self.rule is not None and not self.rule.unsigned

    def signed_files(self) -> set[str]:
        """sha256 (hex) of every .sqsh a verified statement names."""
        return {s.sha256 for sig in self.signed for s in sig.statement.of_kind("enroot")}

    def save_beside(self, data_path: Path) -> None:
        """Put the verified envelopes beside a store entry being made (its file is ``data_path``)."""
        if self.enforced and self.envelopes:
            (data_path.parent / bundle.ENTRY_NAME).write_bytes(b"".join(e.raw.strip() + b"\n" for e in self.envelopes))


def configured(env: Mapping[str, str]) -> Path | None:
    return policy.configured(env)   # type: ignore[arg-type]


def _load(path: Path, uri: str, digest: str) -> policy.Policy:
    try:
        return policy.load(path)
    except ImagekitError as exc:
        # A broken policy refuses everything: nothing starts under rules nobody can read.
        raise Refused(uri, digest, f"the policy cannot be used: {exc.message}") from None


def check_image(uri: str, image_id: str, manifest_digest: str | None, env: Mapping[str, str], *,
                entry: Entry | None = None, log: Callable[[str], None] | None = None) -> Decision:
    """Steps 1-5 (module docstring): the image is signed by a signer the rule accepts. Refused otherwise."""
    digest = manifest_digest or image_id
    path = configured(env)
    if path is None:
        return Decision(uri, digest, None)
    name, shown = name_of(uri)
    rules = _load(path, shown, digest)
    try:
        rule = rules.rule_for(name)
    except VerificationError:
        raise Refused(shown, digest, f"no rule of {path} covers {name} (fail closed)") from None
    if rule.unsigned:
        if log:
            log(f"policy: {name} may start unsigned ({path} line {rule.line})")
        return Decision(uri, digest, rule, policy=rules)
    assert rule.trust is not None
    kind = "oci-manifest" if manifest_digest else "oci-config"
    local = []
    if entry is not None:
        try:
            local = bundle.read(entry.dir / bundle.ENTRY_NAME, (lambda m: log(f"warning: {m}")) if log else None)
        except VerificationError as exc:
            if log:
                log(f"warning: the signatures beside {entry.path} are unreadable: {exc.message}")
    problem = None
    if local:
        try:
            signed = _first_naming(local, rule.trust, kind, digest, shown)
            if log:
                log(f"policy: {shown} is signed by {', '.join(verifier.signers(signed))} (beside the entry)")
            return Decision(uri, digest, rule, signed, local, rules)
        except VerificationError as exc:
            problem = exc   # stale (a key rotated since): the registry may list newer statements
    fetched = attestations.Fetched()
    if manifest_digest:
        ref = registry.parse(uri)
        client = reg.RegistryClient.for_reference(ref, env=dict(env))
        subject = reg.Resolved(reference=ref.with_digest(manifest_digest), digest=manifest_digest,
                               media_type=reg.OCI_MANIFEST, size=0, config_digest=image_id)
        fetched = attestations.fetch(client, ref.repository, subject,
                                     warn=(lambda m: log(f"warning: {m}")) if log else None, trust=rule.trust)
    envelopes = fetched.envelopes
    if not envelopes:
        if problem is not None:
            raise Refused(shown, digest, _why(problem), rule.trust)
        raise Refused(shown, digest, fetched.why_none(), rule.trust)
    try:
        signed = _first_naming(envelopes, rule.trust, kind, digest, shown)
    except VerificationError as exc:
        raise Refused(shown, digest, _why(exc), rule.trust) from None
    if log:
        log(f"policy: {shown} is signed by {', '.join(verifier.signers(signed))}")
    return Decision(uri, digest, rule, signed, envelopes, rules)


def _first_naming(envelopes: list[Envelope], trust: Trust, kind: str, digest: str, shown: str) -> list[Signed]:
    """The first verified statement naming ``digest``, smallest envelope first: the provenance (a few KiB)
    is checked before the SBOM (up to MiBs), and a job start needs one of them, not both (they name the
    same subjects). VerificationError, saying why, when none does."""
    problem: VerificationError | None = None
    for env in sorted(envelopes, key=lambda e: len(e.payload)):
        try:
            signed = verifier.verify([env], trust, shown)
            verifier.require(signed, kind, digest, shown)
            return signed
        except VerificationError as exc:
            problem = problem if problem is not None and "no statement signed" not in problem.message else exc
    assert problem is not None
    raise problem


def _why(exc: VerificationError) -> str:
    """The reason without the image's name in front (the refusal names it once)."""
    return exc.message.split(": ", 1)[-1]


def artifact_allowed(decision: Decision, file_sha256: str | None) -> bool:
    """A pushed .sqsh artifact is trusted when a verified statement names it (whatever the repository)."""
    return bool(decision.enforced and file_sha256 and file_sha256.split(":")[-1] in decision.signed_files())


def may_convert(decision: Decision, why: str) -> None:
    """Refused unless the rule lets the importer convert the verified image itself (``convert: true``):
    a conversion's file is named by no statement, so step 6 would refuse it after the work."""
    if decision.enforced and decision.rule is not None and not decision.rule.convert:
        _, shown = name_of(decision.uri)
        raise Refused(shown, decision.digest, f"no signed .sqsh to serve ({why}); push it beside the image "
                      "(imagekit push --with enroot --sign KEY), or allow `convert: true` for this repository",
                      decision.rule.trust)


def check_file(decision: Decision, entry: Entry) -> None:
    """Step 6: the entry about to be served is a file a verified statement names, or (``convert: true``)
    the importer's own conversion of the verified image."""
    if not decision.enforced:
        return
    _, shown = name_of(decision.uri)
    if entry.sha256 in decision.signed_files():
        return
    assert decision.rule is not None
    converted = ARTIFACT_OPTION not in entry.options
    named_configs = {s.sha256 for sig in decision.signed for s in sig.statement.of_kind("oci-config")}
    if decision.rule.convert and converted and entry.image_id.split(":")[-1] in named_configs:
        return
    signed = sorted(decision.signed_files())
    raise Refused(shown, decision.digest,
                  f"the .sqsh it would serve (sha256:{entry.sha256}) is named by no signed statement"
                  + (f" (they name {', '.join('sha256:' + s[:16] + '…' for s in signed)})" if signed else
                     " (they name no .sqsh)")
                  + ("" if decision.rule.convert else "; push the signed .sqsh beside the image "
                     "(imagekit push --with enroot --sign KEY), or allow `convert: true` for this repository"),
                  decision.rule.trust)


def check_served(decision: Decision, entry: Entry, stamps: Stamps | None = None) -> None:
    """Steps 6 and 7: :func:`check_file`, then (under an enforced rule) the file itself: NotSealed when
    someone who cannot sign could replace it, IntegrityError when its bytes are not its sha256. Those
    two mean "not this entry": the caller may look for (or make) another."""
    check_file(decision, entry)
    if decision.enforced:
        sealed.check(entry.path, entry.sha256, Stamps() if stamps is None else stamps)
    remember(decision, entry)


def remember(decision: Decision, entry: Entry) -> None:
    """Record a decision that let ``entry`` through, so that the next hit on it is spared steps 1-6 while
    nothing it was made from changes (:mod:`imagekit.export.pyxis_verdicts`)."""
    if decision.policy is None or decision.rule is None:
        return
    keys = [k for s in decision.signed for k in s.signers]
    ends = [k.not_after.timestamp() for k in keys if k.not_after is not None]
    question = pyxis_verdicts.Question.of(decision.policy.path, decision.uri, decision.digest, entry)
    verdict = pyxis_verdicts.Verdict(decision.enforced, verifier.signers(decision.signed), decision.rule.line)
    pyxis_verdicts.remember(question, decision.policy.files(), verdict, min(ends) if ends else None)


def enforce(uri: str, image_id: str, manifest_digest: str | None, entry: Entry, env: Mapping[str, str] | None = None,
            log: Callable[[str], None] | None = None) -> None:
    """Every check for an entry found in a store (the importer's hit path)."""
    env = os.environ if env is None else env
    decision = check_image(uri, image_id, manifest_digest, env, entry=entry, log=log)
    check_served(decision, entry)
