"""Supply-chain records of an image: SBOM, provenance and their signatures, offline.

The model of what imagekit signs, with no engine, registry or file format in it (those are the
export stage's: :mod:`imagekit.export.signing`, :mod:`imagekit.export.sif_sign`,
:mod:`imagekit.export.attestations`, and the Pyxis importer's :mod:`imagekit.export.pyxis_policy`):

- :mod:`.keys`: site keys (ECDSA P-256 or Ed25519, PEM or OpenSSH), their key IDs;
- :mod:`.dsse`: DSSE envelopes, signed with securesystemslib, verified with ``cryptography``;
- :mod:`.statement`: in-toto v1 statements and their subjects (one platform's manifest and
  config digests, the ``.sqsh`` and ``.sif`` sha256);
- :mod:`.inventory`: the dpkg and pip inventories and the file list of a root filesystem;
- :mod:`.sbom`: the CycloneDX 1.6 SBOM (cyclonedx-python-lib) and its SPDX 2.3 export;
- :mod:`.provenance`: the SLSA provenance v1 predicate;
- :mod:`.bundle`: the ``.intoto.jsonl`` file of envelopes that travels beside a file;
- :mod:`.policy`: the site's policy file (signers per repository, revocations), fail closed;
- :mod:`.verifier`: verification of a bundle against keys or a policy rule.

docs/signing.md is the reference.
"""

# Media and predicate types, one place.
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"           # DSSE payloadType of an in-toto statement
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
CYCLONEDX_PREDICATE = "https://cyclonedx.org/bom"
CYCLONEDX_MEDIA_TYPE = "application/vnd.cyclonedx+json"
SPDX_MEDIA_TYPE = "application/spdx+json"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
BUNDLE_SUFFIX = ".intoto.jsonl"
POLICY_ENV = "IMAGEKIT_POLICY"      # the site policy file (the Pyxis importer's wrapper sets it)
