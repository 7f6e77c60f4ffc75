"""``imagekit export``: a thin wrapper over imagekit.export.

It loads what a store hit uses and no more (tests/test_hit_imports.py holds the set): ``--sign``'s
modules (the key's cryptography, the SBOM's) are named in :data:`SIGNER` and load only when asked."""

from __future__ import annotations

from pathlib import Path

import click

from imagekit.util import lazy
from imagekit.cli.options import progress_printer
from imagekit.export import ExportRequest, export_image, formats, presets
from imagekit.export.image_source import open_source

# export --sign KEY: (key path, log) -> sign(result, source); reads the key at once (a bad key fails
# before the export), and describes and signs the export when called.
SIGNER = "imagekit.export.signing:export_signer"


@click.command()
@click.argument("image")
@click.option("--to", "to", type=click.Choice(list(formats.FORMATS)), required=True,
              help="Output format: Enroot/Pyxis squashfs or Apptainer SIF.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Output file (default: IMAGE with / and : as +, like Enroot, in the current dir).")
@click.option("--preset", default=None,
              help="Compression (docs/export.md has the measurements). enroot: fast "
                   "(zstd-3, 128 KiB blocks; default), enroot (Enroot's own -comp lzo -noD), "
                   "shared-fs (zstd-3, 1 MiB blocks), small (zstd-19, 1 MiB), none. "
                   "sif: gzip-6 (default), gzip (gzip-9, Apptainer's own), zstd (zstd-15), fast (zstd-3, as the "
                   ".sqsh default; hosts must read zstd).")
@click.option("--squash-opt", "squash_opts", multiple=True, metavar="OPT",
              help="Extra option for the squashfs tool, repeatable (e.g. --squash-opt=-b "
                   "--squash-opt=256K).")
@click.option("--tool", type=click.Choice(["auto", *presets.TOOLS]), default="auto",
              show_default=True, help="Squashfs tool reading the stream.")
@click.option("--via", type=click.Choice(formats.vias()), default="native", show_default=True,
              help="SIF only: write natively, or run apptainer/singularity from PATH.")
@click.option("--force", is_flag=True, help="Replace an existing output file.")
@click.option("--no-space-check", is_flag=True, help="Skip the free-space check.")
@click.option("--store", "store_dir", metavar="DIR", envvar="IMAGEKIT_STORE",
              help="Export store (default: $IMAGEKIT_STORE, else ~/.cache/imagekit/store).")
@click.option("--no-store", is_flag=True, help="Convert straight to the output, bypassing the store.")
@click.option("--platform", metavar="OS/ARCH[/VARIANT]",
              help="Registry and OCI sources: the image of a multi-platform index to convert "
                   "(default: this machine's).")
@click.option("--sign", "sign_key", metavar="KEY", type=click.Path(dir_okay=False),
              help="Sign it with this site key: OUTPUT.intoto.jsonl beside it (SBOM and provenance); a SIF also "
                   "gets an SBOM object and a signature object inside (apptainer verify --key).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def export(image, to, output, preset, squash_opts, tool, via, force, no_space_check, store_dir, no_store,
           platform, sign_key, as_json, quiet):
    """Export an image as an Enroot squashfs or a SIF file, streaming.

    IMAGE is a local engine image, or, with no engine needed:
    docker://REGISTRY/REPO[:TAG] or REGISTRY#REPO[:TAG] (a registry; Enroot's
    and Docker's credentials), oci:DIR[:TAG] (an OCI layout), oci-archive:FILE[:TAG],
    docker-archive:FILE[:REPO:TAG] (a `docker save` tarball); docker-daemon:IMAGE
    forces the engine. The engine's flattened export, or the image's layers merged
    (whiteouts, opaque directories, hard links; each layer checked against its
    digest), is streamed into sqfstar/tar2sqfs: no unpacked copy of the root
    filesystem is written. The file appears only when complete;
    SOURCE_DATE_EPOCH makes the output reproducible.

    The file is kept in the export store, keyed by image ID, format, preset
    and options, and the output is a hard link to it (a copy on another file
    system): exporting an unchanged image again is a lookup, and concurrent
    exports of one image convert it once.

    \b
    Examples:
      imagekit export imagekit/debian-mpi:latest --to enroot -o mpi.sqsh
      srun --container-image=./mpi.sqsh --mpi=pmix ./app
      imagekit export imagekit/debian-mpi:latest --to enroot --preset shared-fs -o /lustre/img/mpi.sqsh
      imagekit export imagekit/debian-mpi:latest --to enroot --preset enroot -o mpi.sqsh
      imagekit export imagekit/debian-mpi:latest --to sif -o mpi.sif --json
      imagekit export imagekit/debian-mpi:latest --to enroot --store /lustre/imagekit-store -o mpi.sqsh
      imagekit export imagekit/debian-mpi:latest --to enroot --no-store -o mpi.sqsh
      imagekit export docker://registry.example:5000/hpc/mpi:1 --to enroot -o mpi.sqsh
      imagekit export 'registry.example:5000#hpc/mpi:1' --to sif --platform linux/arm64
      imagekit export oci-archive:mpi-oci.tar --to enroot -o mpi.sqsh
      imagekit export docker-archive:mpi.tar:hpc/mpi:1 --to sif -o mpi.sif
      imagekit export imagekit/debian-mpi:latest --to sif -o mpi.sif --sign site.key
    """
    request = ExportRequest(to, preset=preset, squash_opts=squash_opts, tool=tool, via=via, force=force,
                            check_space=not no_space_check, platform=platform)
    notice = None if quiet else (lambda message: click.echo(message, err=True))
    sign = lazy.load(SIGNER)(sign_key, notice) if sign_key else None      # a bad key fails before the export
    result = export_image(image, request, output, store=False if no_store else store_dir or None,
                          progress=None if quiet else progress_printer(), notice=notice,
                          for_signing=sign is not None)
    if sign is not None:
        signed = sign(result, open_source(image, platform=platform))
        result.sha256, result.bytes = signed.subjects[-1].sha256, Path(result.path).stat().st_size
        if notice:
            notice(f"signed with {signed.signer}: {signed.bundle}")
    if as_json:
        click.echo(result.to_json())
    else:
        source = (f", store hit ({result.output_is})" if result.store_hit
                  else f", stored ({result.output_is})" if result.store_entry else "")
        click.echo(f"{result.path}  {result.bytes} bytes  sha256:{result.sha256}  "
                   f"{result.seconds:.1f}s ({result.tool}, {result.compression}{source})")
