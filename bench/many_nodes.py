#!/usr/bin/env python3
"""Benchmark: many nodes, one image. Bytes read from the shared file system and time to first rank, per
start mode and node count, the parts of a start, and a model of them extrapolated to 1,000 nodes.

On the multi-node cluster of scripts/multinode.py (8 nodes in namespaces on this machine; each node
reads the shared file system through its own counting client, so no node reads from another's page
cache), with IMAGE pushed to a local registry and already in the site's shared store (published once,
as a site's CI does), each mode starts a job on N = 1, 2, 4, 8 nodes whose ranks print the time:

- ``today``: the importer of BASELINE (before this change): every node's first hit hashes the whole
  shared entry, and Pyxis (use_squashfuse=0) unpacks all of it with ``enroot create``;
- ``shared``: ``imagekit launch slurm --stage shared``, Pyxis use_squashfuse=1: each node mounts the
  shared entry and reads the blocks its container touches;
- ``sbcast``: ``--stage sbcast``: one node reads the entry, sbcast sends it through slurmd's tree to
  every node's local disk, each node verifies its copy and mounts it.

Before every job the nodes' and the shared file system's caches of the store are dropped and the
stage directory is new: every start is cold. Counted: bytes each node's client fetched, bytes read
from the shared file system's disk (its loop device), conversions and waits in the importer's log.
Timed: from the job script's first line to the first (and the last) rank's.

Parts, for the model: the importer's ``get`` per mode; mount and container start (``srun
--container-image=LOCAL.sqsh true`` less ``srun true``); the stage step's per-node preparation
(one srun over N nodes); ``sbcast`` for N = 1, 2, 4, 8 at TreeWidth 2 and 8 (hops and fan-out
apart); the sha256 rate. The model (docs/many-nodes.md) takes the measured fixed costs and the
measured structure, and for the 1,000-node, 30 GB case the stated fabric, file system and disk
rates: ``--assume`` overrides them.

    python bench/many_nodes.py [--image imagekit/debian-mpi:latest] [--runs 3] [--baseline COMMIT]

Writes bench/results/many_nodes.json (the model alone: ``--model-only`` re-fits from it).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))
import record  # noqa: E402

BASELINE = "0dbd89e"
MODES = ("today", "shared", "sbcast")
NODES = (1, 2, 4, 8)

# The 1,000-node case: what is assumed, not measured (docs/many-nodes.md says why each).
ASSUME = {
    "nodes": 1000,
    "image_gb": 30.0,
    "entry_ratio": 0.55,          # store entry / image size (measured here: 286 MiB of 549 MB, zstd-3)
    "working_set_gb": 2.0,        # what a PyTorch+CUDA start touches (field-3 §2.2: 1-3 GB)
    "pfs_gb_s": 500.0,            # parallel file system, aggregate read, striped over all OSTs
    "node_pfs_gb_s": 5.0,         # one node's client reading the shared file system
    "link_gb_s": 25.0,            # one node's fabric link (200 Gb/s)
    "disk_gb_s": 5.0,             # node-local NVMe write
    "sha256_gb_s": 2.0,           # one core with SHA extensions (this machine has none: measured below)
    "cores_verify": 1,            # verification is one sequential sha256 per node
    "sbcast_fanout": 8,           # sbcast's tree width: its --fanout, at most 8 (Slurm 22.05)
    "sbcast_block_mb": 8.0,       # sbcast --size (SBCAST_SIZE): one acknowledged round through the tree each
    "block_round_ms": 1.0,        # a block's round trip per tree level beyond its transfer (latency, RPC)
    "srun_1000_s": 2.0,           # srun's launch of a step on 1,000 nodes (no public number: assumed)
}


def sh(argv: list[str], env: dict, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd="/tmp", **kw)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc


def seconds_of(argv: list[str], env: dict) -> float:
    with record.timer() as t:
        sh(argv, env)
    return t.wall


class Bench:
    def __init__(self, cluster, work: Path, uri: str, baseline_src: Path) -> None:
        self.cluster, self.work, self.uri = cluster, work, uri
        self.log = work / "importer.log"
        self.log.touch()
        self.store = cluster.pfs / f"bench-{uuid.uuid4().hex[:6]}"
        self.wrappers = {"new": self._wrapper("new", ROOT / "src"), "today": self._wrapper("today", baseline_src)}
        self.env = {"PATH": os.environ["PATH"], "HOME": "/root", "LANG": "C.UTF-8", "SLURM_CONF": str(cluster.conf)}

    def _wrapper(self, name: str, src: Path) -> Path:
        path = self.work / f"importer-{name}"
        path.write_text("#!/bin/bash\n"
                        f"export PYTHONPATH={src}\nexport IMAGEKIT_SHARED_STORE={self.store}\n"
                        "export ENROOT_ALLOW_HTTP=yes DOCKER_HOST=unix:///nonexistent/docker.sock\n"
                        f"exec 2> >(tee -a {self.log} >&2)\n"
                        f'exec {sys.executable} -m imagekit.export.pyxis_importer "$@"\n')
        path.chmod(0o755)
        return path

    def said(self) -> str:
        return self.log.read_text()

    def publish(self) -> dict:
        """The site's CI puts the image in the shared store (one conversion, outside every job)."""
        from click.testing import CliRunner

        from imagekit.cli import main
        res = CliRunner().invoke(main, ["store", "--store", str(self.store), "init", "--shared", "--group", "0"])
        assert res.exit_code == 0, res.output
        with record.timer() as t:
            out = sh([str(self.wrappers["new"]), "stage", self.uri],
                     {**self.env, "SLURM_JOB_ID": "1", "SLURM_JOB_UID": "0",
                      "XDG_CACHE_HOME": str(self.work / "ci-cache")})
        from imagekit.export.store import Store
        (entry,) = Store.open(self.store, create=False).entries()
        return {"seconds": round(t.wall, 2), "path": str(entry.path), "bytes": entry.bytes,
                "preset": entry.preset,
                "sha256": entry.sha256, "image_id": entry.image_id, "stage_out": out.stdout.strip()}

    def stage_dir(self) -> str:
        """A new, empty stage directory on every node (whichever a job gets); the last one's copies
        removed first (a node's 2 GiB disk holds a few)."""
        for node in self.cluster.nodes:
            for old in (self.cluster.node_local(node) / "scratch").glob("run-*"):
                shutil.rmtree(old, ignore_errors=True)
        d = str(self.cluster.local / "scratch" / f"run-{uuid.uuid4().hex[:6]}")
        sh(["srun", "-N", str(self.cluster.n), "install", "-d", "-m", "1777", d], self.env)
        return d

    def script(self, mode: str, nodes: int, stage_dir: str) -> Path:
        from imagekit.launch import plan, slurm as slurm_mod, targets
        from imagekit.launch.session import LaunchRequest
        job = plan.job(targets.of("slurm"), LaunchRequest(
            self.uri.removeprefix("docker://"), ("sh", "-c", "echo rank $SLURM_PROCID $(date +%s.%N)"), preflight=False,
            options={"nodes": nodes, "stage": "none" if mode == "today" else mode, "stage_dir": stage_dir,
                     "importer": str(self.wrappers["new"])}))
        text = slurm_mod.render(job).replace("set -euo pipefail\n", 'set -euo pipefail\necho "t0 $(date +%s.%N)"\n', 1)
        path = self.work / f"{mode}-{nodes}-{uuid.uuid4().hex[:4]}.sbatch"
        path.write_text(text)
        return path

    def job(self, mode: str, nodes: int) -> dict:
        """One cold start: caches dropped, a new stage directory, counters read around it."""
        self.cluster.pyxis(importer=str(self.wrappers["today" if mode == "today" else "new"]),
                           squashfuse=mode != "today")
        stage_dir = self.stage_dir()
        script = self.script(mode, nodes, stage_dir)
        cache = self.work / f"cache-{uuid.uuid4().hex[:6]}"     # no stamps from an earlier job
        self.cluster.drop_caches()
        reads0, dev0, said0 = self._reads(), self.cluster.pfs_device_reads(), len(self.said())
        out = script.with_suffix(".out")
        wall = seconds_of(["sbatch", "--wait", f"--output={out}", str(script)],
                          {**self.env, "XDG_CACHE_HOME": str(cache)})
        text, said = out.read_text(), self.said()[said0:]
        start = float(next(line.split()[1] for line in text.splitlines() if line.startswith("t0 ")))
        ranks = sorted(float(line.split()[2]) for line in text.splitlines() if line.startswith("rank "))
        assert len(ranks) == nodes, text
        fetched = {n: v - reads0[n] for n, v in self._reads().items()}
        staged = [float(line.rsplit("staged in ", 1)[1].split()[0]) for line in text.splitlines() if "staged in " in line]
        ready = [line for line in text.splitlines() if "stage directories ready" in line]
        prepare_s = float(ready[0].split(" node(s) in ")[1].split()[0]) if ready else 0.0
        sbcast_s = float(ready[0].split(" bytes in ")[1].split()[0]) if ready and " bytes in " in ready[0] else 0.0
        return {"mode": mode, "nodes": nodes, "first_rank_s": round(ranks[0] - start, 2),
                "last_rank_s": round(ranks[-1] - start, 2), "stage_step_s": staged[0] if staged else 0.0,
                "stage_prepare_s": prepare_s, "stage_sbcast_s": sbcast_s,
                "job_wall_s": round(wall, 2), "pfs_bytes_total": sum(fetched.values()),
                "pfs_bytes_per_node": sorted((v for v in fetched.values() if v), reverse=True),
                "pfs_disk_bytes": self.cluster.pfs_device_reads() - dev0,
                "conversions": said.count("converted and stored"), "waits": said.count("waiting for"),
                "node_hashes_of_the_entry": said.count("verifying the staged copy")}

    def _reads(self) -> dict[str, int]:
        return {n: c.get("read_bytes", 0) for n, c in self.cluster.pfs_reads().items()}

    # --- parts --------------------------------------------------------------------------------

    def parts(self, entry: dict, runs: int) -> dict:
        med = lambda xs: round(statistics.median(xs), 3)  # noqa: E731
        out: dict = {}
        node1 = ["-N", "1", "-w", self.cluster.nodes[0]]
        pinned = {"IMAGEKIT_STAGE": "shared", "IMAGEKIT_STAGE_IMAGE": self.uri, "IMAGEKIT_STAGE_IMAGE_ID": entry["image_id"]}
        env = {**self.env, "XDG_CACHE_HOME": str(self.work / "parts-cache")}
        get = ["srun", *node1, str(self.wrappers["new"]), "get", self.uri]
        bare = ["srun", *node1, "true"]
        out["srun_bare_s"] = med([seconds_of(bare, env) for _ in range(runs)])
        out["get_shared_pinned_s"] = med([seconds_of(get, {**env, **pinned}) for _ in range(runs)])
        out["get_resolved_s"] = med([seconds_of(get, env) for _ in range(runs)])       # asks the registry
        stage_dir = self.stage_dir()
        staged = {**pinned, "IMAGEKIT_STAGE": "sbcast", "IMAGEKIT_STAGE_DIR": stage_dir,
                  "IMAGEKIT_STAGE_SHA256": entry["sha256"]}
        # The first get after sbcast verifies the copy: in the staging job itself (its part's name).
        wrapper = self.wrappers["new"]
        sh(["sbatch", "--wait", "-N", "1", "-w", self.cluster.nodes[0], f"--output={self.work / 'stage1.out'}",
            "--wrap", f"{wrapper} stage --mode sbcast {self.uri} >/dev/null && t0=$(date +%s.%N) && "
                      f"{wrapper} get {self.uri} >/dev/null && echo first $t0 $(date +%s.%N)"],
           {**env, **staged, "IMAGEKIT_IMPORTER": str(wrapper)})
        line = next(li for li in (self.work / "stage1.out").read_text().splitlines() if li.startswith("first "))
        t0, t1 = map(float, line.split()[1:])
        out["get_staged_first_s"] = round(t1 - t0, 3)                             # verifies its copy
        out["get_staged_sealed_s"] = med([seconds_of(get, {**env, **staged}) for _ in range(runs)])
        local = Path(stage_dir) / "imagekit-stage-0" / f"{entry['sha256']}.sqsh"
        self.cluster.pyxis(importer=str(self.wrappers["new"]), squashfuse=True)
        start = med([seconds_of(["srun", *node1, f"--container-image={local}", "true"], env) for _ in range(runs)])
        out["mount_and_start_s"] = round(start - out["srun_bare_s"], 3)
        out["prepare_s"] = {}
        for n in NODES:
            d = self.stage_dir()
            out["prepare_s"][n] = med([seconds_of(["srun", "-N", str(n), str(self.wrappers["new"]), "stage-prepare",
                                              entry["sha256"], str(entry["bytes"])],
                                             {**env, "IMAGEKIT_STAGE_DIR": d}) for _ in range(runs)])
        # sbcast's blocks travel a tree of its own --fanout (at most 8; Slurm 22.05's file_bcast.c sets
        # the message's tree width to it), one block at a time, each acknowledged by every node first.
        out["sbcast_s"] = []
        for width in (2, 8):
            for n in NODES:
                self.cluster.drop_caches()
                d = self.stage_dir()
                sh(["sbatch", "--wait", "-N", str(n), f"--output={self.work / 'sbcast.out'}", "--wrap",
                    f"t0=$(date +%s.%N); sbcast --fanout={width} --force {entry['path']} {d}/x && "
                    "echo sbcast $t0 $(date +%s.%N)"], env)
                said = (self.work / "sbcast.out").read_text()
                line = next((li for li in said.splitlines() if li.startswith("sbcast ")), None)
                got = [(self.cluster.node_local(node) / Path(d).relative_to(self.cluster.local) / "x")
                       for node in self.cluster.nodes]
                if line is None or sum(p.exists() and p.stat().st_size == entry["bytes"] for p in got) != n:
                    raise SystemExit(f"sbcast to {n} node(s) at TreeWidth {width} failed: {said[-1500:]}")
                t0, t1 = map(float, line.split()[1:])
                out["sbcast_s"].append({"nodes": n, "fanout_option": width, "hops": hops(n, width),
                                        "fanout": min(n, width), "seconds": round(t1 - t0, 3)})
        from imagekit.util import digests
        with record.timer() as t:
            digests.sha256_file(entry["path"])
            digests.sha256_file(entry["path"])
        out["sha256_gb_s_here"] = round(2 * entry["bytes"] / t.wall / 1e9, 3)
        return out


