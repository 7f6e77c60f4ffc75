"""A SIF's SBOM and signature objects, as Apptainer writes and checks them (``apptainer verify --key``).

What is added to a SIF that imagekit wrote (or any SIF with one object group and no signature):

- a ``DataSBOM`` object (0x4009 in apptainer/sif v2: after CryptoMessage) in the image's object
  group, its extra an int32 SBOM format (1: CycloneDX JSON), holding the CycloneDX document;
- optionally a generic JSON object ``imagekit-provenance.json``: the signed provenance statement
  (a DSSE envelope) about the image this SIF was made from;
- a ``DataSignature`` object in no group (group ID 0 | the group mask), linked to the object group
  (linked ID 1 | mask), its extra an int32 hash type (1: SHA-256) and a 256-byte entity (zero for
  key signatures), holding a DSSE envelope of type ``application/vnd.sylabs.sif-metadata+json``.

The signed metadata (apptainer/sif ``pkg/integrity``, metadata.go and digest.go) is JSON::

    {"version": 1, "header": {"digest": "sha256:<hex>"},
     "objects": [{"relativeId": N, "descriptorDigest": "sha256:<hex>", "objectDigest": "sha256:<hex>"}]}

where the header digest covers launch script, magic, version and ID (32+10+3+16 bytes), each
descriptor digest covers, little-endian: data type (int32), used (1 byte), the ID relative to the
group's lowest ID (uint32), linked ID (uint32), size, creation time, UID and GID (int64 each), then
name (128 bytes) and extra (384 bytes); each object digest covers the object's bytes. Every object of
the group is listed (the verifier refuses a group with an unsigned object), so one changed byte of
the root filesystem fails ``apptainer verify``. Offsets, padding, modification times and the
header's counts are not covered: that is what lets an object be appended after signing... and why
imagekit adds the SBOM *before* it signs.

:func:`verify` checks the same metadata here (for ``imagekit verify`` and the importer, no
Apptainer needed); tests hold both to the real ``apptainer verify``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from imagekit.util import atomic, digests, untrusted_json
from imagekit.attest import dsse
from imagekit.attest.verifier import Trust
from imagekit.util.errors import IntegrityError, UsageError, VerificationError
from imagekit.sif_reader import (DATA_GENERIC_JSON, DATA_SBOM, DATA_SIGNATURE, DEFAULT_GROUP, DESCRIPTOR, GROUP_MASK, HEADER,
                                 Descriptor, SifInfo, aligned, read_sif)

METADATA_TYPE = "application/vnd.sylabs.sif-metadata+json"
SBOM_CYCLONEDX_JSON = 1
HASH_SHA256 = 1
PROVENANCE_NAME = "imagekit-provenance.json"
SIGNATURE_EXTRA = struct.Struct("<i256s")
SBOM_EXTRA = struct.Struct("<i")
_INTEGRITY = struct.Struct("<i?IIqqqq")
MAX_SIGNATURE_OBJECT = dsse.MAX_ENVELOPE


class SifSignError(VerificationError):
    """A SIF whose signature does not hold."""


def header_digest(raw_header: bytes) -> str:
    launch, magic, version, _arch, ident = HEADER.unpack(raw_header)[:5]
    return "sha256:" + hashlib.sha256(launch + magic + version + ident).hexdigest()


def descriptor_digest(d: Descriptor, min_id: int) -> str:
    fixed = _INTEGRITY.pack(d.datatype, d.used, d.id - min_id, d.linked_id, d.size, d.created, d.uid, d.gid)
    name = d.name.encode()[:128].ljust(128, b"\0")
    extra = d.extra[:384].ljust(384, b"\0")
    return "sha256:" + hashlib.sha256(fixed + name + extra).hexdigest()


def object_digest(path: Path, d: Descriptor) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        fh.seek(d.offset)
        left = d.size
        while left:
            chunk = fh.read(min(left, 4 << 20))
            if not chunk:
                raise SifSignError(f"{path}: object {d.id} is cut short (truncated file?)")
            h.update(chunk)
            left -= len(chunk)
    return "sha256:" + h.hexdigest()


def group(info: SifInfo, group_id: int = DEFAULT_GROUP) -> list[Descriptor]:
    return sorted((d for d in info.descriptors if d.group_id == group_id), key=lambda d: d.id)


def metadata(info: SifInfo, group_id: int = DEFAULT_GROUP) -> dict:
    """The image metadata Apptainer signs for ``group_id``: header digest, each object's digests."""
    with open(info.path, "rb") as fh:
        raw = fh.read(HEADER.size)
    objects = group(info, group_id)
    if not objects:
        raise UsageError(f"{info.path}: no object group {group_id & ~GROUP_MASK} to sign")
    low = objects[0].id
    return {"version": 1, "header": {"digest": header_digest(raw)},
            "objects": [{"relativeId": d.id - low, "descriptorDigest": descriptor_digest(d, low),
                         "objectDigest": object_digest(info.path, d)} for d in objects]}


