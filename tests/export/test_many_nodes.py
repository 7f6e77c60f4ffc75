"""Many nodes, one image: the importer and its stage step on the real 8-node cluster.

The session's multi-node cluster (tests/conftest.py ``multinode``: scripts/multinode.py, Slurm 22.05,
Pyxis 0.24.0 with ``use_squashfuse=1``, Enroot 4.1.2) has one shared file system that every node reads
through its own counting client, so what a node fetched is counted per node and no node reads from
another's page cache. The registry listens on the head's address; compute nodes have no Docker
engine (the importer's wrapper points DOCKER_HOST nowhere), as on a real cluster. The shared store
is published by root and read by everyone; ``imagekit-user`` is not a publisher.

Counts are asserted (bytes read from the shared file system, conversions, waits), never times:
bench/many_nodes.py measures those.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.users import TEAM

from imagekit.cli import main
from imagekit.export.store import Store

pytestmark = [pytest.mark.engine, pytest.mark.slurm]

RING = "8 ranks, ring of 1048576 bytes and allreduce passed"


@dataclass
class Site:
    cluster: object
    dir: Path
    log: Path
    wrapper: Path
    ref: str            # the MPI image: REGISTRY#REPO:TAG as the nodes reach it
    small: str          # the Debian base image (a 40 MiB entry): the tests that need no MPI

    def said(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def store(self, name: str) -> Path:
        """A shared store of its own on the shared file system, published by root (the site's CI)."""
        path = self.cluster.pfs / name
        res = CliRunner().invoke(main, ["store", "--store", str(path), "init", "--shared", "--group", str(TEAM)])
        assert res.exit_code == 0, res.output
        return path

    def job_env(self, user, store: Path, **extra: str) -> dict[str, str]:
        cache = self.dir / ("cache-user" if user else "cache-root")
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "SLURM_CONF": str(self.cluster.conf),
                "HOME": user.home if user else "/root", "XDG_CACHE_HOME": str(cache),
                "TEST_SHARED_STORE": str(store),
                # sbcast's own tree (its --fanout, 8 by default: one level for 8 nodes): 3 levels here.
                "SBCAST_FANOUT": "2", **extra}

    def run(self, user, argv: list[str], store: Path, timeout: int = 600, **extra: str):
        env = self.job_env(user, store, **extra)
        full = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
        if user is None:
            return subprocess.run(full, cwd="/tmp", capture_output=True, text=True, timeout=timeout)
        return user.run(full, timeout=timeout, stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def site(multinode, other_python, mpi_image, base_image, tmp_path_factory, test_user):
    from helpers.local_registry import running_registry

    from imagekit.export.push import push_image

    directory = Path(tempfile.mkdtemp(prefix="imagekit-many-", dir="/var/tmp"))
    os.chmod(directory, 0o755)
    log = directory / "importer.log"
    log.touch()
    log.chmod(0o666)
    for name, owner in (("cache-root", 0), ("cache-user", test_user.uid)):
        (directory / name).mkdir(mode=0o700)
        os.chown(directory / name, owner, owner)
    wrapper = directory / "imagekit-importer"
    # The site's wrapper (README "The Pyxis importer"); the tests choose the shared store per test.
    wrapper.write_text("#!/bin/bash\n"
                       f"export PYTHONPATH={other_python.src}\n"
                       'export IMAGEKIT_SHARED_STORE="$TEST_SHARED_STORE"\n'
                       "export ENROOT_ALLOW_HTTP=yes\n"
                       "export DOCKER_HOST=unix:///nonexistent/docker.sock\n"
                       f"exec 2> >(tee -a {log} >&2)\n"
                       f'exec {other_python.python} -m imagekit.export.pyxis_importer "$@"\n')
    wrapper.chmod(0o755)
    try:
        with running_registry(tmp_path_factory.mktemp("registry"), listen="0.0.0.0") as addr:
            push_image(mpi_image, f"{addr}/imagekit-test/mpi:1")
            push_image(base_image, f"{addr}/imagekit-test/base:1")
            multinode.pyxis(importer=str(wrapper), squashfuse=True)
            head = addr.replace("127.0.0.1", multinode.head)
            yield Site(multinode, directory, log, wrapper, f"{head}#imagekit-test/mpi:1", f"{head}#imagekit-test/base:1")
    finally:
        multinode.pyxis(squashfuse=True)
        shutil.rmtree(directory, ignore_errors=True)


def reads(cluster) -> dict[str, int]:
    return {node: c.get("read_bytes", 0) for node, c in cluster.pfs_reads().items()}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {node: after[node] - before[node] for node in after}


def entry_of(store: Path):
    (entry,) = Store.open(store, create=False).entries()
    return entry


def test_the_mpi_ring_runs_on_8_nodes_as_root_and_as_the_user_reading_only_what_it_touches(site, test_user):
    """Root's job converts the image once (one node converts, the others wait and are woken, none
    hashes the new file); then the user's job starts from the shared store: every node mounts the
    shared file lazily and fetches a small part of it, not the file."""
    store = site.store(f"ring-{uuid.uuid4().hex[:8]}")
    argv = ["srun", "-N", "8", "--mpi=pmix", f"--container-image={site.ref}", "/usr/local/bin/imagekit-mpi-ring"]
    before = len(site.said())
    proc = site.run(None, argv, store)
    said = site.said()[before:]
    assert proc.returncode == 0 and RING in proc.stdout, proc.stdout + proc.stderr + said
    assert said.count("converted and stored") == 1, said
    entry = entry_of(store)

    site.cluster.drop_caches()
    counted = reads(site.cluster)
    before = len(site.said())
    proc = site.run(test_user, argv, store)
    said = site.said()[before:]
    assert proc.returncode == 0 and RING in proc.stdout, proc.stdout + proc.stderr + said
    assert said.count("store hit") == 8 and "convert" not in said, said
    fetched = delta(counted, reads(site.cluster))
    assert all(0 < n < entry.bytes // 4 for n in fetched.values()), (fetched, entry.bytes)


def test_64_gets_from_8_nodes_convert_once_and_every_node_gets_the_same_verified_bytes(site):
    """64 importers at once, 8 per node, on an empty shared store: one conversion, 63 waits that end
    in a hit, one path; the waiting nodes read nothing of the new file (the converter's seal), and
    each node's own client reads bytes whose sha256 is the recorded one. Again: no conversion at all."""
    store = site.store(f"storm-{uuid.uuid4().hex[:8]}")
    argv = ["srun", "-N", "8", "--ntasks-per-node=8", str(site.wrapper), "get",
            f"docker://{site.small}"]
    before = len(site.said())
    site.cluster.drop_caches()
    counted = reads(site.cluster)
    proc = site.run(None, argv, store, SLURM_STEP_ID="0")
    said = site.said()[before:]
    assert proc.returncode == 0, proc.stdout + proc.stderr + said
    paths = proc.stdout.split()
    entry = entry_of(store)
    assert len(paths) == 64 and set(paths) == {str(entry.path)}, proc.stdout
    assert said.count("converted and stored") == 1, said
    converter = next(line.split(" on ", 1)[1].split(":", 1)[0] for line in said.splitlines()
                     if "converted and stored" in line)
    fetched = delta(counted, reads(site.cluster))
    assert all(n < 1 << 20 for node, n in fetched.items() if node != converter), fetched

    proc = site.run(None, ["srun", "-N", "8", "--ntasks-per-node=1", "sha256sum", str(entry.path)], store)
    assert proc.returncode == 0 and proc.stdout.split()[::2] == [entry.sha256] * 8, proc.stdout + proc.stderr

    before = len(site.said())
    proc = site.run(None, argv, store, SLURM_STEP_ID="1")
    said = site.said()[before:]
    assert proc.returncode == 0 and set(proc.stdout.split()) == {str(entry.path)}, proc.stdout + proc.stderr
    assert said.count("store hit") == 64 and "convert" not in said, said


def _stage_job(site, user, tmp: Path, stage_dir: str, command: list[str]) -> Path:
    script = tmp / f"job-{uuid.uuid4().hex[:6]}.sbatch"
    res = CliRunner().invoke(main, ["launch", "slurm", "--image", site.small, "-N", "8", "--stage", "sbcast",
                                    "--stage-dir", stage_dir, "--importer", str(site.wrapper), "--no-preflight",
                                    "-o", str(script), "--", *command])
    assert res.exit_code == 0, res.output
    os.chmod(script, 0o755)
    return script


def sbatch(site, user, script: Path, store: Path):
    out = script.with_suffix(".out")
    proc = site.run(user, ["sbatch", "--wait", f"--output={out}", str(script)], store)
    return proc, out.read_text() if out.exists() else ""


def copies(site, stage_dir: str, uid: int) -> dict[str, list[str]]:
    found = {}
    for node in site.cluster.nodes:
        d = site.cluster.node_local(node) / Path(stage_dir).relative_to(site.cluster.local) / f"imagekit-stage-{uid}"
        found[node] = sorted(p.name for p in d.iterdir()) if d.is_dir() else []
    return found


@pytest.fixture
def job_dir(test_user):
    path = Path(tempfile.mkdtemp(prefix="imagekit-many-job-", dir="/var/tmp"))
    os.chown(path, test_user.uid, test_user.gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_sbcast_reads_the_shared_file_system_once_and_nodes_start_verified_local_copies(site, test_user,
                                                                                          job_dir):
    """The user's job with --stage sbcast: the stage step finds the shared entry (root published it),
    sbcast sends it from the first node through slurmd's tree to every node's local disk, and the
    containers start on 8 nodes from sealed local copies. The shared file system gave the entry's bytes
    once (counted on the nodes' clients, and on the shared disk's loop device with caches dropped);
    the next job sends nothing."""
    store = site.store(f"sbcast-{uuid.uuid4().hex[:8]}")
    assert site.run(None, [str(site.wrapper), "stage", f"docker://{site.small}"], store,
                    SLURM_JOB_ID="1", SLURM_JOB_UID="0").returncode == 0      # CI publishes it
    entry = entry_of(store)
    stage_dir = str(site.cluster.local / "scratch" / f"t-{uuid.uuid4().hex[:6]}")
    site.run(None, ["srun", "-N", "8", "install", "-d", "-m", "1777", stage_dir], store)
    script = _stage_job(site, test_user, job_dir, stage_dir, ["cat", "/etc/debian_version"])

    site.cluster.drop_caches()
    counted, device = reads(site.cluster), site.cluster.pfs_device_reads()
    before = len(site.said())
    proc, out = sbatch(site, test_user, script, store)
    said = site.said()[before:]
    assert proc.returncode == 0 and out.count("\n12.") == 8, proc.stdout + proc.stderr + out
    fetched = delta(counted, reads(site.cluster))
    assert entry.bytes <= sum(fetched.values()) < entry.bytes + (8 << 20), (fetched, entry.bytes)
    assert max(fetched.values()) >= entry.bytes, "one node read it all: the sbcast source"
    assert entry.bytes <= site.cluster.pfs_device_reads() - device < entry.bytes + (8 << 20)
    assert "sbcast" in out and said.count("(verified)") == 8 and said.count("verifying the staged copy") == 8, said
    held = copies(site, stage_dir, test_user.uid)
    assert all(f"{entry.sha256}.sqsh" in names and f"{entry.sha256}.seal" in names for names in held.values()), held

    counted = reads(site.cluster)
    proc, out = sbatch(site, test_user, script, store)
    assert proc.returncode == 0 and out.count("\n12.") == 8 and "nothing sent" in out, out
    assert sum(delta(counted, reads(site.cluster)).values()) < 4 << 20


# --- faults -----------------------------------------------------------------------------------------

def test_a_full_node_local_disk_stops_the_job_naming_the_node(site, test_user, job_dir):
    """Node 3's local disk is full: the stage step fails before anything is sent, the error names
    ikmn3 and the space, and no node holds a partial copy."""
    store = site.store(f"full-{uuid.uuid4().hex[:8]}")
    site.run(None, [str(site.wrapper), "stage", f"docker://{site.small}"], store, SLURM_JOB_ID="1", SLURM_JOB_UID="0")
    stage_dir = str(site.cluster.local / "scratch" / f"t-{uuid.uuid4().hex[:6]}")
    site.run(None, ["srun", "-N", "8", "install", "-d", "-m", "1777", stage_dir], store)
    node = site.cluster.nodes[2]
    filler = site.cluster.node_local(node) / "filler"
    free = shutil.disk_usage(site.cluster.node_local(node)).free
    subprocess.run(["fallocate", "-l", str(free - (16 << 20)), str(filler)], check=True)
    try:
        proc, out = sbatch(site, test_user, _stage_job(site, test_user, job_dir, stage_dir, ["true"]), store)
    finally:
        filler.unlink()
    assert proc.returncode != 0, out
    assert f"on {node}: error: {node}: not enough space in" in out, out
    assert all(not any(".part-" in n for n in names) for names in copies(site, stage_dir, test_user.uid).values())


def test_a_stale_local_copy_is_never_served(site, test_user, job_dir):
    """After a staged job, node 2's copy changes on its disk: the next start there hashes it (its seal
    no longer matches), finds other bytes, removes it and fails naming ikmn2; the other nodes' copies
    are untouched and still sealed."""
    store = site.store(f"stale-{uuid.uuid4().hex[:8]}")
    site.run(None, [str(site.wrapper), "stage", f"docker://{site.small}"], store, SLURM_JOB_ID="1", SLURM_JOB_UID="0")
    entry = entry_of(store)
    stage_dir = str(site.cluster.local / "scratch" / f"t-{uuid.uuid4().hex[:6]}")
    site.run(None, ["srun", "-N", "8", "install", "-d", "-m", "1777", stage_dir], store)
    script = _stage_job(site, test_user, job_dir, stage_dir, ["true"])
    proc, out = sbatch(site, test_user, script, store)
    assert proc.returncode == 0, out
    node = site.cluster.nodes[1]
    copy = (site.cluster.node_local(node) / Path(stage_dir).relative_to(site.cluster.local) /
            f"imagekit-stage-{test_user.uid}" / f"{entry.sha256}.sqsh")
    with open(copy, "r+b") as fh:
        fh.seek(entry.bytes // 2)
        fh.write(b"\xff" * 4096)
    argv = ["srun", "-N", "8", f"--container-image={site.small}", "true"]
    proc = site.run(test_user, argv, store, IMAGEKIT_STAGE="sbcast", IMAGEKIT_STAGE_DIR=stage_dir,
                    IMAGEKIT_STAGE_IMAGE=f"docker://{site.small}", IMAGEKIT_STAGE_IMAGE_ID=entry.image_id,
                    IMAGEKIT_STAGE_SHA256=entry.sha256)
    said = site.said()
    assert proc.returncode != 0
    seen_there = Path(stage_dir) / f"imagekit-stage-{test_user.uid}" / f"{entry.sha256}.sqsh"   # the node's path
    assert f"on {node}: error: {node}: the staged copy {seen_there} has sha256:" in said, said
    assert "removed, not served" in said
    held = copies(site, stage_dir, test_user.uid)
    assert f"{entry.sha256}.sqsh" not in held[node]
    assert all(f"{entry.sha256}.sqsh" in names for n, names in held.items() if n != node), held


def test_a_node_dying_mid_sbcast_stops_the_job_and_no_partial_copy_is_ever_served(site, test_user, job_dir):
    """Node 4's slurmd dies while sbcast sends: sbcast's error names it and the job stops; no node has a
    copy it would serve (only parts, which a start never uses unverified); node 4 comes back."""
    store = site.store(f"dies-{uuid.uuid4().hex[:8]}")
    site.run(None, [str(site.wrapper), "stage", f"docker://{site.small}"], store, SLURM_JOB_ID="1", SLURM_JOB_UID="0")
    entry = entry_of(store)
    stage_dir = str(site.cluster.local / "scratch" / f"t-{uuid.uuid4().hex[:6]}")
    site.run(None, ["srun", "-N", "8", "install", "-d", "-m", "1777", stage_dir], store)
    script = _stage_job(site, test_user, job_dir, stage_dir, ["true"])
    node = site.cluster.nodes[3]
    part_dir = site.cluster.node_local(node) / Path(stage_dir).relative_to(site.cluster.local) / \
        f"imagekit-stage-{test_user.uid}"
    # Small blocks, so that the transfer of this small image lasts long enough to be cut.
    env = [f"{k}={v}" for k, v in site.job_env(test_user, store, SBCAST_SIZE="128k").items()]
    job = subprocess.Popen(test_user.argv(["env", "-i", *env, "sbatch", "--wait",
                                           f"--output={script.with_suffix('.out')}", str(script)]),
                           cwd="/tmp", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            parts = list(part_dir.glob("*.part-*")) if part_dir.is_dir() else []
            if parts and 0 < parts[0].stat().st_size < entry.bytes:
                break
            time.sleep(0.05)
        else:
            pytest.fail("sbcast never reached node 4")
        os.kill(int((site.cluster.node_dir(node) / "slurmd.pid").read_text()), 9)
        job.communicate(timeout=600)
        out = script.with_suffix(".out").read_text()
        assert job.returncode != 0, out
        assert "sbcast of" in out and "failed" in out and node in out, out
        held = copies(site, stage_dir, test_user.uid)
        assert all(f"{entry.sha256}.sqsh" not in names for names in held.values()), held
    finally:
        if job.poll() is None:
            job.kill()
        site.cluster.restart_node(node)


def test_the_shared_file_system_gone_from_a_node_fails_that_node_clearly(site, test_user):
    """Mid-job, node 5 loses the shared file system (its client dies): the next step's import there
    fails with an error that names ikmn5 and the store; the entry itself is whole (its bytes are the
    recorded ones), and the other nodes start it."""
    store = site.store(f"gone-{uuid.uuid4().hex[:8]}")
    site.run(None, [str(site.wrapper), "stage", f"docker://{site.small}"], store, SLURM_JOB_ID="1", SLURM_JOB_UID="0")
    entry = entry_of(store)
    node = site.cluster.nodes[4]
    pinned = {"IMAGEKIT_STAGE": "shared", "IMAGEKIT_STAGE_IMAGE": f"docker://{site.small}",
              "IMAGEKIT_STAGE_IMAGE_ID": entry.image_id}      # what the job's stage step exports
    site.cluster.cut_pfs(node)
    try:
        before = len(site.said())
        proc = site.run(test_user, ["srun", "-N", "8", f"--container-image={site.small}", "true"], store, **pinned)
        said = site.said()[before:]
        assert proc.returncode != 0
        assert f"on {node}: error: {node}: the shared store {store} is not usable from this node" in said, said
        assert "Transport endpoint is not connected" in said and "convert" not in said, said
        others = [n for n in site.cluster.nodes if n != node]
        assert sum(f"on {n}: store hit" in said for n in others) == 7, said
        proc = site.run(test_user, ["srun", "-N", "7", "-x", node, f"--container-image={site.small}", "true"], store,
                        **pinned)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        from imagekit.util import digests

        assert digests.sha256_file(entry.path) == entry.sha256
    finally:
        site.cluster.restart_node(node)
