"""No leftovers: what a killed imagekit leaves, the next run sweeps; a live run's things are kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from imagekit.util import leases
from imagekit.engines import docker as engine
from helpers.polling import wait_for

pytestmark = pytest.mark.engine


def _owned_by(proc: subprocess.Popen) -> list[str]:
    """Containers and networks whose owner label is exactly ``proc``'s: never another run's, even one
    whose pid was the same (another test's leftovers are not this test's business)."""
    client = engine.client()
    flt = {"label": f"{leases.LABEL}={proc.owner}"}
    # sparse: no per-container inspect, which fails for a container another test removes meanwhile.
    return [f"container {c.attrs['Names'][0].lstrip('/')}"
            for c in client.containers.list(all=True, filters=flt, sparse=True)] + \
        [f"network {n.name}" for n in client.networks.list(filters=flt)]


def _start(*args: str) -> subprocess.Popen:
    """``imagekit ARGS`` in a session of its own; ``.owner`` is the owner label value its things carry."""
    proc = subprocess.Popen([sys.executable, "-m", "imagekit", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    proc.owner = leases.of(proc.pid)
    return proc


def _kill9(proc: subprocess.Popen) -> None:
    """SIGKILL to the whole session: imagekit and the tools it started, as a killed job step would."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _sweep_by_a_new_run() -> None:
    """Any next command that talks to the engine sweeps (a fresh process: its first connection)."""
    subprocess.run([sys.executable, "-c", "from imagekit.engines import docker; docker.client()"], check=True)


def test_a_killed_export_leaves_nothing_after_the_next_export(mpi_image, tmp_path):
    """The part file beside a direct output (--no-store); tests/export/test_store.py kills store exports."""
    out = tmp_path / "mpi.sqsh"
    proc = _start("export", mpi_image, "--to", "enroot", "--no-store", "-o", str(out))
    part = lambda: [p for p in tmp_path.glob(".mpi.sqsh.*.part") if p.stat().st_size > 0]  # noqa: E731
    wait_for(lambda: part() and _owned_by(proc), "the export's container and growing .part")
    _kill9(proc)
    assert part(), "the kill left a partial file (the state this test is about)"
    done = subprocess.run([sys.executable, "-m", "imagekit", "export", mpi_image, "--to", "enroot",
                           "--no-store", "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert out.is_file() and not list(tmp_path.glob(".*.part"))
    assert _owned_by(proc) == []


def test_a_killed_check_and_launch_leave_nothing_after_the_next_run(mpi_image):
    check = _start("check", mpi_image)
    launch = _start("launch", "inside-out", "--image", mpi_image, "--nodes", "2", "--no-preflight",
                    "--", "sleep", "300")
    wait_for(lambda: _owned_by(check), "the check's container")
    wait_for(lambda: len(_owned_by(launch)) >= 3, "the launch's network and 2 containers")
    _kill9(check)
    _kill9(launch)
    assert _owned_by(check) and _owned_by(launch), "SIGKILL cleans nothing by itself"
    _sweep_by_a_new_run()
    assert _owned_by(check) == [] and _owned_by(launch) == []


def test_a_live_runs_containers_are_never_swept(mpi_image):
    live = _start("launch", "inside-out", "--image", mpi_image, "--nodes", "2", "--no-preflight",
                  "--", "sleep", "300")
    try:
        wait_for(lambda: len(_owned_by(live)) >= 3, "the live launch's network and containers")
        before = sorted(_owned_by(live))
        _sweep_by_a_new_run()
        assert sorted(_owned_by(live)) == before
    finally:
        _kill9(live)
    _sweep_by_a_new_run()
    assert _owned_by(live) == []


def test_of_a_process_is_what_it_calls_me_and_a_dead_one_has_none():
    assert leases.of(os.getpid()) == leases.me()
    child = subprocess.run([sys.executable, "-c", "import os; from imagekit.util import leases; "
                            "print(os.getpid(), leases.me())"], capture_output=True, text=True, check=True)
    pid, token = child.stdout.split()
    assert leases.of(int(pid)) is None and not leases.alive(token)


def test_a_part_file_of_a_dead_owner_is_swept_and_a_live_ones_kept(tmp_path):
    from imagekit.util import atomic

    final = tmp_path / "out.txt"
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = tmp_path / f".out.txt.{leases.where()}+{dead.pid}+1.abc.part"
    gone.write_text("half")
    live = tmp_path / f".out.txt.{leases.me()}.xyz.part"
    live.write_text("being written")
    atomic.write_text(final, "done")
    assert final.read_text() == "done" and not gone.exists() and live.exists()
