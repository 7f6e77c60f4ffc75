"""The site's signature policy: which keys may sign the images of which repositories. Fail closed.

A YAML (or JSON: YAML reads it) file, like containers' ``policy.json`` in spirit::

    version: 1
    keys:
      ci-2026:
        path: keys/ci-2026.pub          # PEM or OpenSSH public key; relative to this file
        not-after: 2027-01-31           # optional: refused after this day (UTC) or datetime
      release:
        path: /etc/imagekit/keys/release.pub
    revoked:                            # key names or key IDs (SHA256:…, `imagekit keygen` prints it)
      - SHA256:3kq8…
    repositories:                       # the first rule whose pattern matches wins
      - match: registry.example.org:5000/hpc/*      # REGISTRY/REPOSITORY, * and ? as in the shell
        signers: [ci-2026, release]                 # any one of them
      - match: registry.example.org:5000/scratch/*
        accept: unsigned                            # said out loud, never a default
      - match: dockerd://*                          # images of a node's Docker engine
        signers: [ci-2026]
        convert: true     # the importer may convert a verified image itself (default: serve only
                          # a signed .sqsh, one whose sha256 a signed statement names)

An image that no rule matches is refused. A file that cannot be read, a key that is missing or of a
type imagekit does not sign with, an unknown field: every error names the file, the line and the key,
and refuses everything (nothing is served under a policy imagekit cannot read).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.util import registry_names, trusted_files, yamlpos
from imagekit.attest import POLICY_ENV
from imagekit.attest import keys as keys_mod
from imagekit.attest.verifier import TrustedKey, Trust
from imagekit.util.errors import ImagekitError, StackError, VerificationError

ENV = POLICY_ENV
VERSION = 1
TOP = ("version", "keys", "revoked", "repositories")
KEY_FIELDS = ("path", "not-after")
RULE_FIELDS = ("match", "signers", "accept", "convert")
DOCKERD = "dockerd://"


class PolicyError(StackError):
    """A policy file imagekit cannot use (file:line: key: what)."""

    @classmethod
    def wrap(cls, exc: StackError) -> "PolicyError":
        """The YAML reader's error (already located) as a PolicyError."""
        new = cls.__new__(cls)
        ImagekitError.__init__(new, exc.message, exc.hint)
        new.file, new.line, new.key = exc.file, exc.line, exc.key
        return new


@dataclass
class Rule:
    match: str
    trust: Trust | None            # None: `accept: unsigned`
    convert: bool = False
    line: int | None = None

    @property
    def unsigned(self) -> bool:
        return self.trust is None


@dataclass
class Policy:
    path: Path
    rules: list[Rule] = field(default_factory=list)
    sha256: str = ""                                   # of the bytes parsed (hex)
    keys: dict[str, TrustedKey] = field(default_factory=dict)

    def files(self) -> list[tuple[str, str]]:
        """(path, sha256 of the bytes read) of the policy and of every key file it names: all that its
        decisions were made from (:mod:`imagekit.export.pyxis_verdicts`)."""
        return [(str(self.path), self.sha256)] + [(k.key.source, k.key.sha256) for k in self.keys.values()]

    def rule_for(self, name: str) -> Rule:
        """The first rule whose pattern matches ``name``, both canonical (:func:`canonical`: the registry a
        spelling reaches, not the spelling); VerificationError when none does."""
        wanted = canonical(name)
        for rule in self.rules:
            if fnmatch.fnmatchcase(wanted, canonical(rule.match)):
                return rule
        shown = name if wanted == name else f"{name} ({wanted})"
        raise VerificationError(f"{shown}: no rule of the signature policy {self.path} covers it (fail closed)",
                                f"add a `repositories:` rule that matches {wanted} to {self.path}")


def canonical(name: str) -> str:
    """What a rule matches for ``name`` (``REGISTRY/REPOSITORY``, ``dockerd://IMAGE`` or ``file:PATH``),
    and what a rule's pattern means: one spelling per registry (:mod:`imagekit.util.registry_names`)."""
    if name.startswith(DOCKERD):
        return DOCKERD + registry_names.engine_image(name[len(DOCKERD):])
    if name.startswith("file:"):
        return name
    return registry_names.repository(name)


def _err(where: object, key: str, message: str, hint: str | None = None, prefix: str = "") -> PolicyError:
    """Located at ``key`` of the mapping ``where``; the key shown with its path (``keys.ci.path``)."""
    file, line = where.pos(key) if hasattr(where, "pos") else (getattr(where, "file", None), getattr(where, "line", None))
    return PolicyError(message, file=file, line=line, key=prefix + key, hint=hint)


def _unknown(doc: yamlpos.PosDict, allowed: tuple[str, ...], prefix: str) -> None:
    for k in doc:
        if k not in allowed:
            raise _err(doc, k, "unknown field", f"known fields here: {', '.join(allowed)}", prefix)


