"""``imagekit preflight``: this host against what the image records, before a launch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from imagekit.cli.options import current_site
from imagekit.util.errors import NothingChecked, UsageError
from imagekit.launch import common
from imagekit.launch import preflight as preflight_mod
from imagekit.launch import targets
from imagekit.launch.schedulers import Slurm


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("ref", required=False, metavar="[REF]")
@click.option("--image", help="The image (same as REF): an engine image, a .sqsh/.sif path, or with no "
                              "engine a registry reference (REGISTRY#REPO:TAG, docker://...), oci:DIR or "
                              "docker-archive:FILE.")
@click.option("--scheduler", default=None, metavar=Slurm.name, help="Also check Slurm's PMIx plugin.")
@click.option("--launcher", default=None, metavar="|".join(t.name for t in targets.TARGETS),
              help="Add the launcher's checks (host mpirun, sshd).")
@click.option("--ssh-dir", type=click.Path(path_type=Path), default=None,
              help="inside-out: check this key directory's permissions.")
@click.option("--mounts", "mounts", multiple=True, metavar="SRC:DST[:ro]",
              help="The launch's bind mounts (repeatable or comma-separated): a host libfabric bound over the "
                   "image's is checked for what it links.")
@click.option("--allow-unchecked", is_flag=True,
              help="Exit 0 although the image itself could not be checked (its labels unread).")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
def preflight(ref, image, scheduler, launcher, ssh_dir, mounts, allow_unchecked, as_json) -> None:
    """Compare this host with what the image records; warn, or refuse with the fix.

    \b
    Checks: Slurm pmix plugin vs image PMIx, image MPI, /dev/shm, memlock,
    /dev/infiniband (OFED images), NVIDIA driver vs image CUDA, each binary's
    GPU code, GPUDirect RDMA (nvidia_peermem or DMA-BUF, /dev/gdrdrv), a host
    libfabric bound over the image's (--mounts), GPU runtime
    (an image with NVIDIA_VISIBLE_DEVICES set on a host without
    nvidia-container-cli and driver: a warning with the fix, as this host may
    be a login node), host mpirun vs image Open MPI, ssh key permissions.
    A registry reference is read from the registry (manifest and config, no
    layers): no engine needed. Exit 1 when a check fails; exit 11 when the
    image itself could not be checked (its labels unread or not imagekit's),
    unless --allow-unchecked.
    \b
    Examples:
      imagekit preflight imagekit/debian-mpi:latest --scheduler slurm
      imagekit preflight ./mpi.sqsh --json
      imagekit preflight 'registry.example.org#hpc/mpi:1' --scheduler slurm
      imagekit preflight ./slingshot.sqsh --mounts /opt/cray/libfabric/2.2.0:/opt/libfabric:ro
    """
    if (ref is None) == (image is None) and not (ref and image and ref == image):
        raise UsageError("give the image once: as REF or as --image", "e.g. imagekit preflight ./mpi.sqsh")
    image = image or ref
    binds = tuple((m.src, m.dst) for m in common.parse_mounts(mounts))
    plan = preflight_mod.plan_for(scheduler, None if launcher is None else targets.of(launcher).starter.needs,
                                  ssh_dir, site=current_site(), mounts=binds)
    checks = preflight_mod.run(image, plan)
    unchecked = [c.name for c in checks if c.status == preflight_mod.SKIP]
    image_checked = checks[0].status != preflight_mod.SKIP      # the labels: what every image-side check reads
    if as_json:
        click.echo(json.dumps({"image": image, "ok": not preflight_mod.failed(checks), "image_checked": image_checked,
                               "not_checked": unchecked, "checks": preflight_mod.as_json(checks)}, indent=2))
    else:
        click.echo(preflight_mod.format_checks(checks))
        if unchecked:
            click.echo(f"not checked: {', '.join(unchecked)}")
    if preflight_mod.failed(checks):
        sys.exit(1)
    if not image_checked and not allow_unchecked:
        raise NothingChecked(f"the image itself was not checked: {checks[0].detail}",
                             "give an image preflight can read (a .sqsh, .sif, REGISTRY#REPO:TAG), or pass "
                             "--allow-unchecked to check only this host")
