"""``imagekit preflight``: this host against what the image records, before a launch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from imagekit.errors import UsageError
from imagekit.launch import preflight as preflight_mod
from imagekit.launch.gpu_env import GpuLaunch


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--image", required=True, help="Engine image, or a .sqsh/.sif path.")
@click.option("--scheduler", default=None, metavar="slurm", help="Also check Slurm's PMIx plugin.")
@click.option("--launcher", default=None, metavar="slurm|mpirun|inside-out|mpijob",
              help="Add the launcher's checks (host mpirun, sshd).")
@click.option("--ssh-dir", type=click.Path(path_type=Path), default=None,
              help="inside-out: check this key directory's permissions.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
def preflight(image, scheduler, launcher, ssh_dir, as_json) -> None:
    """Compare this host with what the image records; warn, or refuse with the fix.

    \b
    Checks: Slurm pmix plugin vs image PMIx, image MPI, /dev/shm, memlock,
    /dev/infiniband (OFED images), NVIDIA driver vs image CUDA, GPU runtime
    (an image with NVIDIA_VISIBLE_DEVICES set on a host without
    nvidia-container-cli and driver: a warning with the fix, as this host may
    be a login node), host mpirun vs image Open MPI, ssh key permissions.
    Exit 1 when a check fails.
    \b
    Examples:
      imagekit preflight --image imagekit/debian-mpi:latest --scheduler slurm
      imagekit preflight --image ./mpi.sqsh --json
    """
    if scheduler not in (None, "slurm"):
        raise UsageError(f"unknown scheduler {scheduler!r}", "use --scheduler slurm, or leave it out")
    if launcher not in (None, *preflight_mod.LAUNCHERS):
        raise UsageError(f"unknown launcher {launcher!r}", f"use one of: {', '.join(preflight_mod.LAUNCHERS)}")

    checks = preflight_mod.run(image, scheduler=scheduler, launcher=launcher, ssh_key_dir=ssh_dir,
                     gpu=GpuLaunch(launcher=launcher))
    if as_json:
        click.echo(json.dumps({"image": image, "ok": not preflight_mod.failed(checks), "checks": preflight_mod.as_json(checks)},
                              indent=2))
    else:
        click.echo(preflight_mod.format_checks(checks))
    if preflight_mod.failed(checks):
        sys.exit(1)