def hops(n: int, width: int) -> int:
    """The depth of Slurm's message tree (route/default) from the sender to ``n`` nodes: the nodes are
    split into ``width`` spans, each span's first node forwarding to the rest of its span alike."""
    if n <= 0:
        return 0
    return 1 + hops(math.ceil(n / width) - 1, width)


# --- the model -----------------------------------------------------------------------------------

def least_squares(rows: list[list[float]], ys: list[float]) -> list[float]:
    """Solve min |A x - y| for a few columns (normal equations; no numpy needed)."""
    k = len(rows[0])
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    aty = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(k)]
    for i in range(k):                     # Gauss-Jordan
        p = max(range(i, k), key=lambda r: abs(ata[r][i]))
        ata[i], ata[p], aty[i], aty[p] = ata[p], ata[i], aty[p], aty[i]
        for r in range(k):
            if r != i and ata[i][i]:
                f = ata[r][i] / ata[i][i]
                ata[r] = [a - f * b for a, b in zip(ata[r], ata[i])]
                aty[r] -= f * aty[i]
    return [aty[i] / ata[i][i] if ata[i][i] else 0.0 for i in range(k)]


def fit(doc: dict, assume: dict) -> dict:
    """T(N, size) per mode: the measured parts and structure, then the 1,000-node case from ``assume``."""
    parts, size = doc["parts"], doc["entry"]["bytes"]
    gb = size / 1e9
    # sbcast: seconds = a + size * (b * hops + c * fanout): per byte, a cost per hop (store and forward
    # of each block) and one per copy the busiest sender makes (its egress is shared by its children).
    rows = [[1.0, gb * r["hops"], gb * r["fanout"]] for r in parts["sbcast_s"]]
    a, b, c = least_squares(rows, [r["seconds"] for r in parts["sbcast_s"]])
    prep = [(int(n), s) for n, s in parts["prepare_s"].items()]
    p0, p1 = least_squares([[1.0, math.log2(n) + 1] for n, _ in prep], [s for _, s in prep])
    fixed = {"get_shared_s": parts["get_shared_pinned_s"] - parts["srun_bare_s"],
             "get_staged_sealed_s": parts["get_staged_sealed_s"] - parts["srun_bare_s"],
             "mount_and_start_s": parts["mount_and_start_s"], "srun_s": parts["srun_bare_s"]}
    here = {"sbcast": {"a_s": round(a, 3), "per_gb_per_hop_s": round(b, 3), "per_gb_per_child_s": round(c, 3)},
            "prepare": {"p0_s": round(p0, 3), "per_tree_level_s": round(p1, 3)},
            "fixed": {k: round(v, 3) for k, v in fixed.items()},
            "sha256_gb_s": parts["sha256_gb_s_here"]}
    # The 1,000-node, 30 GB case. Fixed costs are this machine's (a busy 2-core VM: pessimistic);
    # bandwidth terms come from the assumptions.
    n, S = assume["nodes"], assume["image_gb"] * assume["entry_ratio"]
    W, B = assume["working_set_gb"], assume["pfs_gb_s"]
    per_node_pfs = min(assume["node_pfs_gb_s"], B / n)
    h, f = hops(n, assume["sbcast_fanout"]), min(n, assume["sbcast_fanout"])
    blocks = S * 1000 / assume["sbcast_block_mb"]
    stage_step = fixed["get_shared_s"] + p0 + p1 * (math.log2(n) + 1)        # resolve + prepare on every node
    start = assume["srun_1000_s"] + fixed["mount_and_start_s"]
    terms = {
        "today": {"every node reads the whole entry (its hash, then the unpack from its page cache): N*S / PFS":
                      n * S / B,
                  "hash of the entry on each node": S / assume["sha256_gb_s"],
                  "enroot create: unpack the entry on each node": 2 * S / assume["disk_gb_s"],
                  "importer get": fixed["get_shared_s"], "srun + mount + start": start},
        "shared": {"stage step (resolve once, fill check, pinned)": fixed["get_shared_s"],
                   "importer get (seal: no read)": fixed["get_shared_s"],
                   "working set over the node's share of the PFS: W / min(node, PFS/N)": W / per_node_pfs,
                   "srun + mount + start": start},
        "sbcast": {"stage step (resolve, prepare on every node)": stage_step,
                   "read the entry once from the PFS": S / min(assume["node_pfs_gb_s"], B),
                   f"sbcast, one block at a time through {h} levels, each sender feeding {f} children: "
                   "S*h*f/link + blocks*h*round":
                       S * h * f / assume["link_gb_s"] + blocks * h * assume["block_round_ms"] / 1000,
                   "verify the local copy (sha256)": S / (assume["sha256_gb_s"] * assume["cores_verify"]),
                   "importer get (sealed copy)": fixed["get_staged_sealed_s"], "srun + mount + start": start},
        "sbcast, staged before the job (prolog)": {
                   "importer get (sealed copy)": fixed["get_staged_sealed_s"], "srun + mount + start": start},
    }
    model = {m: {"terms_s": {k: round(v, 2) for k, v in t.items()}, "total_s": round(sum(t.values()), 1),
                 "largest_term": max(t, key=t.get)} for m, t in terms.items()}
    return {"fitted_here": here, "assume": assume, "at_scale": model}


