"""Catalog commands: stacks and matrix, the listings of every stack.

They live apart from ``render`` and ``show`` (:mod:`imagekit.cli.stack_cmds`) because they need the
version checker and the build stage (its platforms), which ``imagekit render`` must not load.
"""

from __future__ import annotations

import json
import os

import click

from imagekit import ci_matrix, sources
from imagekit import stack as stack_mod
from imagekit import versions
from imagekit.cli.options import MIRROR, current_site
from imagekit.util.errors import StackError, UsageError


@click.command()
@click.argument("refs", nargs=-1, metavar="[STACK]...")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option("--outdated", is_flag=True,
              help="compare every pin with what pip's configured package index (and the site mirror, or "
                   "imagekit's pins) serves; exit 2 when a pin is not served")
@click.option("--upstream", is_flag=True,
              help="also ask upstream's release feeds (GitHub) for source-built components, where this machine "
                   "may reach them; without it, imagekit's own dated upstream data is used")
@MIRROR
def stacks(refs: tuple[str, ...], as_json: bool, outdated: bool, upstream: bool, mirror: str | None) -> None:
    """List the stacks (site directories first, then the shipped ones), their matrix variants,
    and where each came from; with --outdated, what each pins and what is newer.

    \b
    Example:
      imagekit stacks
      IMAGEKIT_STACKS_PATH=/site/stacks imagekit stacks --json | jq -r '.[] | .stack + " " + .from'
      imagekit stacks --outdated                       # every stack: pinned, newest served, behind
      imagekit stacks --outdated debian-cuda --mirror /site/mirror --json
      imagekit stacks --outdated stacks/debian-cuda.yaml  # before a build: exit 2 if a pin is not served
    """
    if outdated:
        _outdated(refs, as_json, mirror, upstream=upstream)
        return
    rows, site = [], current_site()
    for path, directory in stack_mod.available(site):
        origin = "shipped" if directory.resolve() == stack_mod.SHIPPED_DIR else str(directory)
        try:
            variants = stack_mod.load_all(path, site=site)
        except StackError as exc:
            # One broken stack in a site directory is listed with its error; the others stay usable.
            rows.append({"stack": path.stem, "file": str(path), "from": origin, "description": "",
                         "variants": [], "error": exc.message + (f" (fix: {exc.hint})" if exc.hint else "")})
            continue
        rows.append({"stack": variants[0].stack_name, "file": str(path), "from": origin,
                     "description": variants[0].description,
                     "variants": [v.name for v in variants] if variants[0].variant else []})
    for path in stack_mod.pins_files(site):
        # Not a stack: listed so that a site sees where its pins come from, never as a broken stack.
        used = site.pins_file is not None and site.pins_file.resolve() == path.resolve()
        rows.append({"stack": None, "file": str(path), "from": str(path.parent), "pins": True, "in_force": used,
                     "description": "the site pins file in force" if used else
                     f"a site pins file, not in force: --site {path} (or $IMAGEKIT_SITE) uses it"})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        if row.get("pins"):
            click.echo(f"{os.path.basename(row['file']):<14} {row['description']}  [{row['from']}]")
            continue
        if row.get("error"):
            click.echo(f"{row['stack']:<14} BROKEN: {row['error']}  [{row['from']}]")
            continue
        click.echo(f"{row['stack']:<14} {row['description']}  [{row['from']}]")
        for name in row["variants"]:
            click.echo(f"  {name}")


@click.command()
@click.argument("refs", nargs=-1, metavar="[STACK]...")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option("--strict", is_flag=True, help="a gate: a pin that is not served is an error naming file, line and key, exit 2 "
                   "(bad input, as `stacks --outdated`); without it, a report (exit 0)")
@click.option("--upstream", is_flag=True,
              help="also ask upstream's release feeds (GitHub) for source-built components, where this machine "
                   "may reach them; without it, imagekit's own dated upstream data is used")
@MIRROR
def outdated(refs: tuple[str, ...], as_json: bool, strict: bool, upstream: bool, mirror: str | None) -> None:
    """Show how far each pin lags what is served: PyPI (pip's configured index) for wheels and NCCL, the
    site mirror or imagekit's pins for upstream releases, the newest upstream release for distro packages,
    and whether each base image is pinned by digest. A source-built pin is also held to upstream: the newest
    release in imagekit's dated upstream data, and with --upstream what upstream's release feed lists; each
    row says which, so a mirror that has not caught up cannot make a pin look current. A report (exit 0)
    unless --strict.

    \b
    Example:
      imagekit outdated                                   # every stack, as CI prints it
      imagekit outdated debian-cuda --mirror /site/mirror --json
      imagekit outdated --strict ./site-stack.yaml       # exit 2 (bad input) if a pin is not served
      imagekit outdated debian-cuda --upstream            # ask upstream's release feeds too
    """
    _outdated(refs, as_json, mirror, strict=strict, upstream=upstream)


