#!/usr/bin/env python3
"""Benchmark: many nodes, one image, measured as readiness: the time from the job's first line to the
first successful MPI allreduce across all its ranks (a job is ready when its last rank is), per start
mode and node count, with the bytes each read from the shared file system; the terms of a model
measured here with their commands; and the model's 1,000-node, 30 GB result as a range per mode.

On the multi-node cluster of scripts/multinode.py (8 nodes in namespaces on this machine; each node
reads the shared file system through its own counting client, so no node reads from another's page
cache), with IMAGE pushed to a local registry and already in the site's shared store (published once,
as a site's CI does), each job runs ``imagekit-mpi-ring`` (a ring and an MPI_Allreduce over every rank)
under ``srun --mpi=pmix --container-image``, and every rank prints the time once the allreduce is done:

- ``enroot``: stock Pyxis, no importer: ``enroot import docker://`` on every node (each pulls the image
  from the registry, unpacks it, makes a squashfs), then ``enroot create`` (what sites run today);
- ``none``: the importer without a stage step: each node resolves the tag and serves the shared store's
  entry (Pyxis use_squashfuse=1: mounted lazily);
- ``shared``: ``imagekit launch slurm --stage shared``: the job is pinned to the entry by one stage step;
- ``sbcast``: ``--stage sbcast``: one node reads the entry, sbcast sends it through slurmd's tree to
  every node's local disk, each node verifies its copy and mounts it;
- ``staged``: the same job again on the same nodes: every node holds its sealed copy (left by an earlier
  job, or a site's staging job), the stage step finds them and sends nothing;
- ``prolog``: no stage step: Slurm's Prolog (PrologFlags=Alloc) stages the site's image on every node of
  the job before its script, with imagekit's own commands (``stage-prepare``, a copy from the shared
  store, a ``get`` that verifies and seals it: :data:`PROLOG_SITE`), and the job's environment names the
  node-local copy (IMAGEKIT_STAGE=sbcast, set by the job itself); ``prolog-warm``: the next such job,
  the copies already on the nodes (the prolog finds them sealed and copies nothing).

Before every job the nodes' and the shared file system's caches are dropped (and Enroot's layer caches
emptied): every start is cold, but for the copies ``staged`` is about.

Parts, for the model, each a command run here (medians of --runs): ``srun -N n true`` for every n (the
launch's cost per node and per tree level); the importer's ``get`` per kind; reading every file of the
entry cold through squashfuse and through the kernel's squashfs (MB/s of file data); container start,
PMIx wire-up and the allreduce from a local copy on n nodes (``srun -N n --mpi=pmix
--container-image=LOCAL imagekit-mpi-ring`` less ``srun -N n true``); the stage step's per-node
preparation; ``sbcast`` for every n at --fanout 2 and 8 (per hop and per child); sha256. The model
(docs/many-nodes.md) prices each mode at 1,000 nodes and 30 GB from these and from ranges for what
one machine cannot show (the parallel file system, the fabric, srun and PMIx at scale): ``--assume
KEY=LO,HI`` overrides one.

    python bench/many_nodes.py [--image imagekit/debian-mpi:latest] [--nodes 2,8] [--runs 3] [--modes enroot,shared]

Writes bench/results/many_nodes.json (the model alone: ``--model-only`` re-fits from it).
"""

from __future__ import annotations

import contextlib
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

MODES = ("enroot", "none", "shared", "sbcast", "staged", "prolog", "prolog-warm")
NODES = (1, 2, 4, 8)
RING = "/usr/local/bin/imagekit-mpi-ring"
READY = f"{RING} >/dev/null && echo ready $SLURM_PROCID $(date +%s.%N)"

