"""The multi-node cluster of scripts/multinode.py itself: nodes that are separate where it matters, and
a ``down`` that leaves nothing behind.

A small cluster of its own (2 nodes, its own directory, names, subnet and port), so that it runs beside
the session's 8-node one and the single-node cluster without touching either.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers.needs import need

import multinode  # noqa: E402

pytestmark = pytest.mark.slurm


@pytest.fixture
def small():
    need(multinode.missing())
    # Not under /tmp: every node has a /tmp of its own. /run and /var/tmp, as the real one uses.
    conf = Path(tempfile.mkdtemp(prefix="imagekit-mt-", dir="/run"))
    disks = Path(tempfile.mkdtemp(prefix="imagekit-mt-", dir="/var/tmp"))
    os.chmod(conf, 0o755)
    c = multinode.MultiCluster(conf, 2, disks=disks, subnet="10.79.0", prefix="ikmt", port=6927,
                               pfs_size="256M", local_size="128M")
    try:
        yield c.up()
    finally:
        c.down()
        shutil.rmtree(conf, ignore_errors=True)
        shutil.rmtree(disks, ignore_errors=True)


def test_two_nodes_are_separate_machines_and_down_leaves_nothing(small):
    """Each node has its own host name, address, /tmp, node-local disk and client of the shared file
    system: a file read on node 1 is counted there, and node 2 fetches it again (no shared page cache).
    ``down`` stops every daemon by its pid and removes every mount, loop device and namespace."""
    proc = subprocess.run(["srun", "-N", "2", "sh", "-c", "echo $(hostname) $(ip -4 -o addr show eth0 | awk '{print $4}')"
                           " $(echo $$ > /tmp/mine; ls /tmp | wc -l)"],
                          env=small.env, capture_output=True, text=True, cwd="/", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split("\n")[:2]) == ["ikmt1 10.79.0.11/24 1", "ikmt2 10.79.0.12/24 1"], proc.stdout
    assert (small.node_local("ikmt1") / "tmp" / "mine").is_file() and (small.node_local("ikmt2") / "tmp" / "mine").is_file()

    (small.pfs / "data").write_bytes(os.urandom(4 << 20))
    small.drop_caches()
    before = small.pfs_reads()
    for node in small.nodes:
        assert small.on(node, ["cat", str(small.pfs / "data")], stdout=subprocess.DEVNULL).returncode == 0
    after = small.pfs_reads()
    assert all(after[n]["read_bytes"] - before[n]["read_bytes"] >= 4 << 20 for n in small.nodes), (before, after)
    small.on("ikmt1", ["cat", str(small.pfs / "data")], stdout=subprocess.DEVNULL)
    assert small.pfs_reads()["ikmt1"]["read_bytes"] == after["ikmt1"]["read_bytes"], "node 1's own cache"

    state = json.loads(small.state_file.read_text())
    pids = {name: p for name, p in small.running().items() if p}
    assert len(pids) == 2 + 2 * 2       # slurmctld, munged, and a slurmd and a countfs per node
    small.down()
    for name, pid in pids.items():
        alive = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z" \
            if Path(f"/proc/{pid}").exists() else False
        assert not alive, (name, pid, Path(f"/proc/{pid}/cmdline").read_bytes() if alive else b"")
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(small.dir) not in mounts
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert not any(image in loops for _, image in state["loops"].values())
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "ikmt" not in netns
    assert "ikmt" not in subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
