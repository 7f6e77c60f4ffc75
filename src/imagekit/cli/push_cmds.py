"""``imagekit push``: a thin wrapper over imagekit.export.push, .artifacts and .signing."""

from __future__ import annotations

import click

from imagekit.attest import keys
from imagekit.util import platforms
from imagekit.cli.options import progress_printer
from imagekit.util.errors import UsageError
from imagekit.export import signing
from imagekit.export import artifacts as art
from imagekit.export import push as push_mod

# --with names that are signed statements rather than exports (they need --sign KEY; --sign pushes both).
STATEMENTS = ("sbom", "provenance")


@click.command()
@click.argument("images", metavar="IMAGE...", nargs=-1, required=True)
@click.option("--to", "to", metavar="REGISTRY/REPO[:TAG]",
              help="Where to push (default: IMAGE's own name, which must start with a registry; "
                   "required for several platforms).")
@click.option("--platform", "platform_list", multiple=True, metavar="OS/ARCH[,OS/ARCH]",
              help="Push IMAGE's build for each of these platforms (its local tags: imagekit/x:latest, "
                   "imagekit/x:latest-arm64) under one reference, as an OCI image index.")
@click.option("--with", "with_", metavar="FORMATS",
              help="Also push these exports beside the image as OCI artifacts whose subject is the "
                   "image: enroot, sif or enroot,sif (per platform: each image's own manifest). "
                   "Exports the registry already has for this image and preset are not made again.")
@click.option("--preset", "presets", multiple=True, metavar="[FORMAT=]PRESET",
              help="Export preset for --with (enroot: fast (default), enroot, shared-fs, small, "
                   "none; sif: gzip-6 (default), gzip, zstd, fast); FORMAT=PRESET for one format, repeatable.")
