"""The enroot runtime of `imagekit launch`, under the real Enroot and Slurm of the test cluster.

One container per node, as Pyxis does: the node's first rank creates and starts it, every rank runs
in it (``enroot exec``). The ranks then share one user namespace, which the tests read from
``/proc/self/ns/user``, and Open MPI's shared-memory single copy (CMA) works between them: forced with
``btl_vader_single_copy_mechanism=cma`` it aborts when each rank has a container of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers.users import ALICE, setpriv
from imagekit.components.openmpi import NO_FABRIC_ENV

pytestmark = [pytest.mark.engine, pytest.mark.slurm]

RING = "2 ranks, ring of 1048576 bytes and allreduce passed"
# Each rank names its user namespace, then runs the MPI probe.
NS_AND_RING = ["sh", "-c", 'echo "userns $(readlink /proc/self/ns/user)"; exec imagekit-mpi-ring']


@pytest.fixture(scope="module")
def mpi_sqsh(mpi_image) -> Path:
    """debian-mpi's .sqsh where the unprivileged user can read it too (pytest's tmp_path is root's)."""
    directory = Path(tempfile.mkdtemp(prefix="imagekit-enroot-launch-", dir="/var/tmp"))
    os.chmod(directory, 0o755)
    out = directory / "debian-mpi.sqsh"
    proc = subprocess.run([sys.executable, "-m", "imagekit", "export", mpi_image, "--to", "enroot", "-o", str(out),
                           "--no-store"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    os.chmod(out, 0o644)
    yield out
    shutil.rmtree(directory, ignore_errors=True)


def leftovers(job: str, user_name: str | None = None) -> tuple[list[str], list[str]]:
    """The node containers and state directories job ``job`` left (none, after a job)."""
    argv = ["enroot", "list"] if user_name is None else ["runuser", "-u", user_name, "--", "enroot", "list"]
    names = [n for n in subprocess.run(argv, capture_output=True, text=True, cwd="/tmp").stdout.split()
             if n.startswith(f"imagekit-{job}-rank-")]
    uid = os.getuid() if user_name is None else int(subprocess.run(["id", "-u", user_name], capture_output=True,
                                                                    text=True).stdout)
    states = [str(p) for p in Path("/tmp").glob(f"imagekit-enroot-{uid}*/{job}-*")]
    return names, states


def job_id(output: str) -> str:
    """The job id `launch mpirun` prints ("imagekit: job ID: ..."), or a Slurm job's (imagekit-N)."""
    launched = re.search(r"imagekit: job (\S+?):", output)
    if launched:
        return launched.group(1)
    submitted = re.search(r"Submitted batch job (\d+)", output)
    assert submitted, output
    return f"imagekit-{submitted.group(1)}"


def one_user_namespace(output: str) -> None:
    spaces = re.findall(r"^userns (\S+)$", output, re.M)
    assert len(spaces) == 2 and len(set(spaces)) == 1, output


def test_mpirun_runs_every_rank_of_a_node_in_one_container(mpi_sqsh, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "imagekit", "launch", "mpirun", "--runtime", "enroot", "--image", str(mpi_sqsh),
                           "--hosts", "localhost:2", "--no-preflight",
                           "--mpirun-arg=--mca", "--mpirun-arg=btl_vader_single_copy_mechanism",
                           "--mpirun-arg=cma", "--", *NS_AND_RING],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    one_user_namespace(out)
    assert RING in out
    assert leftovers(job_id(out)) == ([], [])


def _as_other_user(script: str, *args: str) -> None:
    """``sh -c script`` as a real unprivileged user with no passwd entry (the attacker)."""
    proc = subprocess.run(setpriv(ALICE, ["sh", "-c", script, "sh", *args]), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr


def _tree(top: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(top)): (p.lstat().st_uid, p.lstat().st_mode) for p in [top, *top.rglob("*")]}


def test_g2_the_rank_sweep_never_follows_or_removes_what_another_user_planted(mpi_sqsh, tmp_path):
    """Issue 33 G2 (../shared/reviews/security-3.md): local rank 0 sweeps dead jobs' Enroot state. Another
    user plants, where the old sweep looked (/tmp/imagekit-enroot-0-*), a link to a directory of files
    and a directory of their own, each with an `owner` file naming a dead process; where it is free,
    also the name of root's new state directory, as a link. A real root launch under Enroot passes, and
    everything planted, and what the links point to, is exactly as it was."""
    victim = Path(tempfile.mkdtemp(prefix="imagekit-g2-victim-", dir="/var/tmp"))
    os.chmod(victim, 0o1777)                          # like /tmp: the attacker can put `owner` there
    (victim / "results.dat").write_text("root's data\n")
    tag = os.urandom(4).hex()
    link, theirs = Path(f"/tmp/imagekit-enroot-0-ik-g2-{tag}"), Path(f"/tmp/imagekit-enroot-0-ik-g2-dir-{tag}")
    base = Path("/tmp/imagekit-enroot-0")
    planted = [link, theirs]
    _as_other_user('echo "999999 1" > "$1/owner" && ln -s "$1" "$2" && mkdir "$3" && echo "999999 1" > "$3/owner"'
                   ' && echo theirs > "$3/data"', str(victim), str(link), str(theirs))
    if not os.path.lexists(base):
        _as_other_user('ln -s "$1" "$2"', str(victim), str(base))
        planted.append(base)
    before = {p: _tree(p) for p in (victim, theirs)}
    try:
        proc = subprocess.run([sys.executable, "-m", "imagekit", "launch", "mpirun", "--runtime", "enroot",
                               "--image", str(mpi_sqsh), "--hosts", "localhost:2", "--no-preflight", "--",
                               "true"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert {p: _tree(p) for p in (victim, theirs)} == before
        assert all(p.is_symlink() for p in planted if p != theirs) and theirs.is_dir()
        assert leftovers(job_id(proc.stdout + proc.stderr)) == ([], [])
    finally:
        for p in planted:
            if p.is_symlink():
                p.unlink()
        shutil.rmtree(theirs, ignore_errors=True)
        shutil.rmtree(victim, ignore_errors=True)


def test_one_container_per_rank_is_what_breaks_cma(mpi_sqsh, tmp_path):
    """The reason for the node container, shown: two `enroot start`s, one per rank, are two user
    namespaces, and Open MPI's vader BTL aborts when CMA is forced between them."""
    run = tmp_path / "per-rank.sh"
    # What the wrapper did before: every rank its own `enroot start`, Open MPI's variables forwarded.
    run.write_text("#!/bin/bash\nforward=()\nfor n in $(compgen -e); do case $n in OMPI_*|PMIX_*|OPAL_*) "
                   "forward+=(--env \"$n\");; esac; done\n"
                   f"exec enroot start \"${{forward[@]}}\" --mount /tmp:/tmp:none:x-create=auto,rbind {mpi_sqsh} \"$@\"\n")
    run.chmod(0o755)
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    proc = subprocess.run(["mpirun", "-np", "2", "--mca", "btl_vader_single_copy_mechanism", "cma",
                           str(run), *NS_AND_RING], capture_output=True, text=True, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and RING not in out, out
    spaces = set(re.findall(r"^userns (\S+)$", out, re.M))
    assert len(spaces) == 2, out


def test_slurm_submit_validate_with_the_enroot_runtime(cluster, user_dir, mpi_sqsh):
    """`launch slurm --runtime enroot --submit --validate` with no command runs the image's benchmark
    (mpi4py's ring test) under srun --mpi=pmix, two tasks in one node container, and judges it."""
    argv = [sys.executable, "-m", "imagekit", "launch", "slurm", "--runtime", "enroot", "--image", str(mpi_sqsh),
            "-N", "1", "--ntasks-per-node", "2", "--submit", "--validate", "--max-latency-us", "100000",
            "-o", str(user_dir / "job.sbatch")]
    env = {**os.environ, "SLURM_CONF": str(cluster.conf), "OMPI_MCA_btl_vader_single_copy_mechanism": "cma"}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=user_dir)
    out = proc.stdout + proc.stderr
    job_out = user_dir / "job.out"
    assert proc.returncode == 0, out + (job_out.read_text(errors="replace") if job_out.exists() else "")
    assert "verdict: PASS" in out and "time for 1000 loops" in out
    slurm_job = re.search(r"\bjob (\d+)\b", out)
    assert slurm_job, out
    assert leftovers(f"imagekit-{slurm_job.group(1)}") == ([], [])


def test_an_unprivileged_users_job_shares_one_node_container(cluster, test_user, user_dir, mpi_sqsh):
    """The same script, submitted by the unprivileged user: Enroot makes the node container in the
    user's own namespace, the ranks join it (CMA forced), and nothing of it is left."""
    script = user_dir / "user.sbatch"
    proc = subprocess.run([sys.executable, "-m", "imagekit", "launch", "slurm", "--runtime", "enroot",
                           "--image", str(mpi_sqsh), "-N", "1", "--ntasks-per-node", "2", "-o", str(script),
                           "--", *NS_AND_RING], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    os.chmod(script, 0o644)
    job = test_user.run(["sbatch", "--wait", "-o", str(user_dir / "user.out"), str(script)],
                        env={"SLURM_CONF": str(cluster.conf), "OMPI_MCA_btl_vader_single_copy_mechanism": "cma"},
                        cwd=str(user_dir), timeout=300, stderr=subprocess.PIPE)
    out = (user_dir / "user.out").read_text(errors="replace") if (user_dir / "user.out").exists() else ""
    assert job.returncode == 0, job.stdout + job.stderr + out
    one_user_namespace(out)
    assert RING in out
    assert leftovers(job_id(job.stdout), test_user.name) == ([], [])


def test_slurm_enroot_runtime_runs_the_cuda_image_on_a_gpu_less_node(cluster, cuda_images, tmp_path):
    """A CPU-only job of the CUDA image: the script starts its containers with NVIDIA_VISIBLE_DEVICES=void,
    so Enroot's GPU hook stands aside, and srun --mpi=pmix wires the image's own Open MPI."""
    runtime, _ = cuda_images
    sqsh = tmp_path / "debian-cuda.sqsh"
    proc = subprocess.run([sys.executable, "-m", "imagekit", "export", runtime, "--to", "enroot", "-o", str(sqsh), "--no-store"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / "cuda.sbatch"
    no_fabric = [a for kv in NO_FABRIC_ENV.split() for a in ("--env", kv)]
    proc = subprocess.run([sys.executable, "-m", "imagekit", "launch", "slurm", "--runtime", "enroot",
                           "--image", str(sqsh), "-N", "1", "--ntasks-per-node", "2", *no_fabric,
                           "-o", str(script), "--", *NS_AND_RING], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out_file = tmp_path / "cuda.out"
    job = subprocess.run(["sbatch", "--wait", "-o", str(out_file), str(script)], capture_output=True, text=True,
                         env={**os.environ, "SLURM_CONF": str(cluster.conf)}, timeout=300)
    out = out_file.read_text(errors="replace") if out_file.exists() else ""
    assert job.returncode == 0, job.stdout + job.stderr + out
    one_user_namespace(out)
    assert RING in out
    assert leftovers(job_id(job.stdout)) == ([], [])


def test_an_image_the_user_cannot_read_is_named(cluster, test_user, user_dir, mpi_sqsh, tmp_path):
    """A .sqsh the job's user cannot read: every rank stops at once and says which file and who."""
    private = tmp_path / "private.sqsh"          # pytest's tmp_path is root's, mode 700
    shutil.copyfile(mpi_sqsh, private)
    script = user_dir / "private.sbatch"
    proc = subprocess.run([sys.executable, "-m", "imagekit", "launch", "slurm", "--runtime", "enroot",
                           "--image", str(private), "-N", "1", "--ntasks-per-node", "2", "-o", str(script),
                           "--no-preflight", "--", "true"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    os.chmod(script, 0o644)
    job = test_user.run(["sbatch", "--wait", "-o", str(user_dir / "private.out"), str(script)],
                        env={"SLURM_CONF": str(cluster.conf)}, cwd=str(user_dir), timeout=120, stderr=subprocess.PIPE)
    out = (user_dir / "private.out").read_text(errors="replace")
    assert job.returncode != 0
    assert f"imagekit: cannot read the image {private} as {test_user.name}" in out, out
    assert leftovers(job_id(job.stdout), test_user.name) == ([], [])