# The site's hook for Slurm's Prolog (scripts/multinode.py runs it as root on every node of a job, before
# the job's script): the image on this node's local disk for the job's user, made by imagekit's own
# commands, so that the job's importer serves a sealed local copy and reads nothing shared.
PROLOG_SITE = """#!/bin/bash
set -eu
as_user() {{
    runuser -u "$SLURM_JOB_USER" -- env SLURM_JOB_ID="$SLURM_JOB_ID" SLURM_STEP_ID=prolog \\
        SLURM_JOB_UID="$SLURM_JOB_UID" IMAGEKIT_STAGE=sbcast IMAGEKIT_STAGE_DIR={dir} \\
        IMAGEKIT_STAGE_IMAGE={uri} IMAGEKIT_STAGE_IMAGE_ID={image_id} IMAGEKIT_STAGE_SHA256={sha} "$@"
}}
if [ "$(as_user {importer} stage-prepare {sha} {size} | awk '{{print $2}}')" = need ]; then
    as_user cp {entry} "{dir}/imagekit-stage-$SLURM_JOB_UID/{sha}.part-$SLURM_JOB_ID"   # stage.PART
    as_user {importer} get {uri} >/dev/null      # verifies the copy and seals it
    as_user {importer} release
fi
"""

# The 1,000-node, 30 GB case: what one machine cannot show, as (optimistic, pessimistic) ranges, each
# with why (docs/many-nodes.md, "The model"). --assume KEY=LO,HI overrides one.
ASSUME = {
    "nodes": (1000, 1000),
    "image_gb": (30.0, 30.0),
    "entry_ratio": (0.55, 0.55),        # store entry / image (measured: zstd-3 of debian-mpi, debian-cuda)
    "compressed_ratio": (0.4, 0.4),     # registry layers (gzip) / image
    "working_set_gb": (1.0, 3.0),       # what a PyTorch + CUDA start touches (field-3 §2.2)
    "pfs_gb_s": (500.0, 50.0),          # effective aggregate read: nameplate, striped / correlated, busy
    "node_pfs_gb_s": (5.0, 1.0),        # one node's client of the parallel file system
    "pfs_metadata_s": (0.0, 2.0),       # 1,000 opens and layout locks of one file on one MDS
    "pfs_round_trip_ms": (0.2, 2.0),    # one block's read round trip through a lazy mount
    "registry_gb_s": (100.0, 10.0),     # a registry's (or its cache's) egress to 1,000 nodes
    "node_cores": (128, 32),            # enroot import's unpack and mksquashfs on one node
    "link_gb_s": (25.0, 2.5),           # sbcast's per-hop rate: link speed / slurmd's store and forward
    "disk_gb_s": (5.0, 1.0),            # node-local NVMe
    "srun_tree_width": (50, 8),         # slurm.conf TreeWidth (50, Slurm's default: 2 levels to 1,000 nodes)
    "srun_scale": (1.0, 3.0),           # a real cluster's launch per tree level / this machine's
    "wireup_s": (0.5, 3.0),             # PMIx wire-up and the first allreduce on 1,000 nodes
    "container_start_s": (0.5, 0.0),    # mount and start on one node; 0: as measured here (this loaded VM)
    "sha256_gb_s": (2.0, 0.0),          # one core with SHA extensions; 0: as measured here
    "squashfuse_speedup": (4.0, 1.0),   # a compute node's squashfuse / this loaded VM's
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
    def __init__(self, cluster, work: Path, uri: str) -> None:
        self.cluster, self.work, self.uri = cluster, work, uri
        self.log = work / "importer.log"
        self.log.touch()
        self.store = cluster.pfs / f"bench-{uuid.uuid4().hex[:6]}"
        self.wrapper = self._wrapper(ROOT / "src")
        self.env = {"PATH": os.environ["PATH"], "HOME": "/root", "LANG": "C.UTF-8", "SLURM_CONF": str(cluster.conf)}
        self.last_stage_dir = ""
        self.entry: dict = {}

    def _wrapper(self, src: Path) -> Path:
        path = self.work / "importer"
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
            out = sh([str(self.wrapper), "stage", self.uri],
                     {**self.env, "SLURM_JOB_ID": "1", "SLURM_JOB_UID": "0",
                      "XDG_CACHE_HOME": str(self.work / "ci-cache")})
        from imagekit.export.store import Store
        (entry,) = Store.open(self.store, create=False).entries()
        self.entry = {"seconds": round(t.wall, 2), "path": str(entry.path), "bytes": entry.bytes,
                      "preset": entry.preset,
                      "sha256": entry.sha256, "image_id": entry.image_id, "stage_out": out.stdout.strip()}
        return self.entry

    def stage_dir(self) -> str:
        """A new, empty stage directory on every node (whichever a job gets); the last one's copies
        removed first (a node's 2 GiB disk holds a few)."""
        for node in self.cluster.nodes:
            for old in (self.cluster.node_local(node) / "scratch").glob("run-*"):
                shutil.rmtree(old, ignore_errors=True)
        d = str(self.cluster.local / "scratch" / f"run-{uuid.uuid4().hex[:6]}")
        sh(["srun", "-N", str(self.cluster.n), "install", "-d", "-m", "1777", d], self.env)
        return d

    def cold_enroot(self) -> None:
        """Every node's Enroot layer cache and containers emptied: `enroot import` pulls everything."""
        for node in self.cluster.nodes:
            for sub in ("enroot/cache", "enroot/data"):
                for old in (self.cluster.node_local(node) / sub).glob("*"):
                    shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)

    def script(self, mode: str, nodes: int, stage_dir: str) -> Path:
        from imagekit.launch import plan, slurm as slurm_mod, targets
        from imagekit.launch.session import LaunchRequest
        stage = {"enroot": "none", "none": "none", "staged": "sbcast"}.get(mode, mode)
        job = plan.job(targets.of("slurm"), LaunchRequest(
            self.uri.removeprefix("docker://"), ("sh", "-c", READY), preflight=False,
            options={"nodes": nodes, "stage": stage, "stage_dir": stage_dir, "importer": str(self.wrapper)}))
        text = slurm_mod.render(job).replace("set -euo pipefail\n", 'set -euo pipefail\necho "t0 $(date +%s.%N)"\n', 1)
        path = self.work / f"{mode}-{nodes}-{uuid.uuid4().hex[:4]}.sbatch"
        path.write_text(text)
        return path

    def prolog_script(self, nodes: int, stage_dir: str) -> Path:
        """A job that names the node-local copy its prolog made: no stage step."""
        e = self.entry
        path = self.work / f"prolog-{nodes}-{uuid.uuid4().hex[:4]}.sbatch"
        path.write_text("#!/bin/bash\n"
                        f"#SBATCH --nodes={nodes}\n"
                        "set -euo pipefail\n"
                        'echo "t0 $(date +%s.%N)"\n'
                        f"export IMAGEKIT_STAGE=sbcast IMAGEKIT_STAGE_DIR={stage_dir} IMAGEKIT_STAGE_IMAGE={self.uri} "
                        f"IMAGEKIT_STAGE_IMAGE_ID={e['image_id']} IMAGEKIT_STAGE_SHA256={e['sha256']}\n"
                        f"srun --mpi=pmix --container-image={self.uri.removeprefix('docker://')} sh -c '{READY}'\n")
        return path

    def job(self, mode: str, nodes: int) -> dict:
        """One start: caches dropped (``staged`` and ``prolog-warm`` keep the nodes' copies), counters
        read around it."""
        from helpers.enroot_conf import allows_http

        self.cluster.pyxis(importer=None if mode == "enroot" else str(self.wrapper), squashfuse=mode != "enroot")
        if mode in ("staged", "prolog-warm") and self.last_stage_dir:
            stage_dir = self.last_stage_dir
        else:
            stage_dir = self.stage_dir()
        self.last_stage_dir = stage_dir if mode in ("sbcast", "prolog") else ""
        if mode == "enroot":
            self.cold_enroot()
        if mode.startswith("prolog"):
            e = self.entry
            self.cluster.prolog_site.write_text(PROLOG_SITE.format(
                dir=stage_dir, uri=self.uri, image_id=e["image_id"], sha=e["sha256"], size=e["bytes"],
                entry=e["path"], importer=self.wrapper))
            self.cluster.prolog_site.chmod(0o755)
            script = self.prolog_script(nodes, stage_dir)
        else:
            self.cluster.prolog_site.unlink(missing_ok=True)
            script = self.script(mode, nodes, stage_dir)
        cache = self.work / f"cache-{uuid.uuid4().hex[:6]}"     # no stamps from an earlier job
        self.cluster.drop_caches()
        reads0, dev0, said0 = self._reads(), self.cluster.pfs_device_reads(), len(self.said())
        out = script.with_suffix(".out")
        try:
            with allows_http() if mode == "enroot" else contextlib.nullcontext():
                wall = seconds_of(["sbatch", "--wait", f"--output={out}", str(script)],
                                  {**self.env, "XDG_CACHE_HOME": str(cache)})
        except SystemExit as exc:
            said = out.read_text()[-3000:] if out.exists() else ""
            raise SystemExit(f"{exc}\n{mode} job on {nodes} node(s) said:\n{said}") from None
        finally:
            self.cluster.prolog_site.unlink(missing_ok=True)
        text, said = out.read_text(), self.said()[said0:]
        start = float(next(line.split()[1] for line in text.splitlines() if line.startswith("t0 ")))
        ready = sorted(float(line.split()[2]) for line in text.splitlines() if line.startswith("ready "))
        assert len(ready) == nodes, text
        fetched = {n: v - reads0[n] for n, v in self._reads().items()}
        staged = [float(line.rsplit("staged in ", 1)[1].split()[0]) for line in text.splitlines() if "staged in " in line]
        ready_line = [line for line in text.splitlines() if "stage directories ready" in line]
        prepare_s = float(ready_line[0].split(" node(s) in ")[1].split()[0]) if ready_line else 0.0
        sbcast_s = (float(ready_line[0].split(" bytes in ")[1].split()[0])
                    if ready_line and " bytes in " in ready_line[0] else 0.0)
        return {"mode": mode, "nodes": nodes, "ready_s": round(ready[0] - start, 2),
                "ready_last_rank_s": round(ready[-1] - start, 2), "stage_step_s": staged[0] if staged else 0.0,
                "stage_prepare_s": prepare_s, "stage_sbcast_s": sbcast_s,
                "job_wall_s": round(wall, 2), "pfs_bytes_total": sum(fetched.values()),
                "pfs_bytes_per_node": sorted((v for v in fetched.values() if v), reverse=True),
                "pfs_disk_bytes": self.cluster.pfs_device_reads() - dev0,
                "registry_bytes": nodes * self.compressed if mode == "enroot" else 0,
                "conversions": said.count("converted and stored"), "waits": said.count("waiting for"),
                "node_hashes_of_the_entry": said.count("verifying the staged copy")}

    compressed = 0          # the image's layers as the registry stores them (set by main)

    def _reads(self) -> dict[str, int]:
        return {n: c.get("read_bytes", 0) for n, c in self.cluster.pfs_reads().items()}

    # --- parts --------------------------------------------------------------------------------

    def read_rate(self, entry: dict, how: str) -> dict:
        """Every file of the entry read once, cold, on the first node: through squashfuse (as Pyxis
        mounts it, as the job's user would) or the kernel's squashfs (a loop mount, as root or a
        prolog does). MB/s of file data; the entry is read from the shared file system."""
        node = self.cluster.nodes[0]
        mnt = self.cluster.local / "scratch" / f"mnt-{uuid.uuid4().hex[:6]}"
        self.cluster.on(node, ["mkdir", "-p", str(mnt)], check=True)
        mount = (["squashfuse", "-o", "ro", entry["path"], str(mnt)] if how == "squashfuse"
                 else ["mount", "-t", "squashfs", "-o", "loop,ro", entry["path"], str(mnt)])
        self.cluster.drop_caches()
        try:
            got = self.cluster.on(node, mount)
            if got.returncode != 0:
                return {"error": got.stdout.strip()[-300:]}
            with record.timer() as t:
                out = self.cluster.on(node, ["sh", "-c", f"tar -C {mnt} -cf - . | wc -c"], check=True)
            data = int(out.stdout.split()[-1])
        finally:
            self.cluster.on(node, ["umount", str(mnt)])
            self.cluster.on(node, ["rmdir", str(mnt)])
        return {"command": " ".join(mount) + " && tar -C MNT -cf - . | wc -c",
                "file_bytes": data, "seconds": round(t.wall, 3), "mb_s": round(data / t.wall / 1e6, 1)}

    def parts(self, entry: dict, runs: int, nodes: tuple[int, ...]) -> dict:
        med = lambda xs: round(statistics.median(xs), 3)  # noqa: E731
        out: dict = {"commands": {}}
        node1 = ["-N", "1", "-w", self.cluster.nodes[0]]
        pinned = {"IMAGEKIT_STAGE": "shared", "IMAGEKIT_STAGE_IMAGE": self.uri, "IMAGEKIT_STAGE_IMAGE_ID": entry["image_id"]}
        env = {**self.env, "XDG_CACHE_HOME": str(self.work / "parts-cache")}
        get = ["srun", *node1, str(self.wrapper), "get", self.uri]
        out["srun_s"] = {n: med([seconds_of(["srun", "-N", str(n), "true"], env) for _ in range(runs)]) for n in nodes}
        out["commands"]["srun_s"] = "srun -N n true"
        out["srun_bare_s"] = out["srun_s"][1]
        out["get_shared_pinned_s"] = med([seconds_of(get, {**env, **pinned}) for _ in range(runs)])
        out["get_resolved_s"] = med([seconds_of(get, env) for _ in range(runs)])       # asks the registry
        out["commands"]["get"] = "srun -N 1 IMPORTER get URI (pinned: IMAGEKIT_STAGE_IMAGE_ID set)"
        stage_dir = self.stage_dir()
        staged = {**pinned, "IMAGEKIT_STAGE": "sbcast", "IMAGEKIT_STAGE_DIR": stage_dir,
                  "IMAGEKIT_STAGE_SHA256": entry["sha256"]}
        wrapper = self.wrapper
        # The stage step on every node: the copies every later part mounts.
        # The first get on each node verifies its copy and seals it; the first node's is timed.
        sh(["sbatch", "--wait", "-N", str(self.cluster.n), f"--output={self.work / 'stage1.out'}",
            "--wrap", f"{wrapper} stage --mode sbcast {self.uri} >/dev/null && t0=$(date +%s.%N) && "
                      f"{wrapper} get {self.uri} >/dev/null && echo first $t0 $(date +%s.%N) && "
                      f"srun -N {self.cluster.n} {wrapper} get {self.uri} >/dev/null"],
           {**env, **staged, "IMAGEKIT_IMPORTER": str(wrapper)})
        line = next(li for li in (self.work / "stage1.out").read_text().splitlines() if li.startswith("first "))
        t0, t1 = map(float, line.split()[1:])
        out["get_staged_first_s"] = round(t1 - t0, 3)                             # verifies its copy
        out["get_staged_sealed_s"] = med([seconds_of(get, {**env, **staged}) for _ in range(runs)])
        local = Path(stage_dir) / "imagekit-stage-0" / f"{entry['sha256']}.sqsh"
        self.cluster.pyxis(importer=str(self.wrapper), squashfuse=True)
        out["start_wireup_allreduce_s"] = {}
        for n in nodes:
            took = med([seconds_of(["srun", "-N", str(n), "--mpi=pmix", f"--container-image={local}", RING], env)
                        for _ in range(runs)])
            out["start_wireup_allreduce_s"][n] = round(took - out["srun_s"][n], 3)
        out["commands"]["start_wireup_allreduce_s"] = (f"srun -N n --mpi=pmix --container-image=LOCAL.sqsh {RING}, "
                                                       "less srun -N n true")
        out["mount_and_start_s"] = out["start_wireup_allreduce_s"][1]
        out["read_rate"] = {how: self.read_rate(entry, how) for how in ("squashfuse", "kernel")}
        out["prepare_s"] = {}
        for n in nodes:
            d = self.stage_dir()
            out["prepare_s"][n] = med([seconds_of(["srun", "-N", str(n), str(self.wrapper), "stage-prepare",
                                              entry["sha256"], str(entry["bytes"])],
                                             {**env, "IMAGEKIT_STAGE_DIR": d}) for _ in range(runs)])
        # sbcast's blocks travel a tree of its own --fanout (at most 8; Slurm 22.05's file_bcast.c sets
        # the message's tree width to it), one block at a time, each acknowledged by every node first.
        out["sbcast_s"] = []
        for width in (2, 8):
            for n in nodes:
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
        out["commands"]["sbcast_s"] = "sbatch -N n --wrap 'sbcast --fanout=F --force ENTRY DIR/x'"
        from imagekit.util import digests
        with record.timer() as t:
            digests.sha256_file(entry["path"])
            digests.sha256_file(entry["path"])
        out["sha256_gb_s_here"] = round(2 * entry["bytes"] / t.wall / 1e9, 3)
        out["commands"]["sha256_gb_s_here"] = "imagekit.util.digests.sha256_file(ENTRY), twice, page cache warm"
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


