"""``imagekit doctor``: the site's set-up for imagekit images on one screen (imagekit.doctor)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from imagekit import doctor

MARKS = {"ok": "OK", "warn": "WARN", "problem": "PROBLEM", "absent": "-"}


@click.command()
@click.option("--plugstack", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Pyxis's plugstack file (default: slurm.conf's PlugStackConfig, else /etc/slurm/plugstack.conf)")
@click.option("--wrapper", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="the importer wrapper to read (default: the importer= of Pyxis's line)")
@click.option("--site-policy", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="the site's policy file, to hold the wrapper to (default: /etc/imagekit/policy.yaml if there)")
@click.option("--json", "as_json", is_flag=True, help="the findings as a JSON list")
def doctor_cmd(plugstack: Path | None, wrapper: Path | None, site_policy: Path | None, as_json: bool) -> None:
    """Show this host's set-up for imagekit images: Pyxis's importer line, the wrapper and what it
    exports, the signature policy and its keys, the shared store, the runtimes and their versions.

    Each line is OK, WARN, PROBLEM or - (not set up here). Exit 1 when a PROBLEM is found (for
    example a site policy the wrapper leaves out, so unsigned images are served), else 0.

    \b
    Example:
      imagekit doctor
      imagekit doctor --plugstack /etc/slurm/plugstack.conf --json
      imagekit doctor --wrapper /usr/local/libexec/imagekit-importer --site-policy /etc/imagekit/policy.yaml
    """
    report = doctor.examine(doctor.DoctorRequest(plugstack=plugstack, wrapper=wrapper, site_policy=site_policy))
    if as_json:
        click.echo(json.dumps(report.as_list(), indent=2))
    else:
        width = max(len(f.what) for f in report.findings)
        for f in report.findings:
            click.echo(f"{MARKS[f.status]:<8} {f.what:<{width}}  {f.detail}")
    sys.exit(1 if report.problems else 0)
