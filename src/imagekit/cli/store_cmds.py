"""``imagekit store ls|gc``: look into and trim the export store (imagekit.export.store)."""

from __future__ import annotations

import json

import click


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


@click.group()
@click.option("--store", "store_dir", metavar="DIR", envvar="IMAGEKIT_STORE",
              help="Export store (default: $IMAGEKIT_STORE, else ~/.cache/imagekit/store).")
@click.pass_context
def store(ctx: click.Context, store_dir: str | None) -> None:
    """The export store: every converted .sqsh/.sif, keyed by image ID, format, preset and options.

    \b
    Examples:
      imagekit store ls
      imagekit store --store /lustre/imagekit-store ls --json
      imagekit store gc --max-size 50G
    """
    ctx.obj = store_dir or None


@store.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print the entries as a JSON list on stdout.")
@click.pass_obj
def ls(store_dir: str | None, as_json: bool) -> None:
    """List the entries, most recently used first.

    \b
    Examples:
      imagekit store ls
      imagekit store ls --json | jq -r '.[] | select(.format == "enroot") | .path'
    """
    import time

    from imagekit.export.output import human
    from imagekit.export.store import Store

    st = Store.open(store_dir)
    entries = sorted(st.entries(), key=lambda e: e.last_used, reverse=True)
    if as_json:
        click.echo(json.dumps([dict(e.to_dict(), held=st.held(e)) for e in entries], sort_keys=True))
        return
    now = time.time()
    click.echo(f"{'image':19}  {'format':6}  {'preset':9}  {'size':>9}  {'used':>5}  path")
    for e in entries:
        held = "  (held)" if st.held(e) else ""
        click.echo(f"{e.image_id[:19]}  {e.format:6}  {e.preset:9}  {human(e.bytes):>9}  "
                   f"{_age(max(0.0, now - e.last_used)):>5}  {e.path}{held}")
    click.echo(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, "
               f"{human(sum(e.bytes for e in entries))} in {st.root}", err=True)


@store.command("gc")
@click.option("--max-size", metavar="SIZE",
              help="Evict least recently used entries until the store holds at most SIZE "
                   "(e.g. 50G, 500M; powers of 1024). Without it, only sweep what dead runs left.")
@click.option("--json", "as_json", is_flag=True, help="Print what was evicted and kept as JSON on stdout.")
@click.pass_obj
def gc(store_dir: str | None, max_size: str | None, as_json: bool) -> None:
    """Evict least recently used entries; sweep temporaries and locks of dead runs.

    Entries being written, and entries held by a live reader (a running job
    that uses the file until it releases it), are never evicted, so the store
    can stay above SIZE. Outputs made as hard links keep their data.

    \b
    Examples:
      imagekit store gc --max-size 50G
      imagekit store --store /lustre/imagekit-store gc --max-size 2T --json
      imagekit store gc                      # only sweep what killed exports left
    """
    from imagekit.export.output import human
    from imagekit.export.store import Store, parse_size

    limit = parse_size(max_size) if max_size is not None else None
    st = Store.open(store_dir)
    swept = st.sweep()
    evicted = st.gc(limit) if limit is not None else []
    kept = st.entries()
    total = sum(e.bytes for e in kept)
    held = [e for e in kept if st.held(e)]
    if as_json:
        click.echo(json.dumps({"evicted": [e.to_dict() for e in evicted],
                               "freed": sum(e.bytes for e in evicted), "total": total,
                               "max_size": limit, "entries": len(kept),
                               "held": [e.to_dict() for e in held],
                               "swept": [str(p) for p in swept]}, sort_keys=True))
        return
    for e in evicted:
        click.echo(f"evicted  {e.image_id[:19]}  {e.format}  {e.preset}  {human(e.bytes)}")
    click.echo(f"{len(evicted)} evicted ({human(sum(e.bytes for e in evicted))}), {len(kept)} kept "
               f"({human(total)}, {len(held)} held), {len(swept)} stale temporaries swept")
    if limit is not None and total > limit:
        click.echo(f"the store is still above {max_size}: the rest is held or in use", err=True)