def fitted(doc: dict) -> dict:
    """What the measurements here say, as rates and per-level costs (each with the part it came from)."""
    parts, size = doc["parts"], doc["entry"]["bytes"]
    gb = size / 1e9
    rows = [[1.0, gb * r["hops"], gb * r["fanout"]] for r in parts["sbcast_s"]]
    a, b, c = least_squares(rows, [r["seconds"] for r in parts["sbcast_s"]])
    srun = [(int(n), s) for n, s in parts["srun_s"].items()]
    width = doc["cluster"]["tree_width"]
    s0, s1 = least_squares([[1.0, hops(n, width)] for n, _ in srun], [s for _, s in srun])
    start = [(int(n), s) for n, s in parts["start_wireup_allreduce_s"].items()]
    w0, w1 = least_squares([[1.0, math.log2(n) + 1] for n, _ in start], [s for _, s in start])
    prep = [(int(n), s) for n, s in parts["prepare_s"].items()]
    p0, p1 = least_squares([[1.0, math.log2(n) + 1] for n, _ in prep], [s for _, s in prep])
    fuse = parts["read_rate"].get("squashfuse", {}).get("mb_s") or 0.0
    kernel = parts["read_rate"].get("kernel", {}).get("mb_s") or 0.0
    enroot = [j for j in doc["jobs"] if j["mode"] == "enroot"]
    return {"sbcast": {"a_s": round(a, 3), "per_gb_per_hop_s": round(b, 3), "per_gb_per_child_s": round(c, 3),
                       "gb_s_per_hop": round(1 / b, 3) if b > 0 else None},
            "srun": {"s0_s": round(s0, 3), "per_tree_level_s": round(s1, 3), "tree_width": width},
            "start_wireup_allreduce": {"w0_s": round(w0, 3), "per_doubling_s": round(w1, 3)},
            "start_1_node_s": parts["start_wireup_allreduce_s"][min(parts["start_wireup_allreduce_s"], key=int)],
            "prepare": {"p0_s": round(p0, 3), "per_doubling_s": round(p1, 3)},
            "get": {"pinned_s": round(parts["get_shared_pinned_s"] - parts["srun_bare_s"], 3),
                    "resolved_s": round(parts["get_resolved_s"] - parts["srun_bare_s"], 3),
                    "staged_sealed_s": round(parts["get_staged_sealed_s"] - parts["srun_bare_s"], 3)},
            "squashfuse_mb_s": fuse, "kernel_squashfs_mb_s": kernel,
            "sha256_gb_s": parts["sha256_gb_s_here"],
            "enroot_import_s_per_gb_of_image": round(
                statistics.median(j["ready_s"] / j["nodes"] for j in enroot) / (doc["image_bytes"] / 1e9), 2)
            if enroot else None}


