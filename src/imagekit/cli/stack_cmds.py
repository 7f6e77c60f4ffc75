"""Stack commands: show and render (``imagekit render`` loads only this module and the recipe layer;
the listings, ``stacks`` and ``matrix``, live in :mod:`imagekit.cli.catalog_cmds`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from imagekit import render as render_mod
from imagekit import sources
from imagekit import stack as stack_mod
from imagekit.util.atomic import write_text
from imagekit.cli.options import MIRROR, current_site

VARIANT = click.option("--variant", metavar="NAME", help="matrix variant (see `imagekit stacks`)")
PLATFORM = click.option("--platform", metavar="OS/ARCH",
                        help="the build for this platform (linux/amd64, linux/arm64) of a stack that offers "
                             "several (default: this machine's where offered)")
@click.command()
@click.argument("stack")
@VARIANT
@PLATFORM
@click.option("--diff-parent", is_flag=True, help="show what this stack changes from the stack it extends")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def show(stack: str, variant: str | None, platform: str | None, diff_parent: bool, as_json: bool) -> None:
    """Show the resolved stack: base, every component with version and source.

    Also the stack's own distro packages, every check the image gets, and
    where a site component came from. With --diff-parent: what the stack
    changes from the one it extends (lists such as checks append; see
    docs/site-extensions.md).

    \b
    Example:
      imagekit show debian-mpi
      imagekit show stacks/nccl-tests.yaml --variant nccl-tests-cu129-sbsa --json
      imagekit show debian-mpi --platform linux/arm64
      imagekit show debian-pytorch --diff-parent
    """
    if diff_parent:
        _show_diff(stack_mod.diff_parent(stack, current_site()), as_json)
        return
    resolved = stack_mod.load(stack, variant, platform=platform, site=current_site())
    info = resolved.describe()
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"{info['name']}  ({info['file']})")
    if info["description"]:
        click.echo(f"  {info['description']}")
    base = info["base"]
    click.echo(f"  base     {base['image']}  [{base['distro']}, {base['arch']}]")
    if len(info["arches"]) > 1:
        click.echo(f"  arches   {', '.join(info['arches'])} (--platform picks; this is {info['platform']})")
    if base["runtime"] != base["image"]:
        click.echo(f"  runtime  {base['runtime']}")
    click.echo(f"  image    {info['image']}")
    for tag in info["tags"]:
        click.echo(f"  tag      {tag}")
    click.echo("  components:")
    for comp in info["components"]:
        extra = ", ".join(f"{k}={v}" for k, v in comp.items() if k not in ("name", "version", "source", "origin")
                          and v not in (None, False, [], ""))
        click.echo(f"    {comp['name']:<11} {comp['version']:<10} {comp['source']:<9} {extra}")
        if comp.get("origin"):
            click.echo(f"    {'':<11} site component: {comp['origin']}")
    for stage in ("runtime", "devel"):
        own = [p.name for p in resolved.packages if p.stage == stage]
        if own:
            click.echo(f"  packages ({stage}): {' '.join(own)}")
    click.echo(f"  checks ({len(info['checks'])}): " + ", ".join(c["id"] for c in info["checks"]))


def _show_diff(diff: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(diff, indent=2))
        return
    click.echo(f"{diff['stack']} changes from {diff['parent']}:")
    for c in diff["changes"]:
        what = c["key"] + (f": {c['item']}" if "item" in c else "")
        if c["op"] == "~":
            click.echo(f"  ~ {what}: {_short(c.get('parent'))} -> {_short(c.get('child'))}")
        else:
            value = "" if "item" in c else f": {_short(c.get('child') if c['op'] == '+' else c.get('parent'))}"
            click.echo(f"  {c['op']} {what}{value}")
    if not diff["changes"]:
        click.echo("  (nothing)")


def _short(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."


@click.command()
@click.argument("stack")
@VARIANT
@PLATFORM
@click.option("--format", "fmt", type=click.Choice(render_mod.FORMATS), default="docker",
              show_default=True, help="recipe format")
@click.option("--single-stage", is_flag=True, help="only the devel stage (no smaller runtime stage)")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="write to FILE (default: stdout)")
@MIRROR
def render(stack: str, variant: str | None, platform: str | None, fmt: str, single_stage: bool,
           output: str | None, mirror: str | None) -> None:
    """Render a stack to a Dockerfile or a Singularity definition (HPCCM).

    With a mirror, the recipe takes upstream files from sources/ beside it:
    with -o, they are verified and linked there, so `docker build DIR` works.

    \b
    Example:
      imagekit render debian-mpi -o Dockerfile
      imagekit render nccl-tests --variant nccl-tests-cu129-sbsa --format singularity -o nccl.def
      imagekit render debian-cuda --mirror /site/mirror -o ctx/Dockerfile && docker build ctx
      imagekit render grace-pytorch                         # aarch64 (GH200, GB200, GB300)
      imagekit render debian-mpi --platform linux/arm64
    """
    resolved = stack_mod.load(stack, variant, mirror=mirror, platform=platform, site=current_site())
    text = render_mod.render(resolved, fmt, single_stage=single_stage)
    if output:
        staged = sources.stage(resolved, Path(output).parent)
        write_text(output, text)
        click.echo(f"wrote {output}" + (f" and {len(staged)} verified files in "
                                        f"{Path(output).parent / sources.CONTEXT_DIR}" if staged else ""), err=True)
    else:
        click.echo(text, nl=False)