@click.option("--sign", "sign_key", metavar="KEY", type=click.Path(dir_okay=False),
              help="Sign with this site key: the SIF inside, and the SBOM and provenance (subjects: the "
                   "manifest, the config and each export) pushed as referrers of the manifest.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def push(images, to, platform_list, with_, presets, sign_key, as_json, quiet):
    """Push an image to a registry; print its digest and the Pyxis/Enroot reference.

    With --with, the image's Enroot squashfs and/or SIF go beside it as OCI
    1.1 artifacts (subject = the image's manifest digest; on registries
    without the referrers API, listed in the index tagged sha256-<hex>), so
    that `imagekit pull` and the Pyxis importer fetch them instead of
    converting.

    Several IMAGEs (one per platform), or one IMAGE with --platform, go under
    one reference as an OCI image index: each image under TAG-ARCH first, its
    artifacts attached to its own manifest, the index under TAG last. A node
    pulling TAG (Pyxis, Enroot, Docker) gets its own architecture's image; a
    push that fails half-way leaves no index naming a missing manifest. An
    IMAGE may also be a reference already pushed into the same repository
    (docker://REGISTRY/REPO:TAG-arm64, by a native arm64 builder): the index
    names it as it is (its artifacts are those its own push attached).
    Exit codes: 2 bad input, 3 engine, 4 registry refused, 6 digest mismatch,
    7 credentials.

    \b
    Examples:
      imagekit push imagekit/debian-mpi:latest --to 127.0.0.1:5000/hpc/mpi:1.0
      srun --container-image=127.0.0.1:5000#hpc/mpi:1.0 ./app
      imagekit push imagekit/debian-mpi:latest --to 127.0.0.1:5000/hpc/mpi:1.0 --with enroot,sif
      imagekit push imagekit/debian-mpi:latest --to 127.0.0.1:5000/hpc/mpi:1.0 --with enroot --preset shared-fs
      imagekit push imagekit/debian-mpi:latest --to 127.0.0.1:5000/hpc/mpi:1.0 --json
      imagekit push imagekit/debian-mpi:latest --to 127.0.0.1:5000/hpc/mpi:1.0 --with enroot,sif --sign site.key
      imagekit push imagekit/debian-mpi:latest --platform linux/amd64,linux/arm64 --to 127.0.0.1:5000/hpc/mpi:1.0
      imagekit push imagekit/debian-mpi:latest imagekit/debian-mpi:latest-arm64 --to 127.0.0.1:5000/hpc/mpi:1.0 --with enroot
      imagekit push docker://127.0.0.1:5000/hpc/mpi:1.0-amd64 docker://127.0.0.1:5000/hpc/mpi:1.0-arm64 --to 127.0.0.1:5000/hpc/mpi:1.0
    """
    import json

    log = None if quiet else (lambda line: click.echo(line, err=True))
    chosen = platforms.parse_list(platform_list)
    wanted = [f.strip() for f in (with_ or "").split(",") if f.strip()]
    statements = [f for f in wanted if f in STATEMENTS]
    if statements and not sign_key:
        raise UsageError(f"--with {','.join(statements)} pushes signed statements", "add --sign KEY")
    with_ = ",".join(f for f in wanted if f not in STATEMENTS)
    if presets and not with_:
        raise UsageError("--preset applies to the exports of --with", "add --with enroot,sif")
    if len(images) > 1 or chosen:
        if not to:
            raise UsageError("a multi-platform push needs --to REGISTRY/REPO[:TAG] (the index's reference)",
                             "e.g. --to 127.0.0.1:5000/hpc/mpi:1.0")
        if sign_key:
            # Each platform's statement must name its own manifest (never the index): sign the
            # per-platform pushes, then push the index over them.
            raise UsageError("--sign signs one platform's image; it does not yet sign a multi-platform push",
                             "push each platform with --sign (--to REPO:TAG-ARCH), then the index of those "
                             "references without --sign")
        _push_index(push_mod.platform_images(list(images), chosen), to, with_, presets, as_json, quiet, log)
        return
    image = images[0]
    key = keys.load_private(sign_key) if sign_key else None
    signed = None
    if not with_ and key is None:
        result = push_mod.push_image(image, to, log=None if as_json else log)
        artifacts = []
    else:
        formats = art.parse_formats(with_) if with_ else []
        chosen_presets = art.parse_presets(presets, formats)
        plan = art.ArtifactPlan.of(formats, chosen_presets, log=log,
                                   export_progress=None if quiet else progress_printer())
        if key is not None:
            result, artifacts, signed = signing.push_signed(image, to, plan, key)
        else:
            result, artifacts = art.push_with_artifacts(image, to, plan)
    if as_json:
        doc = json.loads(result.to_json())
        if with_:
            doc["artifacts"] = [a.to_dict() for a in artifacts]
        if signed is not None:
            doc["signed"] = signed.as_dict()
        click.echo(json.dumps(doc, sort_keys=True))
        return
    _print_pushed(result)
    for a in artifacts:
        _print_artifact(a)
    if signed is not None:
        click.echo(f"signed   {signed.signer}: SBOM and provenance {signed.bundle}")


def _print_pushed(result, what: str = "") -> None:
    """The lines a user copies from: the reference, its digest, the pinned form and Pyxis's spelling."""
    click.echo(f"pushed   {result.reference}{what}")
    click.echo(f"digest   {result.digest}")
    click.echo(f"pinned   {result.pinned}")
    click.echo(f"pyxis    {result.pyxis}")


def _print_artifact(a, indent: str = "") -> None:
    # The file's own sha256 first: what `sha256sum FILE` and `export` print for the same .sqsh/.sif. The
    # artifact manifest's digest (which `pull` calls "artifact") was the only one shown (review 4).
    click.echo(f"{indent}{a.format:<8} file sha256:{a.file_sha256.removeprefix('sha256:')}  ({a.preset}, {a.bytes} "
               f"bytes)")
    click.echo(f"{indent}{'':<8} artifact {a.digest}  "
               f"({'already there' if a.listed_by == 'existing' else 'listed by ' + a.listed_by})")


def _push_index(images: list[str], to: str, with_: str | None, presets: tuple, as_json: bool, quiet: bool,
                log) -> None:
    import json

    made: dict = {}
    if with_:
        formats = art.parse_formats(with_)
        plan = art.ArtifactPlan.of(formats, art.parse_presets(presets, formats), log=log,
                                   export_progress=None if quiet else progress_printer())
        result, made = art.push_platforms_with_artifacts(images, to, plan)
    else:
        result = push_mod.push_platforms(images, to, log=None if as_json else log)
    if as_json:
        doc = result.to_dict()
        for one in doc["platforms"]:
            one["artifacts"] = [a.to_dict() for a in made.get(one["platform"], [])]
        click.echo(json.dumps(doc, sort_keys=True))
        return
    _print_pushed(result, f" (OCI image index of {len(result.platforms)} platforms)")
    for one in result.platforms:
        click.echo(f"{one.platform:<14} {one.digest}  {one.reference}  ({one.image})")
        for a in made.get(one.platform, []):
            _print_artifact(a, "  ")
