"""``imagekit keygen|sign|verify|sbom|inspect``: thin wrappers over imagekit.export.signing/verifying."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from imagekit.attest import CYCLONEDX_PREDICATE, bundle, keys, sbom, spdx
from imagekit.attest.statement import parse as parse_statement
from imagekit.util.errors import UsageError, VerificationError
from imagekit.export import signing, verifying
from imagekit.export.image_source import open_source
from imagekit.export.sif_sign import DATA_SBOM
from imagekit.image_facts import is_file_image
from imagekit.sif_reader import read_sif


def _say(quiet: bool):
    return None if quiet else (lambda m: click.echo(m, err=True))


@click.command()
@click.argument("name", metavar="NAME")
@click.option("--type", "kind", type=click.Choice(keys.KINDS), default="ecdsa-p256", show_default=True,
              help="ECDSA P-256 (what cosign and Apptainer use by default) or Ed25519")
@click.option("--force", is_flag=True, help="replace NAME.key and NAME.pub")
def keygen(name: str, kind: str, force: bool) -> None:
    """Make a site signing key: NAME.key (private, mode 0600) and NAME.pub.

    The private key is encrypted when IMAGEKIT_KEY_PASSWORD is set (and read
    with it). Give NAME.pub to the nodes (the policy's `keys:`) and to
    `apptainer verify --key`; keep NAME.key where only CI reads it.

    \b
    Example:
      imagekit keygen /secure/site-2026          # /secure/site-2026.key, /secure/site-2026.pub
      imagekit keygen ci --type ed25519
    """
    private = keys.generate(kind)
    key_path, pub_path = keys.write_pair(private, name, force=force)
    click.echo(f"{keys.keyid(private.public_key())}  {kind}  private {key_path}  public {pub_path}")


@click.command()
@click.argument("target")
@click.option("--key", "key_path", required=True, metavar="KEY", type=click.Path(dir_okay=False),
              help="the site's private key (ECDSA P-256 or Ed25519; IMAGEKIT_KEY_PASSWORD if encrypted)")
@click.option("--json", "as_json", is_flag=True, help="print what was signed as JSON")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
def sign(target: str, key_path: str, as_json: bool, quiet: bool) -> None:
    """Sign an image's SBOM and provenance: an engine image, a .sqsh or .sif, or a pushed image.

    \b
    TARGET                       what is written
    IMAGE (engine)               the statements, kept for its config digest ($IMAGEKIT_ATTESTATIONS)
    FILE.sqsh                    FILE.sqsh.intoto.jsonl beside it
    FILE.sif                     SBOM, provenance and a signature object inside (apptainer verify
                                 --key checks it), and FILE.sif.intoto.jsonl
    docker://REGISTRY/REPO:TAG   the statements as referrers of the manifest (this platform's)

    \b
    Examples:
      imagekit sign imagekit/debian-mpi:latest --key site.key
      imagekit sign mpi.sif --key site.key && apptainer verify --key site.pub mpi.sif
      imagekit sign docker://127.0.0.1:5000/hpc/mpi:1 --key site.key
    """
    key = keys.load_private(key_path)
    log = _say(quiet)
    path = Path(target)
    if path.is_file():
        result = signing.sign_file(path, key, log=log)
    elif is_file_image(target):
        raise UsageError(f"{target}: no such file")
    elif target.startswith("docker://") or "#" in target:
        result = signing.sign_reference(target, key, log=log)
    else:
        result = signing.sign_engine_image(open_source(target), key, log=log)
    if as_json:
        click.echo(json.dumps(result.as_dict(), sort_keys=True))
        return
    click.echo(f"signed {result.target} with {result.signer}")
    for s in result.subjects:
        click.echo(f"  {s.kind:<13} sha256:{s.sha256}" + (f"  {s.platform}" if s.platform else ""))
    click.echo(f"  statements: {result.bundle}")


POLICY = click.option("--policy", "policy_file", metavar="FILE", type=click.Path(dir_okay=False),
                      help="site policy file (default: $IMAGEKIT_POLICY): its rule for TARGET names the signers")
KEYS = click.option("--key", "key_paths", multiple=True, metavar="PUB", type=click.Path(dir_okay=False),
                    help="accepted public key (repeatable); instead of a policy")
PLATFORM = click.option("--platform", metavar="OS/ARCH", help="for a reference to a multi-platform index: which "
                                                               "image (default: this machine's)")


@click.command()
@click.argument("target")
@KEYS
@POLICY
@PLATFORM
@click.option("--json", "as_json", is_flag=True, help="print the verdict as JSON")
def verify(target: str, key_paths: tuple[str, ...], policy_file: str | None, platform: str | None,
           as_json: bool) -> None:
    """Check the signatures of a .sif, a .sqsh, an engine image or a pushed image.

    A SIF's signature object is checked as `apptainer verify --key` checks
    it (one changed byte of its root file system fails); a .sqsh needs
    FILE.sqsh.intoto.jsonl beside it naming its sha256; a reference needs
    statements listed for its manifest. Exit 0 when verified, 12 when not.

    \b
    Examples:
      imagekit verify mpi.sif --key site.pub
      imagekit verify mpi.sqsh --policy /etc/imagekit/policy.yaml
      imagekit verify docker://127.0.0.1:5000/hpc/mpi:1 --key site.pub --json
      imagekit verify imagekit/debian-mpi:latest --key site.pub
    """
    verdict = verifying.verify(target, keys=list(key_paths), policy_file=policy_file, platform=platform)
    if as_json:
        click.echo(json.dumps(verdict.as_dict(), sort_keys=True))
        return
    if verdict.kind == "unsigned":
        click.echo(f"{target}: accepted unsigned by the policy")
        return
    click.echo(f"verified {target} ({verdict.kind}, {verdict.digest})")
    click.echo(f"  signed by {', '.join(verdict.signers)}")
    for note in verdict.notes:
        click.echo(f"  {note}")


def _sbom_of(target: str, key_paths: tuple[str, ...], policy_file: str | None, log) -> tuple[dict, str]:
    """(CycloneDX document, where it came from)."""
    path = Path(target)
    if key_paths or policy_file:
        verdict = verifying.verify(target, keys=list(key_paths), policy_file=policy_file)
        if verdict.sbom is None:
            raise VerificationError(f"{target}: verified, but no signed SBOM was found")
        return verdict.sbom, "signed"
    if path.is_file():
        with open(path, "rb") as fh:
            head = fh.read(64)
        if head[32:41] == b"SIF_MAGIC":
            info = read_sif(path)
            found = next((d for d in info.descriptors if d.datatype == DATA_SBOM), None)
            if found is not None:
                return json.loads(info.read(found)), "the SIF's SBOM object (not verified: give --key)"
        for env in bundle.read(bundle.beside(path)):
            st = parse_statement(env.payload, str(path))
            if st.predicate_type == CYCLONEDX_PREDICATE:
                return st.predicate, f"{bundle.beside(path).name} (not verified: give --key)"
        record, found_inv, _ = signing.file_record(path)
        return json.loads(sbom.to_json(sbom.build(record, found_inv))), "read from the file now"
    if is_file_image(target):
        raise UsageError(f"{target}: no such file")
    described = signing.describe(open_source(target), log=log)
    return json.loads(described.sbom), "read from the image now"


@click.command("sbom")
@click.argument("target")
@click.option("--format", "fmt", type=click.Choice(sbom.FORMATS), default="cyclonedx", show_default=True,
              help="CycloneDX 1.6 JSON, or its SPDX 2.3 JSON export")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="write it here (default: stdout)")
@KEYS
@POLICY
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
def sbom_cmd(target: str, fmt: str, output: str | None, key_paths: tuple[str, ...], policy_file: str | None,
             quiet: bool) -> None:
    """Print an image's SBOM: the stack's components and its dpkg and pip packages.

    TARGET is an engine or registry image (read now), or a .sif/.sqsh (the
    SBOM it carries, else read from its files). With --key or --policy only a
    signed SBOM is printed.

    \b
    Examples:
      imagekit sbom imagekit/debian-mpi:latest > mpi.cdx.json
      imagekit sbom mpi.sif --key site.pub --format spdx -o mpi.spdx.json
      imagekit sbom docker://127.0.0.1:5000/hpc/mpi:1
    """
    doc, where = _sbom_of(target, key_paths, policy_file, _say(quiet))
    data = spdx.from_cyclonedx(doc) if fmt == "spdx" else json.dumps(doc, indent=2, sort_keys=True).encode()
    if not quiet:
        click.echo(f"SBOM of {target}: {where}", err=True)
    if output:
        Path(output).write_bytes(data + b"\n")
    else:
        sys.stdout.buffer.write(data + b"\n")


@click.command()
@click.argument("target")
@KEYS
@POLICY
@PLATFORM
@click.option("--json", "as_json", is_flag=True, help="print it as JSON")
def inspect(target: str, key_paths: tuple[str, ...], policy_file: str | None, platform: str | None,
            as_json: bool) -> None:
    """Show who signed an image, what the signatures are about, and its SBOM in brief.

    \b
    Examples:
      imagekit inspect mpi.sif --key site.pub
      imagekit inspect docker://127.0.0.1:5000/hpc/mpi:1 --policy /etc/imagekit/policy.yaml --json
    """
    verdict = verifying.verify(target, keys=list(key_paths), policy_file=policy_file, platform=platform)
    summary = sbom.summary(verdict.sbom) if verdict.sbom else None
    build = ((verdict.provenance or {}).get("buildDefinition") or {})
    run = ((verdict.provenance or {}).get("runDetails") or {})
    doc = {**verdict.as_dict(), "sbom": summary,
           "provenance": {"builder": (run.get("builder") or {}).get("id"),
                          "stack": ((build.get("externalParameters") or {}).get("stack") or {}).get("name"),
                          "recipe_sha256": ((build.get("externalParameters") or {}).get("recipe") or {}).get("sha256"),
                          "sources": [d.get("uri") for d in build.get("resolvedDependencies") or []],
                          "finished": (run.get("metadata") or {}).get("finishedOn")} if verdict.provenance else None}
    if as_json:
        click.echo(json.dumps(doc, sort_keys=True))
        return
    click.echo(f"{target}  ({verdict.kind}, {verdict.digest})")
    click.echo(f"  signed by   {', '.join(verdict.signers) or 'nobody (accepted unsigned)'}")
    for s in verdict.subjects:
        click.echo(f"  subject     {s.kind:<13} sha256:{s.sha256[:20]}…" + (f"  {s.platform}" if s.platform else "")
                   + (f"  ({s.preset})" if s.preset else ""))
    prov = doc["provenance"]
    if prov:
        click.echo(f"  built by    {prov['builder']}  stack {prov['stack'] or '?'}  finished {prov['finished'] or '?'}")
        if prov["recipe_sha256"]:
            click.echo(f"  recipe      sha256:{prov['recipe_sha256']}")
        for uri in prov["sources"]:
            click.echo(f"  source      {uri}")
    if summary:
        click.echo(f"  SBOM        {summary['format']}: {summary['components']} components "
                   f"({summary['deb']} deb, {summary['pypi']} pypi); stack: {', '.join(summary['stack']) or '-'}")
