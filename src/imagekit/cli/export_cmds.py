"""``imagekit export`` and ``imagekit push``: thin wrappers over imagekit.export."""

from __future__ import annotations

import sys

import click


def _progress_printer():
    """Exported bytes on stderr: one updating line on a terminal, a line every 10 s otherwise."""
    import time

    tty = sys.stderr.isatty()
    state = {"last": time.monotonic()}

    def report(total: int, done: bool) -> None:
        mib = total / (1 << 20)
        if tty:
            click.echo(f"\rexported {mib:,.1f} MiB" + ("\n" if done else ""), err=True, nl=False)
        elif done or time.monotonic() - state["last"] >= 10:
            state["last"] = time.monotonic()
            click.echo(f"exported {mib:,.1f} MiB" + (" (done)" if done else ""), err=True)

    return report


@click.command()
@click.argument("image")
@click.option("--to", "to", type=click.Choice(["enroot", "sif"]), required=True,
              help="Output format: Enroot/Pyxis squashfs or Apptainer SIF.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Output file (default: IMAGE with / and : as +, like Enroot, in the current dir).")
@click.option("--preset", default=None,
              help="Compression (README 'Exporting' has the measurements). enroot: fast "
                   "(zstd-3, 128 KiB blocks; default), enroot (Enroot's own -comp lzo -noD), "
                   "shared-fs (zstd-3, 1 MiB blocks), small (zstd-19, 1 MiB), none. "
                   "sif: gzip (default), zstd.")
@click.option("--squash-opt", "squash_opts", multiple=True, metavar="OPT",
              help="Extra option for the squashfs tool, repeatable (e.g. --squash-opt=-b "
                   "--squash-opt=256K).")
@click.option("--tool", type=click.Choice(["auto", "sqfstar", "tar2sqfs"]), default="auto",
              show_default=True, help="Squashfs tool reading the stream.")
@click.option("--via", type=click.Choice(["native", "apptainer"]), default="native", show_default=True,
              help="SIF only: write natively, or run apptainer/singularity from PATH.")
@click.option("--force", is_flag=True, help="Replace an existing output file.")
@click.option("--no-space-check", is_flag=True, help="Skip the free-space check.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def export(image, to, output, preset, squash_opts, tool, via, force, no_space_check, as_json, quiet):
    """Export a local image as an Enroot squashfs or a SIF file, streaming.

    The engine's flattened export is streamed into sqfstar/tar2sqfs: no
    unpacked copy of the root filesystem is written. The file appears only
    when complete; SOURCE_DATE_EPOCH makes the output reproducible.

    \b
    Examples:
      imagekit export imagekit/debian-mpi:latest --to enroot -o mpi.sqsh
      srun --container-image=./mpi.sqsh --mpi=pmix ./app
      imagekit export imagekit/debian-mpi:latest --to enroot --preset shared-fs -o /lustre/img/mpi.sqsh
      imagekit export imagekit/debian-mpi:latest --to enroot --preset enroot -o mpi.sqsh
      imagekit export imagekit/debian-mpi:latest --to sif -o mpi.sif --json
    """
    from imagekit.export import export_image, squash

    if preset is None and to == "enroot":
        preset = squash.DEFAULT_PRESET
    result = export_image(image, to, output, preset=preset, squash_opts=squash_opts, tool=tool,
                          via=via, force=force, check_space=not no_space_check,
                          progress=None if quiet else _progress_printer())
    if as_json:
        click.echo(result.to_json())
    else:
        click.echo(f"{result.path}  {result.bytes} bytes  sha256:{result.sha256}  "
                   f"{result.seconds:.1f}s ({result.tool}, {result.compression})")


@click.command()
@click.argument("image")
@click.option("--to", "to", metavar="REGISTRY/REPO[:TAG]",
              help="Where to push (default: IMAGE's own name, which must start with a registry).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def push(image, to, as_json):
    """Push an image to a registry; print its digest and the Pyxis/Enroot reference.

    \b
    Examples:
      imagekit push imagekit/debian-mpi:latest --to 127.0.0.1:5000/hpc/mpi:1.0
      srun --container-image=127.0.0.1:5000#hpc/mpi:1.0 ./app
      imagekit push imagekit/debian-mpi:latest --to 127.0.0.1:5000/hpc/mpi:1.0 --json
    """
    from imagekit.export.push import push_image

    result = push_image(image, to, log=None if as_json else (lambda line: click.echo(line, err=True)))
    if as_json:
        click.echo(result.to_json())
    else:
        click.echo(f"pushed   {result.reference}")
        click.echo(f"digest   {result.digest}")
        click.echo(f"pinned   {result.pinned}")
        click.echo(f"pyxis    {result.pyxis}")