def terms_at(here: dict, a: dict) -> dict[str, dict[str, float]]:
    """Each mode's terms (seconds) at scale for one set of assumptions ``a`` (one end of each range)."""
    n, gb = a["nodes"], a["image_gb"]
    S, W = gb * a["entry_ratio"], a["working_set_gb"]
    levels = hops(n, a["srun_tree_width"])
    srun = a["srun_scale"] * (here["srun"]["s0_s"] + here["srun"]["per_tree_level_s"] * levels)
    start = (a["container_start_s"] or here["start_1_node_s"]) + a["wireup_s"]
    sha256 = a["sha256_gb_s"] or here["sha256_gb_s"]
    per_node_pfs = min(a["node_pfs_gb_s"], a["pfs_gb_s"] / n)
    fuse = here["squashfuse_mb_s"] / 1000 * a["squashfuse_speedup"]
    blocks = W * 1000               # 1 MiB blocks (shared-fs): one round trip each, in series per reader
    lazy = max(W / per_node_pfs, W / fuse if fuse else 0) + blocks * a["pfs_round_trip_ms"] / 1000
    h, f = hops(n, 8), min(n, 8)
    get = here["get"]
    shared = {"srun (the job step)": srun, "importer get, pinned (seal: no read)": get["pinned_s"],
              "PFS metadata (1,000 opens)": a["pfs_metadata_s"],
              "working set through squashfuse over the node's PFS share (+ a round trip a block)": lazy,
              "container start, PMIx wire-up, first allreduce": start}
    return {
        "enroot": {"srun (the job step)": srun,
                   "every node pulls the compressed image: N*C / registry": n * gb * a["compressed_ratio"] / a["registry_gb_s"],
                   "unpack + mksquashfs lzo + enroot create, per node (measured here per GB, on the node's cores)":
                       (here["enroot_import_s_per_gb_of_image"] or 0) * gb * 2 / a["node_cores"],
                   "container start, PMIx wire-up, first allreduce": start},
        "none": {**shared, "importer get, resolving at the registry": get["resolved_s"]},
        "shared": {**shared, "stage step: its own srun and get": srun + get["pinned_s"]},
        "sbcast": {"stage step: its own srun, get, prepare on every node": 2 * srun + get["pinned_s"]
                   + here["prepare"]["p0_s"] + here["prepare"]["per_doubling_s"] * (math.log2(n) + 1),
                   "read the entry once from the PFS": S / min(a["node_pfs_gb_s"], a["pfs_gb_s"]),
                   f"sbcast: one block at a time, {h} levels, {f} children a sender: S*h*f / per-hop rate":
                       S * h * f / a["link_gb_s"],
                   "verify the local copy (sha256)": S / sha256,
                   "importer get (sealed copy)": get["staged_sealed_s"], "srun (the job step)": srun,
                   "container start, PMIx wire-up, first allreduce": start},
        "staged": {"stage step: its own srun, get, every node reports its copy": 2 * srun + get["pinned_s"]
                   + here["prepare"]["p0_s"] + here["prepare"]["per_doubling_s"] * (math.log2(n) + 1),
                   "importer get (sealed copy)": get["staged_sealed_s"], "srun (the job step)": srun,
                   "container start, PMIx wire-up, first allreduce": start},
        "prolog": {"the prolog copies the entry from the PFS: S / min(node, PFS/N)": S / per_node_pfs,
                   "the prolog verifies and seals it (sha256)": S / sha256,
                   "importer get (sealed copy)": get["staged_sealed_s"], "srun (the job step)": srun,
                   "container start, PMIx wire-up, first allreduce": start},
        "prolog-warm": {"the prolog finds the sealed copy (stage-prepare)": here["prepare"]["p0_s"],
                        "importer get (sealed copy)": get["staged_sealed_s"], "srun (the job step)": srun,
                        "container start, PMIx wire-up, first allreduce": start},
    }


