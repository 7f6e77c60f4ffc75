"""The gate options, shared by ``imagekit validate`` and ``imagekit launch … --validate``, and their names."""

from __future__ import annotations

import click

from imagekit.util.settings import Site
from imagekit.validate import GateOptions, Gates
from imagekit.validate.nccl_log import TRANSPORTS, canonical


def _transport(ctx, param, values: tuple[str, ...]) -> tuple[str, ...]:
    """The spellings a baseline file accepts (one parser for both): IB, gdr, NET:Libfabric, ..."""
    out = []
    for value in values:
        name = canonical(value)
        if name is None or name == "NET:":
            raise click.BadParameter(f"unknown transport {value!r}; use one of {', '.join(TRANSPORTS)} "
                                     "or NET:<plugin> (e.g. NET:Libfabric)", ctx=ctx, param=param)
        out.append(name)
    return tuple(out)


def gate_options(func):
    """The gates, shared by `imagekit validate` and `imagekit launch … --validate`."""
    for option in reversed(_GATE_OPTIONS):
        func = option(func)
    return func


_GATE_OPTIONS = [
    click.option("--min-busbw", type=float, metavar="GBPS", help="Fail when a run's peak busbw (GB/s) is below this."),
    click.option("--max-latency-us", type=float, metavar="US",
                 help="Fail when the time at any small size (see --small-size) is above this."),
    click.option("--expect-transport", multiple=True, metavar="NAME", callback=_transport,
                 help="Fail unless NCCL used this transport: IB, GDRDMA, Socket, P2P, SHM, NVLS, CollNet or "
                      "NET:<plugin> (needs NCCL_DEBUG=INFO lines). Repeatable."),
    click.option("--system", metavar="NAME|FILE",
                 help="Judge against what this system should reach, derived from its model (GPUs, NVLink/NVSwitch/"
                      "NVLS, NICs x line rate, GPUDirect RDMA): a band per size range, and the transport it needs. "
                      "`imagekit validate --list-systems` shows the catalogue."),
    # Eager, so that --list-systems given after it sees the site directories (the command puts them
    # in its Site: GateOptions.site).
    click.option("--systems-dir", "systems_dirs", multiple=True, metavar="DIR", is_eager=True,
                 help="A site directory of system models, searched before $IMAGEKIT_SYSTEMS_PATH and the shipped "
                      "catalogue (repeatable)."),
    click.option("--baseline", type=click.Path(dir_okay=False), metavar="FILE",
                 help="Per-system limits (YAML or JSON): min busbw per collective and size, max latency, transports."),
    click.option("--min-runs", type=click.IntRange(1), metavar="N",
                 help="Fail unless each collective ran at least N times (files, or nccl-tests -N cycles); the "
                      "best busbw of the runs must agree within the tolerance."),
    click.option("--straggler-threshold", type=click.FloatRange(0, 10, min_open=True), default=0.15,
                 show_default=True, metavar="FRACTION",
                 help="With -I per-process timing (-J JSON): a process or node this much slower than the median "
                      "is a straggler."),
    click.option("--collective", metavar="NAME",
                 help="Name for nccl-tests runs whose output does not say (older nccl-tests), e.g. all_reduce."),
    click.option("--small-size", default="1K", show_default=True, metavar="BYTES",
                 help="Sizes up to this count as small for latency (K/M/G suffixes)."),
    click.option("--saturation", type=click.FloatRange(0, 1, min_open=True), default=0.9, show_default=True,
                 help="Saturation size = smallest size whose busbw reaches this fraction of the peak."),
]


def _gate_keys() -> tuple[str, ...]:
    def probe() -> None: ...

    gate_options(probe)
    return tuple(p.name for p in probe.__click_params__)


# The gate options' parameter names, read from the options themselves (GateOptions takes them by name).
GATE_KEYS = _gate_keys()


def load_gates(values: dict, site: Site) -> tuple[Gates | None, Site]:
    """Take the gate options and ``--validate`` out of a command's ``values``: the gates (None without
    --validate), loaded before anything else so that a bad gate fails before an image is read or a job
    starts, and ``site`` with the command's --systems-dir."""
    chosen = {k: values.pop(k) for k in GATE_KEYS}
    site = site.with_system_dirs(chosen.pop("systems_dirs"))
    return (Gates.load(GateOptions(**chosen, site=site)) if values.pop("validate") else None), site
