"""``imagekit store init|ls|gc|verify``: set up, look into, trim and check the export store (imagekit.export.store)."""

from __future__ import annotations

import json

import click
from imagekit.util.errors import IntegrityError
from imagekit.util.sizes import human
from imagekit.export.store import Store, UntrustedEntry
from imagekit.util.sizes import parse_size
from imagekit.export.store.setup import READERS, init_store


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
      imagekit store --store /lustre/imagekit-store init --shared --group imagekit-ci
    """
    ctx.obj = store_dir or None


@store.command("init")
@click.option("--shared", is_flag=True,
              help="A store that GROUP publishes into and every job reads (else: a private store).")
@click.option("--group", "group_name", metavar="GROUP",
              help="With --shared: the publishers' group (CI and the people who may publish; never all users).")
@click.option("--readers", type=click.Choice(READERS), default="all", show_default=True,
              help="With --shared: who may read and hold entries.")
@click.pass_obj
def init(store_dir: str | None, shared: bool, group_name: str | None, readers: str) -> None:
    """Create the store (or fix an existing one's modes), as the account that will own it.

    A shared store is owned by this account (root or CI), writable by GROUP only, and
    readable by every job; users outside GROUP convert into stores of their own, so
    they can never change what another user's job starts. Entries are not touched:
    those not from a publisher are not served (imagekit store ls shows them).

    \b
    Examples:
      sudo imagekit store --store /lustre/imagekit-store init --shared --group imagekit-ci
      imagekit store init                      # the default private store, ~/.cache/imagekit/store
    """
    if group_name and not shared:
        raise click.UsageError("--group goes with --shared")
    if shared and not group_name:
        raise click.UsageError("--shared needs --group GROUP (the publishers' group)")
    root = init_store(store_dir, group_name if shared else None, readers_all=readers == "all")
    click.echo(f"{'shared' if shared else 'private'} export store ready: {root}")


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

    st = Store.open(store_dir)
    entries = sorted(st.entries(), key=lambda e: e.last_used, reverse=True)
    held = st.holds.live_by_slug()
    untrusted = {e.path: _untrusted(st, e) for e in entries}
    if as_json:
        click.echo(json.dumps([dict(e.to_dict(), held=held.get(st.slug(e), []),
                                    untrusted=untrusted[e.path]) for e in entries], sort_keys=True))
        return
    now = time.time()
    click.echo(f"{'image':19}  {'format':6}  {'preset':9}  {'size':>9}  {'used':>5}  path")
    for e in entries:
        notes = ("  (held)" if held.get(st.slug(e)) else "") + \
            (f"  (NOT SERVED: {untrusted[e.path]})" if untrusted[e.path] else "")
        click.echo(f"{e.image_id[:19]}  {e.format:6}  {e.preset:9}  {human(e.bytes):>9}  "
                   f"{_age(max(0.0, now - e.last_used)):>5}  {e.path}{notes}")
    click.echo(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, "
               f"{human(sum(e.bytes for e in entries))} in {st.root}", err=True)


def _untrusted(st, entry) -> str:
    """Why hits would refuse ``entry`` for who may have written it ("" when they would not); the
    bytes are checked on a hit, not here (ls reads no file)."""
    try:
        st.trust.check_entry(entry.dir, [entry.path, entry.dir / "entry.json"])
    except UntrustedEntry as exc:
        return exc.message
    return ""


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
                               "refused": [{"path": str(p), "why": why} for p, why in st.refused],
                               "swept": [str(p) for p in swept]}, sort_keys=True))
        return
    for path, why in st.refused:
        click.echo(f"cannot evict {path}: {why} (run gc as the store's owner or a publisher)", err=True)
    for e in evicted:
        click.echo(f"evicted  {e.image_id[:19]}  {e.format}  {e.preset}  {human(e.bytes)}")
    click.echo(f"{len(evicted)} evicted ({human(sum(e.bytes for e in evicted))}), {len(kept)} kept "
               f"({human(total)}, {len(held)} held), {len(swept)} stale temporaries swept")
    if limit is not None and total > limit:
        click.echo(f"the store is still above {max_size}: the rest is held or in use", err=True)


@store.command("verify")
@click.option("--json", "as_json", is_flag=True, help="Print each entry and what was found as JSON on stdout.")
@click.pass_obj
def verify(store_dir: str | None, as_json: bool) -> None:
    """Hash every entry in full against the sha256 its publisher recorded.

    A hit trusts a publisher's seal (the file unchanged since it was hashed) and reads
    nothing; this reads everything, once, to find what a disk damaged silently. Exit
    status 1 when an entry is damaged or not a publisher's (it is then not served).

    \b
    Examples:
      imagekit store verify
      imagekit store --store /lustre/imagekit-store verify --json
    """
    st = Store.open(store_dir, create=False)
    found = []
    for e in sorted(st.entries(), key=lambda e: str(e.path)):
        try:
            st.verify(e, full=True)
            problem = ""
        except (IntegrityError, UntrustedEntry) as exc:
            problem = exc.message
        except OSError as exc:
            problem = f"cannot read {e.path}: {exc.strerror}"
        found.append((e, problem))
    if as_json:
        click.echo(json.dumps([dict(e.to_dict(), problem=p) for e, p in found], sort_keys=True))
    else:
        for e, problem in found:
            click.echo(f"{'DAMAGED' if problem else 'ok':7}  {e.image_id[:19]}  {e.format}  {e.preset}  {e.path}"
                       + (f"\n         {problem}" if problem else ""))
        click.echo(f"{len(found)} entr{'y' if len(found) == 1 else 'ies'} hashed, "
                   f"{sum(bool(p) for _, p in found)} damaged", err=True)
    if any(p for _, p in found):
        raise SystemExit(1)
