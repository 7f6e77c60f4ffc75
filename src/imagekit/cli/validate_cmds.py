"""``imagekit validate``: judge nccl-tests / MPI benchmark output. Thin: read, parse, evaluate, print."""

from __future__ import annotations

import sys

import click

from imagekit.cli.gate_options import gate_options
from imagekit.cli.options import current_site
from imagekit.util.errors import UsageError
from imagekit.image_facts import reader
from imagekit.validate import GateOptions, Gates, evaluate, parse, to_json, to_text
from imagekit.validate import system as systems
from imagekit.validate.parse import merge


def _image_nccl(image: str) -> str:
    """The NCCL version the image's labels record (read once, through image_facts)."""
    facts = reader.read(image)
    if facts.labels is None:
        raise UsageError(f"--image {image}: {facts.reason}", "give an engine image, or a .sqsh/.sif that is here")
    version = facts.role_version("nccl")
    if not version:
        raise UsageError(f"--image {image}: the image records no NCCL", "drop --image, or give the NCCL image")
    return version


def _list_systems(ctx, param, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return

    site = current_site().with_system_dirs(ctx.params.get("systems_dirs") or ())
    for name, path in systems.available(site).items():
        model = systems.load(str(path), site)
        click.echo(f"{name:<16} {model.description}  [{path}]")
    ctx.exit(0)


@click.command("validate")
@click.argument("sources", metavar="FILE|-...", nargs=-1, required=True)
@gate_options
@click.option("--nodes", type=click.IntRange(1), metavar="N",
              help="With --system: the nodes the run spanned, for outputs that list no ranks (published tables, "
                   "excerpts). The output's rank list wins when there is one.")
@click.option("--gpus-per-node", type=click.IntRange(1), metavar="G",
              help="With --nodes: ranks (GPUs) per node; default: all the system's GPUs per node.")
@click.option("--image", metavar="REF|FILE",
              help="The image the run used (engine image, .sqsh or .sif): fail unless the run loaded the NCCL "
                   "its labels record.")
@click.option("--json", "as_json", is_flag=True, help="Print the full result and verdict as JSON.")
@click.option("--brief", is_flag=True, help="Text output without the per-size table.")
@click.option("--list-systems", is_flag=True, expose_value=False, is_eager=True, callback=_list_systems,
              help="List the system models (catalogue and site directories) and exit.")
def validate(sources: "tuple[str, ...]", image: "str | None", as_json: bool, brief: bool, **gate_values) -> None:
    """Parse nccl-tests (text, -J JSON, -I per-iteration), OSU / mpi4py benchmark output and NCCL_DEBUG=INFO
    logs; judge them.

    Reads each FILE, or stdin with '-'; several files are several runs (or one
    run's stdout beside its -J JSON). Reports peak busbw and busbw per size
    (out-of-place and in-place), the saturation size, time at small sizes,
    #wrong / out-of-bounds errors, transports (IB, GDRDMA, Socket, P2P, SHM),
    ranks, hosts, truncated runs, stragglers and iteration spikes, and the
    spread of repeated runs. With --system, the band the system should reach,
    the bound that limits it and the assumptions; the transport the system
    needs is checked when the output has NCCL_DEBUG=INFO lines, and noted as
    not checked when it has none (--expect-transport makes it a gate).

    Exit codes: 0 pass; 1 ran right but slow (below the system's band, a
    floor or a baseline, a straggler, runs that do not repeat); 9 ran wrong
    (wrong elements, out-of-bounds values, truncated, wrong or missing
    transport, socket fallback, another NCCL than the image's, wrong GPUs, or
    missing data for a requested gate); 2 unreadable input or a bad option,
    system model or baseline.

    \b
    Examples:
      srun --mpi=pmix all_reduce_perf -b 8 -e 8G -f 2 -g 1 | imagekit validate - --system dgx-h100
      imagekit validate run1.log run2.log run3.log --system dgx-a100 --min-runs 3
      imagekit validate nccl.log result.json --system site/cluster.yaml --json
      imagekit validate --list-systems
      imagekit validate published-table.txt --system dgx-a100 --nodes 2 --collective all_reduce
      imagekit validate nccl.log --expect-transport IB --expect-transport GDRDMA
      imagekit validate nccl.log --baseline site/dgx-h100.yaml --json
      imagekit validate nccl.log --image ./nccl-tests.sqsh --expect-transport IB
      mpirun -np 2 python -m mpi4py.bench pingpong | imagekit validate - --max-latency-us 5

    \b
    Baseline file (YAML or JSON):
      system: dgx-h100-2node
      expect_transport: [IB, GDRDMA]
      benchmarks:
        all_reduce:
          min_busbw: 350            # GB/s, peak
          max_latency_us: 40        # every size <= small_size
          sizes: {1G: 340, 8K: {max_latency_us: 30}}
    """
    site = current_site().with_system_dirs(gate_values.pop("systems_dirs"))
    gates = Gates.load(GateOptions(**gate_values, site=site))
    if image:
        gates.image, gates.image_nccl = image, _image_nccl(image)
    results = []
    for source in sources:
        if source == "-":
            data = sys.stdin.buffer.read()
            source = "<stdin>"
        else:
            try:
                with open(source, "rb") as fh:
                    data = fh.read()
            except OSError as exc:
                raise UsageError(f"cannot read {source}: {exc.strerror}", "give a log file or '-' for stdin") from None
        results.append(parse(data, source=source))
    result = merge(results)
    name = result.source
    verdict = evaluate(result, gates)
    small_eff, frac = gates.effective_small_size, gates.effective_saturation
    if as_json:
        click.echo(to_json(result, verdict, small_eff, frac))
    elif verdict.status == "unreadable":
        if result.has_tables:
            click.echo(to_text(result, verdict, small_eff, frac, table=not brief), nl=False)
        raise UsageError(f"{name}: unreadable: {verdict.failures[0].message}",
                         "give the benchmark's full stdout (nccl-tests, OSU or mpi4py.bench)")
    else:
        click.echo(to_text(result, verdict, small_eff, frac, table=not brief), nl=False)
    if verdict.exit_code:
        click.get_current_context().exit(verdict.exit_code)