def _when(value: object, doc: yamlpos.PosDict, key: str, prefix: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    if isinstance(value, dt.date):
        # The whole day counts: a key that expires on 2027-01-31 still signs that day.
        return dt.datetime.combine(value, dt.time.max, dt.timezone.utc)
    if isinstance(value, str):
        try:
            return _when(dt.datetime.fromisoformat(value.replace("Z", "+00:00")), doc, key, prefix)
        except ValueError:
            try:
                return _when(dt.date.fromisoformat(value), doc, key, prefix)
            except ValueError:
                pass
    raise _err(doc, key, f"{value!r} is not a date", "write it as 2027-01-31 or 2027-01-31T12:00:00Z", prefix)


def _load_keys(doc: yamlpos.PosDict, base: Path) -> dict[str, TrustedKey]:
    raw = doc.get("keys")
    if not isinstance(raw, dict) or not raw:
        raise _err(doc, "keys", "the policy names no key", "add `keys: {NAME: {path: KEY.pub}}`")
    out = {}
    for name, spec in raw.items():
        where = f"keys.{name}."
        if not isinstance(spec, dict):
            raise _err(raw, name, "is not a mapping", "write `NAME: {path: KEY.pub}`", "keys.")
        _unknown(spec, KEY_FIELDS, where)
        if not isinstance(spec.get("path"), str) or not spec["path"]:
            raise _err(spec, "path", "no public key file", "name it: `path: KEY.pub`", where)
        path = Path(spec["path"]) if os.path.isabs(spec["path"]) else base / spec["path"]
        try:
            key = keys_mod.load_public(path)
        except ImagekitError as exc:
            raise _err(spec, "path", exc.message, exc.hint, where) from None
        not_after = _when(spec["not-after"], spec, "not-after", where) if "not-after" in spec else None
        out[str(name)] = TrustedKey(str(name), key, not_after)
    return out


def load(path: str | os.PathLike) -> Policy:
    """Read and check the whole policy file at ``path`` (every key file is read now)."""
    path = Path(path)
    trusted_files.check(path, "signature policy")       # before a byte of it counts (H14)
    try:
        raw = yamlpos.read(path)
        doc = yamlpos.load(path, raw=raw)
    except StackError as exc:
        raise PolicyError.wrap(exc) from None
    if not isinstance(doc, dict):
        raise PolicyError("the policy is not a mapping", file=str(path), line=1,
                          hint="start with `version: 1`, then `keys:` and `repositories:`")
    _unknown(doc, TOP, "")
    if doc.get("version") != VERSION:
        raise _err(doc, "version", f"version {doc.get('version')!r}; this imagekit reads version {VERSION}",
                   "write `version: 1`")
    trusted = _load_keys(doc, path.parent)
    revoked_raw = doc.get("revoked") or []
    if not isinstance(revoked_raw, list) or not all(isinstance(r, str) for r in revoked_raw):
        raise _err(doc, "revoked", "not a list of key names or key IDs",
                   "write `revoked: [SHA256:…]`")
    revoked = set(revoked_raw)
    rules_raw = doc.get("repositories")
    if not isinstance(rules_raw, list) or not rules_raw:
        raise _err(doc, "repositories", "the policy has no repository rules",
                   "add `repositories: [{match: REGISTRY/REPO/*, signers: [NAME]}]`")
    rules = []
    lines = getattr(rules_raw, "lines", [])
    for i, spec in enumerate(rules_raw):
        where = f"repositories[{i}]."
        if not isinstance(spec, dict):
            raise PolicyError("is not a mapping", file=str(path), line=lines[i] if i < len(lines) else None,
                              key=f"repositories[{i}]", hint="write `- {match: PATTERN, signers: [NAME]}`")
        _unknown(spec, RULE_FIELDS, where)
        if not isinstance(spec.get("match"), str) or not spec["match"]:
            raise _err(spec, "match", "no pattern", "add `match: REGISTRY/REPO/*`", where)
        convert = spec.get("convert", False)
        if not isinstance(convert, bool):
            raise _err(spec, "convert", f"{convert!r} is not true or false", None, where)
        if "accept" in spec:
            if spec["accept"] != "unsigned":
                raise _err(spec, "accept", f"{spec['accept']!r} is not a value it takes",
                           "the only value is `unsigned` (and then no signers)", where)
            if "signers" in spec:
                raise _err(spec, "signers", "both signers and `accept: unsigned`", "keep one", where)
            rules.append(Rule(spec["match"], None, convert, spec.pos("match")[1]))
            continue
        names = spec.get("signers")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise _err(spec, "signers", "no signers named",
                       "list key names from `keys:` (`signers: [NAME]`), or say `accept: unsigned`", where)
        unknown = [n for n in names if n not in trusted]
        if unknown:
            raise _err(spec, "signers", f"no key called {', '.join(map(repr, unknown))}",
                       f"keys the policy defines: {', '.join(trusted)}", where)
        rules.append(Rule(spec["match"], Trust([trusted[n] for n in names], revoked), convert,
                          spec.pos("match")[1]))
    return Policy(path, rules, hashlib.sha256(raw).hexdigest(), trusted)


def configured(env: dict[str, str] | os._Environ) -> Path | None:
    """The policy file ``IMAGEKIT_POLICY`` names, or None (no policy: nothing is enforced)."""
    value = env.get(ENV, "")
    return Path(value) if value else None