@dataclass
class NewObject:
    datatype: int
    data: bytes
    name: str = ""
    extra: bytes = b""
    group_id: int = DEFAULT_GROUP
    linked_id: int = 0


def _append(path: Path, info: SifInfo, objects: list[NewObject], when: int) -> SifInfo:
    """Write ``objects`` after the data, their descriptors into free slots, and the header's counts.
    Objects are 4096-aligned, as imagekit's writer aligns every object."""
    free = info.descriptors_free
    if len(objects) > free:
        raise UsageError(f"{path}: {free} free descriptors, {len(objects)} needed")
    end = info.data_offset + info.data_size
    next_id = max((d.id for d in info.descriptors), default=0) + 1
    with open(path, "r+b") as fh:
        fh.seek(info.descriptors_offset)
        table = fh.read(info.descriptors_size)
        # Free slots, first first (a deleted object leaves its slot unused): never overwrite a used one.
        slots = [i for i in range(info.descriptors_total) if not table[i * DESCRIPTOR.size + 4]]
        for obj, slot in zip(objects, slots):
            offset = aligned(end)
            fh.seek(offset)
            fh.write(obj.data)
            d = Descriptor(datatype=obj.datatype, id=next_id, offset=offset, size=len(obj.data),
                           size_with_padding=offset - end + len(obj.data), group_id=obj.group_id,
                           linked_id=obj.linked_id, created=when, modified=when, name=obj.name, extra=obj.extra)
            fh.seek(info.descriptors_offset + slot * DESCRIPTOR.size)
            fh.write(d.pack())
            next_id += 1
            end = offset + len(obj.data)
        fh.truncate(end)
        fh.seek(0)
        raw = bytearray(fh.read(HEADER.size))
        fields = list(HEADER.unpack(raw))
        fields[6] = when                               # modified
        fields[7] = info.descriptors_free - len(objects)
        fields[12] = end - info.data_offset            # data size
        fh.seek(0)
        fh.write(HEADER.pack(*fields))
    return read_sif(path)


def signatures(info: SifInfo, group_id: int = DEFAULT_GROUP) -> list[Descriptor]:
    return [d for d in info.descriptors if d.datatype == DATA_SIGNATURE and d.linked_id == group_id]


def sign_file(src: Path, dst: Path, envelope_for: Callable[[bytes], dict], *,
              sbom: bytes | None = None, provenance: bytes | None = None,
              when: int | None = None, expect: str | None = None) -> Path:
    """Write ``dst``: ``src`` plus the SBOM (and provenance) objects, then the signature object over its
    object group. ``envelope_for(payload)`` signs the metadata (a DSSE envelope dict, from the site key).
    ``dst`` appears only when complete; ``src`` is never changed (it may be a store entry). ``expect``:
    the sha256 ``src`` must have, checked on the copy about to be signed (IntegrityError otherwise)."""
    info = read_sif(src)
    if signatures(info) and (sbom is not None or provenance is not None):
        raise UsageError(f"{src} is signed already: an SBOM added now would break its signature",
                         "sign the unsigned export (imagekit export … --sign KEY)")
    if any(d.datatype == DATA_SBOM for d in info.descriptors) and sbom is not None:
        raise UsageError(f"{src} has an SBOM object already")
    when = int(time.time()) if when is None else when
    with atomic.target(dst, 0o755 if src.stat().st_mode & 0o111 else 0o644, sync=True) as tmp:
        shutil.copyfile(src, tmp)     # copy_file_range where the file system has it
        if expect is not None and (got := digests.sha256_file(tmp)) != expect:
            raise IntegrityError(f"{src} has sha256:{got} by now, not the sha256:{expect} this export made: "
                                 "not signing it", "export it again (and keep others from writing its directory)")
        work = read_sif(tmp)
        added = []
        if sbom is not None:
            added.append(NewObject(DATA_SBOM, sbom, extra=SBOM_EXTRA.pack(SBOM_CYCLONEDX_JSON)))
        if provenance is not None:
            added.append(NewObject(DATA_GENERIC_JSON, provenance, name=PROVENANCE_NAME))
        if added:
            work = _append(tmp, work, added, when)
        payload = json.dumps(metadata(work), separators=(",", ":")).encode()
        envelope = envelope_for(payload)
        _append(tmp, work, [NewObject(DATA_SIGNATURE, dsse.encode(envelope), group_id=GROUP_MASK,
                                      linked_id=DEFAULT_GROUP,
                                      extra=SIGNATURE_EXTRA.pack(HASH_SHA256, b""))], when)
    read_sif(dst)
    return dst


