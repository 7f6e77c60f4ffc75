"""``imagekit pull``: fetch the .sqsh/.sif pushed beside an image, verified."""

from __future__ import annotations

import sys

import click

from imagekit.export import formats
from imagekit.export.artifacts import ArtifactPull, pull_artifact
from imagekit.util import terminal


def _progress(quiet: bool):
    if quiet:
        return None
    import time

    state = {"last": 0.0}

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - state["last"] < (0.5 if sys.stderr.isatty() else 10):
            return
        state["last"] = now
        line = f"pulled {done / (1 << 20):,.1f} / {total / (1 << 20):,.1f} MiB"
        if sys.stderr.isatty():
            click.echo("\r" + line + ("\n" if done >= total else ""), file=terminal.unescaped(sys.stderr), nl=False)
        else:
            click.echo(line, err=True)

    return report


@click.command()
@click.argument("reference", metavar="REF")
@click.option("--to", "to", type=click.Choice(list(formats.FORMATS)), required=True,
              help="Which export: Enroot/Pyxis squashfs or Apptainer SIF.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="Output file.")
@click.option("--preset", default=None, help="Only an export made with this preset (default: any; "
                                              "the newest listed wins).")
@click.option("--force", is_flag=True, help="Replace an existing output file.")
@click.option("--no-space-check", is_flag=True, help="Skip the free-space check.")
@click.option("--platform", metavar="OS/ARCH", help="For a multi-platform REF: that platform's export "
                                                    "(default: this machine's).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def pull(reference, to, output, preset, force, no_space_check, platform, as_json, quiet):
    """Fetch the export pushed beside the image REF names, and verify its digest.

    REF is any form Pyxis and Enroot take: REGISTRY#REPO:TAG,
    docker://[USER@]REGISTRY#REPO[:TAG|@sha256:…], REGISTRY/REPO:TAG. It is
    resolved to its manifest digest (this machine's platform for a
    multi-platform image), and the artifact whose subject is that digest is
    downloaded, hashed while streaming, and renamed to FILE only if it
    matches. Credentials: Enroot's $ENROOT_CONFIG_PATH/.credentials, then
    Docker's config.json.

    \b
    Exit codes: 4 registry error, 5 no such artifact (push one with
    `imagekit push IMAGE --to REF --with enroot`), 6 digest mismatch,
    7 credentials missing or rejected.

    \b
    Examples:
      imagekit pull 127.0.0.1:5000#hpc/mpi:1.0 --to enroot -o mpi.sqsh
      srun --container-image=./mpi.sqsh ./app
      imagekit pull docker://registry.example.org#hpc/mpi@sha256:<hex> --to sif -o mpi.sif --json
      imagekit pull 127.0.0.1:5000#hpc/mpi:1.0 --to enroot --platform linux/arm64 -o mpi-arm64.sqsh
    """
    wanted = ArtifactPull(to, preset=preset, force=force, check_space=not no_space_check, platform=platform)
    result = pull_artifact(reference, wanted, output, progress=_progress(quiet))
    if as_json:
        click.echo(result.to_json())
    else:
        click.echo(f"{result.path}  {result.bytes} bytes  sha256:{result.sha256}  "
                   f"({result.format}, {result.preset or 'preset unknown'}, artifact {result.artifact})")