def fit(doc: dict, assume: dict) -> dict:
    """The model at scale, as a range: every term at the optimistic end of every range, and at the
    pessimistic end."""
    here = fitted(doc)
    ends = {end: terms_at(here, {k: v[i] for k, v in assume.items()}) for i, end in enumerate(("optimistic", "pessimistic"))}
    model = {}
    for mode in ends["optimistic"]:
        lo, hi = ends["optimistic"][mode], ends["pessimistic"][mode]
        model[mode] = {"range_s": [round(sum(lo.values()), 1), round(sum(hi.values()), 1)],
                       "terms_s": {k: [round(lo[k], 2), round(hi[k], 2)] for k in lo},
                       "largest_term": max(hi, key=hi.get)}
    return {"fitted_here": here, "assume": {k: list(v) for k, v in assume.items()}, "at_scale": model}


ANCHORS = [
    ("DADI (Alibaba), 1,000 hosts, 10,000 containers, lazy block loading", "cold start <= 4 s"),
    ("Kraken (Uber), >= 15k hosts, blobs 100 MB-1 GB, P2P", "20K blobs < 30 s"),
    ("GKE image streaming, one node, large DL image", "20 s vs 3 min 50 s"),
    ("AWS DLC without SOCI, 15-20 GB", "4-6 min per instance"),
]


