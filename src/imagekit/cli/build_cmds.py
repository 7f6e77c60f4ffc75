"""Image commands: base, build, check, report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from imagekit import base_image, image_report, pipeline
from imagekit.util import platforms
from imagekit import checks as checks_mod
from imagekit.build import TARGETS, BuildRequest
from imagekit import stack as stack_mod
from imagekit.checks import runner, runtimes
from imagekit.cli.options import ENGINE, MIRROR, current_site, progress_printer
from imagekit.util.errors import StackError
from imagekit.image_facts import reader


def _progress(line: str) -> None:
    click.echo(f"  {line}", err=True)


@click.command()
@click.argument("name")
@click.option("--mirror", metavar="URL", help="distro mirror (default: the host's apt mirror)")
@click.option("--tag", help="image tag (default: imagekit/DISTRO:SUITE, imagekit/DISTRO:SUITE-arm64 for arm64)")
@click.option("--force", is_flag=True, help="rebuild even if the image exists")
@click.option("--components", default="main", show_default=True, metavar="LIST",
              help="archive areas for the image's apt sources, e.g. main,contrib,non-free")
@click.option("--bootstrap", "bootstrapper", type=click.Choice(base_image.BOOTSTRAPPERS), default="auto",
              show_default=True, help="mmdebstrap (root or rootless; auto picks it when installed) or debootstrap (root)")
@click.option("--arch", metavar="ARCH",
              help="the root filesystem's architecture: amd64 (x86_64) or arm64 (aarch64; on an x86 "
                   "machine through qemu-user-static); default: this machine's")
@ENGINE
def base(name: str, mirror: str | None, tag: str | None, force: bool, components: str, engine_name: str,
         bootstrapper: str, arch: str | None) -> None:
    """Bootstrap an offline base image (mmdebstrap or debootstrap) and import it into the engine.

    NAME is DISTRO:SUITE, e.g. debian:bookworm, debian:trixie, ubuntu:jammy.
    A second call reuses the existing image.

    \b
    Example:
      imagekit base debian:bookworm
      imagekit base ubuntu:jammy --mirror http://mirror.example.org/ubuntu
      imagekit base debian:trixie --components main,contrib,non-free
      imagekit base debian:bookworm --arch arm64        # imagekit/debian:bookworm-arm64 (emulated here)
      imagekit base debian:bookworm --engine podman     # into your Podman store (mmdebstrap as a user)
    """
    request = base_image.BaseRequest(name, mirror=mirror, tag=tag, force=force,
                                     components=tuple(c for c in components.split(",") if c),
                                     engine_name=engine_name, bootstrapper=bootstrapper, arch=arch)
    click.echo(base_image.ensure(request, log=lambda m: click.echo(m, err=True)))


@click.command()
@click.argument("stack")
@click.option("--variant", metavar="NAME", help="build one matrix variant (default: all)")
@click.option("--platform", "platform_list", multiple=True, metavar="OS/ARCH[,OS/ARCH]",
              help="build for these platforms (linux/amd64, linux/arm64; comma-separated or repeated), "
                   "each that the stack's base.arch offers; default: this machine's where offered")
@click.option("--target", type=click.Choice(TARGETS), default="runtime", show_default=True,
              help="the stage to build: runtime (what jobs run) or devel (compilers and headers too)")
@click.option("--single-stage", is_flag=True, help="one stage (devel) instead of devel + runtime")
@click.option("--tag", "tags", multiple=True, metavar="REF", help="extra tag (repeatable)")
@click.option("--no-cache", is_flag=True, help="do not use the build cache")
@click.option("--ca-bundle", default="auto", show_default=True, metavar="FILE|auto|none",
              help="CA bundle for pip/TLS-intercepting proxies, passed as a BuildKit secret (never a layer)")
@click.option("--log-dir", default="build/logs", show_default=True, help="where full build logs go")
@click.option("--cache-from", multiple=True, metavar="REF", help="reuse layers of this image (pushed with --inline-cache)")
@click.option("--inline-cache", is_flag=True, help="embed cache metadata so the image can serve --cache-from")
@click.option("--check/--no-check", "run_checks", default=None,
              help="run the image's checks after building (default: on with --export)")
@click.option("--export", "exports", default="", metavar="enroot,sif",
              help="after building and checking, export to these formats")
@click.option("-o", "--output-dir", default="out", show_default=True, help="where exports go")
@click.option("--store", "store_dir", metavar="DIR", envvar="IMAGEKIT_STORE",
              help="export store for --export (default: $IMAGEKIT_STORE, else ~/.cache/imagekit/store)")
@click.option("--no-store", is_flag=True, help="with --export, convert straight to the outputs")
@click.option("--sign", "sign_key", metavar="KEY", type=click.Path(dir_okay=False),
              help="sign with this site key (ECDSA P-256 or Ed25519, `imagekit keygen`): the image's SBOM and "
                   "provenance, kept for `imagekit push --sign`, and each --export (docs/signing.md)")
@click.option("--no-package-check", is_flag=True,
              help="do not look up the stack's distro packages in the base's archive before building")
@MIRROR
@ENGINE
@click.option("--json", "as_json", is_flag=True, help="print the results as JSON")
def build(stack: str, variant: str | None, platform_list: tuple, target: str, single_stage: bool, tags: tuple,
          no_cache: bool,
          ca_bundle: str, log_dir: str, cache_from: tuple, inline_cache: bool, run_checks: bool | None,
          exports: str, output_dir: str, store_dir: str | None, no_store: bool, sign_key: str | None,
          no_package_check: bool,
          mirror: str | None, engine_name: str, as_json: bool) -> None:
    """Render a stack and build its image with BuildKit (or rootless Podman).

    A stack with a matrix builds every variant (or --variant NAME), sharing
    cached layers. The image is tagged imagekit/NAME:latest (runtime) or
    imagekit/NAME:devel, plus the stack's tags; a build for arm64 gets
    imagekit/NAME:latest-arm64 (every tag carries the arch unless it names it
    with {arch}), so it never replaces the amd64 image. On an x86 machine an
    arm64 build runs through qemu-user-static. With --engine podman the
    image goes into the calling user's Podman store, and --check/--export
    use it from there.

    \b
    Example:
      imagekit build debian-mpi
      imagekit build debian-mpi --engine podman --export enroot -o out/   # as a user, no daemon
      imagekit build debian-mpi --export enroot,sif -o out/
      imagekit build debian-mpi --export enroot --store /lustre/imagekit-store -o out/
      imagekit build stacks/nccl-tests.yaml --variant nccl-tests-cu129-x86_64 --tag site/nccl:1
      imagekit build debian-cuda --mirror /site/mirror      # upstream tarballs from a local mirror
      imagekit build debian-mpi --sign site.key --export enroot,sif -o out/   # SBOM, provenance, signatures
      imagekit build debian-mpi --platform linux/arm64       # imagekit/debian-mpi:latest-arm64
      imagekit build debian-mpi --platform linux/amd64,linux/arm64   # both; then one index:
      imagekit push imagekit/debian-mpi:latest --platform linux/amd64,linux/arm64 --to 127.0.0.1:5000/hpc/mpi:1
    """
    formats = [f for f in exports.split(",") if f]
    request = pipeline.PipelineRequest(
        stack, variant=variant, mirror=mirror, platforms=tuple(platforms.parse_list(platform_list)),
        build=BuildRequest(target=target, tags=tags, no_cache=no_cache, ca_bundle=ca_bundle, log_dir=log_dir,
                           single_stage=single_stage, cache_from=cache_from, inline_cache=inline_cache,
                           engine_name=engine_name),
        check=bool(formats) if run_checks is None else run_checks, exports=tuple(formats),
        output_dir=output_dir, store=False if no_store else store_dir or None,
        sign=Path(sign_key) if sign_key else None, check_packages=not no_package_check, site=current_site())
    results = pipeline.build_all(request, progress=_progress, export_progress=progress_printer,
                                 log=lambda m: click.echo(m, err=True))
    if as_json:
        click.echo(json.dumps(results, indent=2))
    else:
        for r in results:
            for line in summary_lines(r):
                click.echo(line)
    if any(r.get("check") and not r["check"]["ok"] for r in results):
        sys.exit(1)


def summary_lines(result: dict) -> list[str]:
    """One built image (an entry of ``pipeline.build_all``): its line, then every file the build wrote
    or left, each on its own line, so that a CI log names what to collect."""
    b = result["build"]
    lines = [f"{b['tags'][0]}  {b['image_id'][:19]}  {b['size_bytes'] / 1e6:.0f} MB  {b['seconds']:.1f} s  "
             f"({b['cached_steps']}/{b['steps']} steps cached)"]
    lines += [f"  tag     {tag}" for tag in b["tags"][1:]]
    lines.append(f"  log     {b['log']}")
    if result.get("signed"):
        lines.append(f"  signed  {result['signed']['bundle']}  (SBOM, provenance)")
    if result.get("check"):
        c = result["check"]["counts"]
        lines.append(f"  checks  {c['passed']} passed, {c['failed']} failed, {c['not-run']} not run")
    for e in result.get("exports", []):
        lines.append(f"  export  {e['path']}  {e['bytes']:,} bytes  sha256:{e['sha256']}")
        # A signed SIF is rewritten in place; what else signing wrote is the bundle beside it.
        lines += [f"  signed  {f}" for f in (e.get("signed") or {}).get("files", []) if f != e["path"]]
    return lines


@click.command()
@click.argument("ref")
@click.option("--image", metavar="TAG", help="image to check when REF is a stack")
@click.option("--variant", metavar="NAME", help="matrix variant when REF is a stack")
@click.option("--junit", metavar="FILE", help="write JUnit XML for CI")
@click.option("--with", "with_", multiple=True, type=click.Choice(checks_mod.NEEDS),
              help="offer this hardware to the container and run the checks that need it")
@click.option("--assume", multiple=True, type=click.Choice(checks_mod.NEEDS),
              help="run the checks that need this hardware without adding device flags "
                   "(the engine's default runtime already provides it)")
@click.option("--runtime", type=click.Choice(runtimes.RUNTIMES), default=None,
              help="run the checks under Enroot or Apptainer, no engine (default for a .sqsh: Enroot, "
                   "else Apptainer; for a .sif: Apptainer)")
@ENGINE
@click.option("--json", "as_json", is_flag=True, help="print the results as JSON")
def check(ref: str, image: str | None, variant: str | None, junit: str | None, with_: tuple, assume: tuple,
          runtime: str | None, engine_name: str, as_json: bool) -> None:
    """Run the image's checks (pytest-testinfra) in a container of it.

    REF is an image (its checks travel in its labels) or a stack (then
    --image names the image; default: the stack's own image). With no
    engine: a .sqsh runs under Enroot, a .sif under Apptainer, and a
    registry reference, oci:DIR or docker-archive:FILE is exported to an
    Enroot file first (through the export store).

    \b
    Example:
      imagekit check imagekit/debian-mpi:latest
      imagekit check debian-mpi --image site/mpi:1 --junit checks.xml
      imagekit check site/nccl:1 --with gpu --with fabric
      imagekit check imagekit/debian-mpi:latest --engine podman    # the user's Podman image
      imagekit check ./debian-mpi.sqsh                               # under Enroot, no engine
      imagekit check ./debian-mpi.sif --runtime apptainer
      imagekit check 'registry.example.org#hpc/mpi:1'                # exported, then Enroot
    """
    try:
        stack = stack_mod.load(ref, variant, site=current_site())
    except StackError:
        if variant or image:
            raise
        stack = None
    if stack is not None:
        target = image or stack.image
        specs = checks_mod.stack_checks(stack, reader.read(target, engine_name).target or "runtime")
        report = runner.run(target, specs, junit=junit, with_=with_, assume=assume, engine_name=engine_name,
                            progress=_progress)
    else:
        report = runner.run_ref(ref, runner.CheckRun(junit, with_, assume, progress=_progress), runtime=runtime,
                                engine_name=engine_name, log=lambda m: click.echo(m, err=True))
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        _print_report(report)
    sys.exit(0 if report.ok else 1)


def _print_report(report) -> None:
    marks = {"passed": "PASS", "failed": "FAIL", "not-run": "NOT RUN"}
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
    for o in report.outcomes:
        click.echo(f"{marks[o.status]:<8} {o.id:<28} {o.describe}")
        if o.status == "failed" and o.detail:
            for line in o.detail.splitlines()[:25]:
                click.echo(f"           | {line}")
    c = report.counts()
    click.echo(f"{report.image}: {c['passed']} passed, {c['failed']} failed, {c['not-run']} not run")
    if report.junit:
        click.echo(f"  junit   {report.junit}")


@click.command()
@click.argument("image")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def report(image: str, as_json: bool) -> None:
    """Show what is in an image: stack, components, versions, layer sizes.

    \b
    Example:
      imagekit report imagekit/debian-mpi:latest
      imagekit report imagekit/debian-mpi:latest --json > debian-mpi.json
    """
    info = image_report.describe(image, current_site())
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(image_report.as_text(info))
