#!/usr/bin/env python3
"""Benchmark: what signature checks add to a warm Pyxis importer ``get``, and how much of an image the
SBOM accounts for.

``importer`` (default): pushes IMAGE to a local registry (Debian's docker-registry, started here) with
its .sqsh and signed statements (``imagekit push --with enroot --sign``), fills a store with one ``get``,
then times warm ``get``s of the same entry, process start included, median and best of R, three ways:

- no policy (today's importer: the baseline);
- ``imagekit-pyxis-importer-signed`` with ``IMAGEKIT_POLICY``, the statements beside the store entry (what every hit after the first
  pull sees: verify two DSSE envelopes, check the manifest and the file's sha256, no network);
- ``IMAGEKIT_POLICY`` set, no statements beside the entry (an entry made before signing): the
  referrers fetched from the registry on each hit;
- a reader's first ``get`` on this node under the policy (no stamp of the file yet: its bytes are
  hashed once, :mod:`imagekit.export.store.sealed`); with ``--pythonpath``, also the other imagekit
  under the policy, so a change to the signed importer is measured against it on the same entry.

``completeness IMAGE``: reads the image's files (one pass over ``docker export``) and its SBOM, and
reports the share of files under /usr and /opt that an SBOM component owns (a dpkg package's
``.list``, a pip distribution's ``RECORD``, or a stack component's install path), and the largest
directories of what is left unowned.

    python bench/signing.py importer [--image imagekit/debian-mpi:latest] [-r 9] [--pythonpath OLD/src]
    python bench/signing.py completeness imagekit/debian-cuda:latest [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
EXE = Path(sys.executable).parent / "imagekit-pyxis-importer"
SIGNED = Path(sys.executable).parent / "imagekit-pyxis-importer-signed"    # what a site with a policy runs
CLI = Path(sys.executable).parent / "imagekit"


def env_for(store: Path, step: int, **extra: str) -> dict[str, str]:
    """A job step's environment; the reader's cache (its stamps of files it hashed) beside the store
    unless ``XDG_CACHE_HOME`` is given (a fresh one: a reader's first get on this node)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PYXIS_", "IMAGEKIT_POLICY"))}
    env.update(IMAGEKIT_STORE=str(store), PYXIS_RUNTIME_PATH=str(store.parent / "run"), PYXIS_VERSION="0.24.0",
               SLURM_JOB_ID="1", SLURM_STEP_ID=str(step), SLURM_JOB_UID=str(os.getuid()),
               XDG_CACHE_HOME=str(store.parent / "cache"))
    env.update(extra)
    return env


def get(uri: str, env: dict[str, str]) -> tuple[float, str]:
    exe = SIGNED if env.get("IMAGEKIT_POLICY") else EXE
    with record.timer() as t:
        proc = subprocess.run([str(exe), "get", uri], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              env=env)
    if proc.returncode != 0:
        raise SystemExit(f"get failed ({proc.returncode}): {proc.stderr}")
    subprocess.run([str(EXE), "release"], env=env, stdin=subprocess.DEVNULL, capture_output=True)
    return t.wall, proc.stderr


def site_policy(work: Path) -> Path:
    """A site key ``WORK/ci.key`` (and .pub) and a policy that trusts it for every ``*/bench/*`` image."""
    from imagekit.attest import keys

    keys.write_pair(keys.generate(), work / "ci")
    policy = work / "policy.yaml"
    policy.write_text(textwrap.dedent(f"""\
        version: 1
        keys: {{ci: {{path: {work}/ci.pub}}}}
        repositories: [{{match: "*/bench/*", signers: [ci]}}]
        """))
    return policy


def importer(args: argparse.Namespace) -> dict:
    from helpers.local_registry import running_registry

    from imagekit.attest import bundle

    work = Path(tempfile.mkdtemp(prefix="imagekit-bench-signing-"))
    try:
        policy = site_policy(work)
        with running_registry(work / "registry") as addr:
            ref = f"{addr}/bench/signed:1"
            subprocess.run([str(CLI), "push", args.image, "--to", ref, "--with", "enroot", "--sign",
                            str(work / "ci.key"), "-q"], check=True, capture_output=True,
                           env={**os.environ, "IMAGEKIT_STORE": str(work / "push-store")})
            uri = f"docker://{addr}#bench/signed:1"
            store = work / "store"
            _, said = get(uri, env_for(store, 0, IMAGEKIT_POLICY=str(policy)))     # fills the store, signed
            assert "pulling the pushed enroot artifact" in said, said
            side = next((store / "entries").rglob(bundle.ENTRY_NAME))
            ways = {"no policy (baseline)": {}, "policy, statements beside the entry": {"IMAGEKIT_POLICY": str(policy)}}
            if args.pythonpath:   # the importer before this change, on the same entry
                ways = {"before signing (--pythonpath)": {"PYTHONPATH": args.pythonpath}, **ways,
                        "policy, statements beside the entry (--pythonpath)": {"PYTHONPATH": args.pythonpath,
                                                                               "IMAGEKIT_POLICY": str(policy)}}
            # A reader with no stamp of this file on this node: under a policy its bytes are hashed once.
            fresh = "policy, a reader's first get on this node"
            ways[fresh] = {"IMAGEKIT_POLICY": str(policy)}
            times: dict[str, list[float]] = {w: [] for w in ways}
            for i in range(args.runs):                 # interleaved: the machine's load hits all alike
                for way, extra in ways.items():
                    if way == fresh:
                        extra = {**extra, "XDG_CACHE_HOME": str(work / f"cache-first-{i}")}
                    times[way].append(get(uri, env_for(store, 10 + i, **extra))[0])
            # The check alone, in this process (no interpreter start, no imports): what a hit pays to verify.
            from imagekit.export import pyxis_importer, pyxis_policy
            from imagekit.export.store import Store

            entry_store = Store.open(store, create=False)
            entry = next(e for e in entry_store.entries() if e.path.parent == side.parent)
            image_id, manifest = pyxis_importer.identify(uri, env_for(store, 0))
            inproc = []
            for _ in range(args.runs * 5):
                with record.timer() as t:
                    pyxis_policy.enforce(uri, image_id, manifest, entry,
                                         env_for(store, 0, IMAGEKIT_POLICY=str(policy)))
                inproc.append(t.wall)
            times["the policy check alone, in-process (no start, no imports)"] = inproc
            # What this round added to a warm hit, alone: the served file's path walked from / and its
            # stamp read (store.sealed), and the store's own path resolved through descriptors.
            from imagekit.export.store import nofollow, sealed
            from imagekit.export.store.verify import Stamps

            stamps = Stamps(store.parent / "cache" / "imagekit" / "verified")
            for label, call in (("the served-file check alone (stamp hit), in-process",
                                 lambda: sealed.check(entry.path, entry.sha256, stamps)),
                                ("the store path resolved, in-process", lambda: nofollow.resolve(store))):
                took = []
                for _ in range(args.runs * 20):
                    with record.timer() as t:
                        call()
                    took.append(t.wall)
                times[label] = took
            saved = side.read_bytes()
            os.chmod(side.parent, 0o755)
            side.unlink()
            times["policy, statements from the registry"] = []
            for i in range(args.runs):
                took, said = get(uri, env_for(store, 100 + i, IMAGEKIT_POLICY=str(policy)))
                assert "beside the entry" not in said
                times["policy, statements from the registry"].append(took)
            side.write_bytes(saved)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    first = "before signing (--pythonpath)" if args.pythonpath else "no policy (baseline)"
    base, base_best = statistics.median(times[first]), min(times[first])
    rows = {w: {"median_s": round(statistics.median(t), 4), "best_s": round(min(t), 4),
                "added_ms": round((statistics.median(t) - base) * 1000, 1),
                "added_best_ms": round((min(t) - base_best) * 1000, 1),
                "ratio": round(statistics.median(t) / base, 3)} for w, t in times.items() if "in-process" not in w}
    for way, took in times.items():
        if "in-process" in way:
            rows[way.replace(" (no start, no imports)", "")] = {"median_s": round(statistics.median(took), 6),
                                                                "best_s": round(min(took), 6)}
    return {"image": args.image, "runs": args.runs, "results": rows}


def _canonical(path: str, links: dict[str, str]) -> str:
    """/lib/x/y -> /usr/lib/x/y where /lib is a symlink to usr/lib (Debian's merged /usr)."""
    top = "/" + path.split("/", 2)[1]
    target = links.get(top)
    if target and not target.startswith("/"):
        return "/" + target.rstrip("/") + path[len(top):]
    return path


def completeness(args: argparse.Namespace) -> dict:
    with record.timer() as t:
        out = _completeness(args)
    return {**out, "seconds": round(t.wall, 1)}


def _completeness(args: argparse.Namespace) -> dict:
    from imagekit.attest import sbom
    from imagekit.export import signing
    from imagekit.export.image_source import open_source

    source = open_source(args.image)
    inv = signing.scan_source(source, files=True)
    record = signing.record_of(source)
    doc = json.loads(sbom.to_json(sbom.build(record, inv)))
    components = {c["bom-ref"] for c in doc["components"]}
    owned: set[str] = set()
    for key, paths in (inv.owned or {}).items():
        ecosystem, name = key.split(":", 1)
        present = any(ref.startswith(f"{ecosystem}:{name}") for ref in components)
        if present:
            owned.update(_canonical(p, inv.symlinks) for p in paths)
    prefixes = [o["location"].rstrip("/") + "/" for c in doc["components"]
                for o in ((c.get("evidence") or {}).get("occurrences") or [])]
    files = [f for f in inv.files or [] if f.startswith(("/usr/", "/opt/"))]
    unowned = [f for f in files if f not in owned and not f.startswith(tuple(prefixes))]
    by_dir = collections.Counter("/".join(f.split("/")[:4]) for f in unowned)
    by_prefix = {p: sum(1 for f in files if f.startswith(p)) for p in prefixes}
    return {"image": args.image, "platform": record.platform, "files_usr_opt": len(files),
            "owned": len(files) - len(unowned), "share_owned": round(1 - len(unowned) / max(1, len(files)), 4),
            "sbom_components": len(doc["components"]),
            "by_stack_component_path": by_prefix,
            "unowned_top_dirs": by_dir.most_common(15), "unowned_examples": sorted(unowned)[:20]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what")
    # The harness's --json and --out on each subcommand: on the top parser a subcommand's defaults
    # would overwrite them.
    imp = sub.add_parser("importer", parents=[record.options()])
    imp.add_argument("--image", default="imagekit/debian-mpi:latest")
    imp.add_argument("-r", "--runs", type=int, default=9)
    imp.add_argument("--pythonpath", metavar="DIR",
                     help="also time the importer of another imagekit (e.g. `git archive BASE src | tar -x -C D`; "
                          "DIR=D/src): the baseline then")
    comp = sub.add_parser("completeness", parents=[record.options()])
    comp.add_argument("image")
    argv = sys.argv[1:]
    if not argv or argv[0] not in ("importer", "completeness", "-h", "--help"):
        argv = ["importer", *argv]      # importer is the default, its options given alone included
    args = parser.parse_args(argv)
    run = record.start(f"signing-{args.what}", args)
    result = importer(args) if args.what == "importer" else completeness(args)
    if args.what == "importer":
        print(f"warm importer get of {result['image']}, median of {result['runs']} (process start included)")
        for way, row in result["results"].items():
            extra = (f"  +{row['added_ms']:.1f} ms (best +{row['added_best_ms']:.1f})  x{row['ratio']}"
                     if "added_ms" in row else "")
            print(f"  {way:<40} {row['median_s'] * 1000:7.1f} ms (best {row['best_s'] * 1000:.1f}){extra}")
    else:
        print(f"{result['image']} ({result['platform']}): {result['owned']} of {result['files_usr_opt']} files "
              f"under /usr and /opt owned by an SBOM component ({result['share_owned']:.1%}); "
              f"{result['sbom_components']} components")
        for path, n in result["by_stack_component_path"].items():
            print(f"  stack component path {path}: {n} files")
        print("  unowned, by directory:")
        for d, n in result["unowned_top_dirs"]:
            print(f"    {n:6d}  {d}")
    run.finish(result)


if __name__ == "__main__":
    main()