def report(doc: dict) -> None:
    print("\n| mode | N | ready (first allreduce) | last rank | stage step | shared FS read (all nodes) | per node (max) "
          "| shared FS disk | registry | conversions | waits |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in doc["jobs"]:
        print(f"| {r['mode']} | {r['nodes']} | {r['ready_s']} s | {r['ready_last_rank_s']} s | {r['stage_step_s']} s "
              f"| {r['pfs_bytes_total'] / 2**20:,.1f} MiB | {max(r['pfs_bytes_per_node'] or [0]) / 2**20:,.1f} MiB "
              f"| {r['pfs_disk_bytes'] / 2**20:,.1f} MiB | {r['registry_bytes'] / 2**20:,.0f} MiB "
              f"| {r['conversions']} | {r['waits']} |")
    model = doc["model"]
    print(f"\nfitted here: {json.dumps(model['fitted_here'])}")
    print(f"\n1,000 nodes, {model['assume']['image_gb'][0]:.0f} GB image: readiness, optimistic - pessimistic")
    for mode, m in model["at_scale"].items():
        print(f"- {mode}: {m['range_s'][0]} - {m['range_s'][1]} s (largest pessimistic term: {m['largest_term']})")
    print("\npublished anchors:")
    for what, number in ANCHORS:
        print(f"- {what}: {number}")


def main() -> None:
    ap = record.parser(__doc__)
    ap.add_argument("--image", default="imagekit/debian-mpi:latest")
    ap.add_argument("--runs", type=int, default=3, help="repeats of each part (median)")
    ap.add_argument("--nodes", default=",".join(map(str, NODES)), help="node counts of the jobs")
    ap.add_argument("--modes", default=",".join(MODES), help=f"start modes of the jobs ({', '.join(MODES)})")
    ap.add_argument("--assume", action="append", default=[], metavar="KEY=LO,HI", help="override a range")
    ap.add_argument("--model-only", action="store_true", help="re-fit the model from the last results")
    ap.add_argument("--jobs", type=Path, metavar="FILE",
                    help="the job rows of an earlier run (a JSON list): only the parts are measured now")
    args = ap.parse_args()
    assume = dict(ASSUME)
    for item in args.assume:
        key, value = item.split("=", 1)
        lo, _, hi = value.partition(",")
        kind = type(ASSUME[key][0])
        assume[key] = (kind(lo), kind(hi or lo))
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

    nodes = tuple(int(n) for n in args.nodes.split(","))
    modes = [m for m in args.modes.split(",") if m]
    run = record.start("many_nodes", args)
    # 4 GiB node disks: a stock `enroot import` of a 771 MB image needs its layers, the unpacked tree and
    # the squashfs at once (the tests' 2 GiB do not hold them).
    cluster = multinode.MultiCluster(nodes=8, tree_width=2, local_size="4G").hold(squashfuse=True)
    work = Path(tempfile.mkdtemp(prefix="bench-many-", dir="/var/tmp"))
    pushed_tag = ""
    try:
        with running_registry(work / "registry", listen="0.0.0.0") as addr:
            pushed_tag = f"{addr}/bench/many:1"
            push_image(args.image, pushed_tag)
            uri = f"docker://{addr.replace('127.0.0.1', cluster.head)}#bench/many:1"
            bench = Bench(cluster, work, uri)
            from imagekit import registry
            client = registry.RegistryClient(addr)
            manifest = client.get_manifest("bench/many", "1").json()
            Bench.compressed = sum(layer["size"] for layer in manifest.get("layers", []))
            entry = bench.publish()
            print(f"published: {entry}", flush=True)
            jobs = json.loads(args.jobs.read_text()) if args.jobs else []
            for n in ([] if args.jobs else nodes):
                for mode in modes:
                    row = bench.job(mode, n)
                    print(row, flush=True)
                    jobs.append(row)
            parts = bench.parts(entry, args.runs, tuple(sorted({1, *nodes})))
            print(f"parts: {parts}", flush=True)
    finally:
        cluster.pyxis(squashfuse=True)
        cluster.release()
        shutil.rmtree(work, ignore_errors=True)
        if pushed_tag:
            from imagekit.engines import docker as engine
            engine.remove(pushed_tag)    # the push's local tag; the image itself stays
    from imagekit.engines import docker as engine
    doc = {"image": args.image, "jobs_from": str(args.jobs) if args.jobs else None, "image_bytes": int(engine.image_attrs(args.image).get("Size") or 0),
           "image_compressed_bytes": Bench.compressed, "entry": entry, "jobs": jobs, "parts": parts,
           "cluster": {"nodes": 8, "tree_width": 2, "shared_fs": "ext4 on a loop device, one counting FUSE "
                       "client per node", "node_disk": "ext4 on a loop device per node"}}
    doc["model"] = fit(doc, assume)
    report(doc)
    run.finish(doc)


if __name__ == "__main__":
    main()