@dataclass
class SifVerdict:
    signers: list[str]
    objects: int
    sbom: bytes | None
    provenance: bytes | None


def verify(path: str | os.PathLike, trust: Trust, *, when: dt.datetime | None = None) -> SifVerdict:
    """Check ``path``'s signature objects as ``apptainer verify --key`` does, with ``trust``'s keys: every
    object group the file has must carry a signature that holds (Apptainer refuses a group no signature
    covers: "signature not found for object group N"), by a key the trust accepts now (not revoked, by
    name or key ID, nor past its ``not-after``: :meth:`Trust.unusable`). SifSignError saying which group
    or object, or that no usable key signed it."""
    path = Path(path)
    info = read_sif(path)
    if not any(d.datatype == DATA_SIGNATURE for d in info.descriptors):
        raise SifSignError(f"{path}: the SIF has no signature (unsigned image)",
                           "sign it: imagekit sign FILE --key KEY")
    with open(path, "rb") as fh:
        head = header_digest(fh.read(HEADER.size))
    groups = sorted({d.group_id for d in info.descriptors if d.group_id & ~GROUP_MASK})
    signers: list[str] = []
    for group_id in groups:
        held, problems = _verify_group(path, info, group_id, head, trust, when)
        if not held:
            number = group_id & ~GROUP_MASK
            why = "; ".join(problems) or "no signature object covers it (apptainer verify refuses it too)"
            raise SifSignError(f"{path}: the SIF's signature does not hold for object group {number}: {why}",
                               f"accepted signers: {trust.describe()}")
        signers += [s for s in held if s not in signers]
    objects = group(info)
    sbom = next((info.read(d) for d in objects if d.datatype == DATA_SBOM), None)
    prov = next((info.read(d) for d in objects if d.datatype == DATA_GENERIC_JSON and d.name == PROVENANCE_NAME),
                None)
    return SifVerdict(signers, sum(len(group(info, g)) for g in groups), sbom, prov)


def _verify_group(path: Path, info: SifInfo, group_id: int, head: str, trust: Trust,
                  when: dt.datetime | None) -> tuple[list[str], list[str]]:
    """(labels of the usable keys whose signature over object group ``group_id`` holds, what is wrong
    with each one that does not)."""
    objects = group(info, group_id)
    low = objects[0].id
    current = {d.id: d for d in objects}
    by_id = {k.key.keyid: k for k in trust.keys}
    problems = []
    for sig in signatures(info, group_id):
        if sig.size > MAX_SIGNATURE_OBJECT:
            problems.append(f"signature object {sig.id} is {sig.size} bytes, more than imagekit reads")
            continue
        try:
            env = dsse.parse(info.read(sig), f"{path}: signature object {sig.id}")
        except dsse.EnvelopeError as exc:
            problems.append(exc.message)
            continue
        if env.payload_type != METADATA_TYPE:
            problems.append(f"signature object {sig.id} is a {env.payload_type!r} envelope")
            continue
        keys = env.signed_by([k.key for k in trust.keys])
        refused = [why for k in keys if (why := trust.unusable(by_id[k.keyid], when))]
        usable = [by_id[k.keyid] for k in keys if trust.unusable(by_id[k.keyid], when) is None]
        if not usable:
            ids = sorted({kid for kid, _ in env.signatures if kid})
            problems.append(f"signature object {sig.id}: " + ("; ".join(refused) if refused else
                            f"signed by {', '.join(ids) or 'an unknown key'}, not by an accepted key"))
            continue
        try:
            md = untrusted_json.loads(env.payload)
            listed = {o["relativeId"] + low: o for o in md["objects"]}
            signed_head = md["header"]["digest"]
        except (ValueError, KeyError, TypeError):
            problems.append(f"signature object {sig.id}: its signed metadata is not SIF metadata")
            continue
        if signed_head != head:
            problems.append("the SIF header (launch script, magic, version or ID) changed after signing")
            continue
        if set(listed) != set(current):
            problems.append(f"objects {sorted(set(current) ^ set(listed))} were added or removed after signing")
            continue
        changed = [i for i, d in current.items()
                   if descriptor_digest(d, low) != listed[i].get("descriptorDigest")
                   or object_digest(path, d) != listed[i].get("objectDigest")]
        if changed:
            names = ", ".join(f"{i} ({_kind(current[i])})" for i in changed)
            problems.append(f"object {names} changed after signing")
            continue
        return [k.label() for k in usable], problems
    return [], problems


def _kind(d: Descriptor) -> str:
    return {0x4001: "definition file", 0x4004: "root file system", 0x4006: d.name or "JSON",
            DATA_SBOM: "SBOM"}.get(d.datatype, f"type {d.datatype:#x}")