ANCHORS = [
    ("DADI (Alibaba), 1,000 hosts, 10,000 containers, lazy block loading", "cold start <= 4 s"),
    ("Kraken (Uber), >= 15k hosts, blobs 100 MB-1 GB, P2P", "20K blobs < 30 s"),
    ("GKE image streaming, one node, large DL image", "20 s vs 3 min 50 s"),
    ("AWS DLC without SOCI, 15-20 GB", "4-6 min per instance"),
    ("imagekit before this change, 1,000 nodes, 30 GB (perf-3's estimate)", "13-24 min"),
]


def report(doc: dict) -> None:
    print("\n| mode | N | first rank | last rank | stage step | shared FS read (all nodes) | per node (max) "
          "| shared FS disk | conversions | waits |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in doc["jobs"]:
        print(f"| {r['mode']} | {r['nodes']} | {r['first_rank_s']} s | {r['last_rank_s']} s | {r['stage_step_s']} s "
              f"| {r['pfs_bytes_total'] / 2**20:,.1f} MiB | {max(r['pfs_bytes_per_node']) / 2**20:,.1f} MiB "
              f"| {r['pfs_disk_bytes'] / 2**20:,.1f} MiB | {r['conversions']} | {r['waits']} |")
    model = doc["model"]
    print(f"\nfitted here: {json.dumps(model['fitted_here'])}")
    print(f"\n1,000 nodes, {model['assume']['image_gb']:.0f} GB image: modelled first rank")
    for mode, m in model["at_scale"].items():
        print(f"- {mode}: {m['total_s']} s (largest term: {m['largest_term']})")
    print("\npublished anchors:")
    for what, number in ANCHORS:
        print(f"- {what}: {number}")


def main() -> None:
    ap = record.parser(__doc__)
    ap.add_argument("--image", default="imagekit/debian-mpi:latest")
    ap.add_argument("--runs", type=int, default=3, help="repeats of each part (median)")
    ap.add_argument("--baseline", default=BASELINE)
    ap.add_argument("--assume", action="append", default=[], metavar="KEY=VALUE", help="override an assumption")
    ap.add_argument("--model-only", action="store_true", help="re-fit the model from the last results")
    args = ap.parse_args()
    assume = dict(ASSUME)
    for item in args.assume:
        key, value = item.split("=", 1)
        assume[key] = type(ASSUME[key])(value)
    if args.model_only:
        # A re-fit keeps the measurement's own commit, machine and load: only the model changes.
        path = args.out or record.RESULTS / "many_nodes.json"
        doc = json.loads(path.read_text())
        doc["model"] = fit(doc, assume)
        if args.json:
            print(json.dumps(doc, indent=1))
        else:
            report(doc)
        record.write_json(path, doc)
        return
    import multinode
    from helpers.local_registry import running_registry

    from imagekit.export.push import push_image

    run = record.start("many_nodes", args)
    cluster = multinode.MultiCluster(nodes=8, tree_width=2).hold(squashfuse=True)
    work = Path(tempfile.mkdtemp(prefix="bench-many-", dir="/var/tmp"))
    try:
        with running_registry(work / "registry", listen="0.0.0.0") as addr:
            push_image(args.image, f"{addr}/bench/many:1")
            uri = f"docker://{addr.replace('127.0.0.1', cluster.head)}#bench/many:1"
            baseline = work / "baseline"
            baseline.mkdir()
            subprocess.run(f"git -C {ROOT} archive {args.baseline} src | tar -x -C {baseline}", shell=True, check=True)
            bench = Bench(cluster, work, uri, baseline / "src")
            entry = bench.publish()
            print(f"published: {entry}", flush=True)
            jobs = []
            for nodes in NODES:
                for mode in MODES:
                    row = bench.job(mode, nodes)
                    print(row, flush=True)
                    jobs.append(row)
            parts = bench.parts(entry, args.runs)
            print(f"parts: {parts}", flush=True)
    finally:
        cluster.pyxis(squashfuse=True)
        cluster.release()
        shutil.rmtree(work, ignore_errors=True)
    doc = {"image": args.image, "baseline": args.baseline, "entry": entry, "jobs": jobs, "parts": parts,
           "cluster": {"nodes": 8, "tree_width": 2, "shared_fs": "ext4 on a loop device, one counting FUSE "
                       "client per node", "node_disk": "ext4 on a loop device per node"}}
    doc["model"] = fit(doc, assume)
    report(doc)
    run.finish(doc)


if __name__ == "__main__":
    main()