def _outdated(refs: tuple[str, ...], as_json: bool, mirror: str | None, strict: bool = True,
              upstream: bool = False) -> None:
    site = current_site()
    paths = [stack_mod.find(ref, site)[0] for ref in refs] if refs else [p for p, _ in stack_mod.available(site)]
    if mirror:
        mirror = sources.resolve_mirror(None, None, mirror)
    rows = []
    for path in paths:
        variants = stack_mod.load_all(path, site=site)
        rows += versions.report(variants, mirror or variants[0].mirror, upstream)
    missing = [r for r in rows if r.behind == "not served"]
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        current = None
        width = max([10] + [len(r.pinned) for r in rows])
        for row in rows:
            if row.stack != current:
                current = row.stack
                click.echo(f"{row.stack}")
                click.echo(f"  {'component':<13} {'pinned':<{width}} {'newest':<10} {'behind':<11} from")
            click.echo(f"  {row.component:<13} {row.pinned:<{width}} {row.newest or '-':<10} {row.behind:<11} "
                       f"{row.where} ({row.package})"
                       + (f"; upstream {row.upstream} from {row.upstream_from}" if row.upstream else ""))
        lagging = [r for r in rows if r.behind == "yes"]
        click.echo(f"{len(lagging)} of {len(rows)} pins behind what is served or released upstream"
                   + (f"; {len(missing)} not served" if missing else ""))
    if missing and strict:
        lines = [f"{r.file}:{r.line}: {r.key}: the {r.where} does not serve {r.package} {r.pinned}"
                 + (f" (newest: {r.newest})" if r.newest else " (nor any version of it)") for r in missing]
        raise UsageError("\n".join(lines), "pin a version that is served (the newest is listed above)")


# The CI templates hand a site's inputs to the matrix as these variables (GitLab exports every CI/CD
# variable; the GitHub workflow maps its inputs onto them), so neither template holds the logic.
@click.command()
@click.argument("refs", nargs=-1, metavar="[STACK]...", envvar="IMAGEKIT_BUILD_STACKS")
@click.option("--json", "as_json", is_flag=True, help="a JSON list for CI (GitHub Actions matrix include)")
@click.option("--site-only", is_flag=True, envvar="IMAGEKIT_SITE_ONLY",
              help="only the stacks of the site's directories (--stacks-dir, $IMAGEKIT_STACKS_PATH), not the "
                   "shipped ones")
@click.option("--platform", "platform_list", multiple=True, metavar="OS/ARCH[,OS/ARCH]", envvar="IMAGEKIT_PLATFORMS",
              help="only rows for these platforms (linux/amd64, linux/arm64; comma-separated or repeated)")
@click.option("--validate", "validate", multiple=True, metavar="ROW=SYSTEM", envvar="IMAGEKIT_VALIDATE",
              help="give the rows ROW names (a row id, variant or stack) a validate leg on SYSTEM's model "
                   "(its `system` key; several pairs: repeated, or comma- or space-separated)")
@click.option("--runner", "runners", multiple=True, metavar="ARCH=LABEL[,LABEL]", envvar="IMAGEKIT_RUNNERS",
              help="the labels (GitHub) or tags (GitLab) of the runners that build ARCH's rows (their `runner` "
                   "key; default: [ARCH]); several: repeated or space-separated")
@click.option("--gpu-runner", "gpu_runners", multiple=True, metavar="ARCH=LABEL[,LABEL]",
              envvar="IMAGEKIT_GPU_RUNNERS",
              help="the same for the validate legs (their `gpu_runner` key; default: [gpu, ARCH])")
@click.option("--buildable-here", is_flag=True, help="only stacks whose base images are local")
def matrix(refs: tuple[str, ...], as_json: bool, site_only: bool, platform_list: tuple[str, ...],
           validate: tuple[str, ...], runners: tuple[str, ...], gpu_runners: tuple[str, ...],
           buildable_here: bool) -> None:
    """List every stack x variant x arch to build, for CI to consume.

    A stack whose base.arch lists several architectures gives one row for each
    (id: the variant's name, with -arm64 for its arm64 row; index: true, and
    push_suffix -amd64/-arm64 for the per-arch tags an index then joins).
    STACK names limit the rows to those stacks; --site-only to the site's
    directories. Each option also comes from the environment variable the
    table below names (how the CI templates pass a site's inputs). A row's file is relative to the working directory, or the
    stack's name, so that every runner's checkout resolves it. A row's system
    is the model its validate leg is judged by and runs on (a runner label):
    --validate ROW=SYSTEM, or ROW alone for the model whose `stacks:` lists it.
    --buildable-here keeps the offline stacks for this machine's architecture.

    \b
    Example:
      imagekit matrix
      echo "include=$(imagekit matrix --json)" >> "$GITHUB_OUTPUT"
      imagekit --stacks-dir site matrix --site-only --platform linux/amd64 --json
      imagekit matrix debian-mpi --validate debian-mpi=dgx-h100 --json
      imagekit matrix --runner "x86_64=self-hosted,linux,x64 aarch64=self-hosted,linux,arm64" --json
    """
    request = ci_matrix.MatrixRequest(stacks=refs, site_only=site_only, platforms=platform_list,
                                      validate=validate, runners=runners, gpu_runners=gpu_runners,
                                      buildable_here=buildable_here, site=current_site())
    rows = ci_matrix.rows(request)
    if as_json:
        click.echo(json.dumps(rows, separators=(",", ":")))
        return
    for row in rows:
        click.echo(f"{row['id']:<28} {row['arch']:<8} {row['file']}" + (f"  validate: {row['system']}"
                                                                          if row["system"] else ""))
