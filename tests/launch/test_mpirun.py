"""Outside-in with the host's Open MPI: one docker container per rank, run for real."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from imagekit.cli import main
from imagekit.util.errors import UsageError
from imagekit.launch import mpirun, runtimes
from imagekit.launch.common import Mount, parse_env, parse_mounts
from helpers.launch_jobs import mpirun_job
from imagekit.launch.mpirun import HostMpirun

RANKS = "from mpi4py import MPI; c = MPI.COMM_WORLD; print(f'rank {c.rank} of {c.size}', flush=True)"


def test_parse_hosts(tmp_path):
    assert mpirun.parse_hosts("a:4,b") == [("a", 4), ("b", 1)]
    hf = tmp_path / "hosts"
    hf.write_text("# cluster\nn1 slots=8\nn2\n")
    assert mpirun.parse_hosts(str(hf)) == [("n1", 8), ("n2", 1)]
    with pytest.raises(UsageError, match="bad host entry"):
        mpirun.parse_hosts("a:x")
    with pytest.raises(UsageError, match="slots must be >= 1"):
        mpirun.parse_hosts("a:0")


def test_common_parsers():
    assert parse_mounts(["/a:/b:ro,/c"]) == [Mount("/a", "/b", True), Mount("/c", "/c")]
    with pytest.raises(UsageError, match="not absolute"):
        parse_mounts(["/a:b"])
    assert parse_env(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}
    with pytest.raises(UsageError, match="bad environment variable"):
        parse_env(["1A=2"])


@pytest.mark.parametrize("runtime", runtimes.names(HostMpirun))
def test_scripts_pass_shellcheck(runtime, tmp_path, shellcheck):
    job = mpirun_job(runtime=runtime, image="img", hosts=[("a", 2), ("b", 2)], command=["./app", "x y"],
                           mounts=parse_mounts(["/data:/data:ro"]), env={"FOO": "1"}, gpus=True, workdir="/w")
    run_sh = mpirun.write(job, tmp_path)
    shellcheck(run_sh)
    shellcheck(tmp_path / "rank.sh")
    text = run_sh.read_text()
    # The job's variables reach ranks on the other hosts too (-x).
    assert "mpirun -np 4 --host a:2,b:2 -x IMAGEKIT_JOB_ID -x FOO \"$here/rank.sh\" ./app 'x y'" in text
    assert "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" in text
    rank = (tmp_path / "rank.sh").read_text()
    if runtime == "docker":
        assert "--network=host --ipc=host --pid=host" in rank and "-v /tmp:/tmp" in rank
        assert "OMPI_*|PMIX_*|OPAL_*" in rank and 'forward+=(-e "$name")' in rank


def test_unknown_runtime_and_missing_mpirun(monkeypatch, tmp_path):
    res = CliRunner().invoke(main, ["launch", "mpirun", "--runtime", "lxc", "--image", "x", "--hosts", "a",
                                    "--", "a"])
    assert res.exit_code == 2 and "unknown runtime 'lxc'" in res.output and "fix: use one of" in res.output
    monkeypatch.setenv("PATH", str(tmp_path))
    res = CliRunner().invoke(main, ["launch", "mpirun", "--image", "x", "--hosts", "a", "--", "a"])
    assert res.exit_code == 1 and "`mpirun` not found" in res.output and "openmpi-bin" in res.output


@pytest.mark.engine
def test_two_ranks_in_two_containers_have_distinct_ranks(mpi_image, tmp_path):
    if shutil.which("mpirun") is None:
        pytest.fail("host Open MPI missing: apt-get install openmpi-bin")
    proc = subprocess.run([sys.executable, "-m", "imagekit", "launch", "mpirun", "--runtime", "docker",
                           "--image", mpi_image, "--hosts", "localhost:2", "--", "python3", "-c", RANKS],
                          cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout
    assert "rank 0 of 2" in proc.stdout and "rank 1 of 2" in proc.stdout, proc.stdout
    assert list(tmp_path.iterdir()) == []                    # the job directory is removed afterwards
    # Only this job's containers: other runs may share the engine. The CLI prints the job id.
    job_id = re.search(r"^imagekit: job (\S+):", proc.stdout, re.M).group(1)
    left = subprocess.run(["/usr/bin/docker", "ps", "-aq", "--filter", f"label=io.imagekit.job={job_id}"],
                          stdout=subprocess.PIPE, text=True).stdout.split()
    assert left == []


@pytest.mark.engine
def test_image_without_mpi_is_refused_before_launch(no_sshd_image, tmp_path):
    res = CliRunner().invoke(main, ["launch", "mpirun", "--image", no_sshd_image, "--hosts", "localhost:2",
                                    "--", "hostname"])
    assert res.exit_code == 1 and "has no MPI" in res.output and "--no-preflight" in res.output


SHOW_NVD = 'echo "rank $OMPI_COMM_WORLD_RANK sees NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"'


def _need(tool: str, fix: str) -> None:
    """Fail in CI (CI set), skip elsewhere: the same rule as the engine marker's."""
    if shutil.which(tool) is None:
        message = f"`{tool}` is not installed ({fix})"
        if os.environ.get("CI"):
            pytest.fail(f"CI needs this and it is missing: {message}", pytrace=False)
        pytest.skip(message)


def test_on_this_host_knows_its_names():
    import socket

    assert mpirun.on_this_host([("localhost", 2)]) and mpirun.on_this_host([("n1", 1), (socket.gethostname(), 1)])
    assert not mpirun.on_this_host([("n1", 4), ("n2", 4)])


@pytest.mark.engine
def test_enroot_ranks_of_a_gpu_image_start_on_this_gpu_less_host(base_image, tmp_path):
    """Real Enroot (its 98-nvidia.sh hook included) on this host: ranks without --gpus get
    NVIDIA_VISIBLE_DEVICES=void and start; with --gpus and no GPU runtime here, preflight refuses
    with the fix, and the hook really fails the start when told to go on anyway."""
    from helpers import gpu_image

    _need("enroot", "bash scripts/setup-cluster.sh installs Enroot 4.1.2")
    _need("mpirun", "apt-get install openmpi-bin")
    sqsh = gpu_image.export(gpu_image.build(base_image), "enroot", tmp_path / "gpu.sqsh")

    def launch(*args: str, hosts: str = "localhost:2") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "imagekit", "launch", "mpirun", "--runtime", "enroot",
                               "--image", str(sqsh), "--hosts", hosts, *args, "--", "sh", "-c", SHOW_NVD],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=180)

    cpu = launch()
    assert cpu.returncode == 0, cpu.stdout
    for rank in (0, 1):
        assert f"rank {rank} sees NVIDIA_VISIBLE_DEVICES=void" in cpu.stdout, cpu.stdout
    if gpu_image.host_has_gpu_runtime():
        gpus = launch("--gpus")
        assert gpus.returncode == 0 and "NVIDIA_VISIBLE_DEVICES=all" in gpus.stdout, gpus.stdout
        return
    refused = launch("--gpus")
    assert refused.returncode == 1, refused.stdout
    assert "preflight refused: GPU runtime" in refused.stdout
    assert "enroot start --env NVIDIA_VISIBLE_DEVICES=void" in refused.stdout
    # One rank: a failed start of the node's container keeps its other ranks waiting a while.
    forced = launch("--gpus", "--no-preflight", hosts="localhost:1")
    assert forced.returncode != 0 and "Command not found: nvidia-container-cli" in forced.stdout, forced.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.sqsh"]     # no job directory left behind


SHM_PINGPONG = """
from mpi4py import MPI
c = MPI.COMM_WORLD
buf = bytearray(1 << 20)
for _ in range(20):
    if c.rank == 0:
        c.Send([buf, MPI.BYTE], 1); c.Recv([buf, MPI.BYTE], 1)
    else:
        c.Recv([buf, MPI.BYTE], 0); c.Send([buf, MPI.BYTE], 0)
print("shm-ok", c.rank, flush=True)
"""


@pytest.mark.engine
def test_large_shared_memory_messages_use_single_copy_between_docker_ranks(mpi_image, tmp_path):
    """Docker's seccomp profile refuses CMA (process_vm_readv) without SYS_PTRACE: Open MPI then
    prints "Read -1, expected N, errno = 1" for every large message and falls back at half speed."""
    job = mpirun_job(runtime="docker", image=mpi_image, hosts=[("localhost", 2)],
                           command=["python3", "-c", SHM_PINGPONG],
                           mpirun_args=["--mca", "pml", "ob1", "--mca", "btl", "vader,self", "--bind-to", "none"])
    out = tmp_path / "out.txt"
    with open(out, "w") as fh:
        rc = mpirun.execute(job, tmp_path / "job", log=lambda m: None, stdout=fh, stderr=subprocess.STDOUT)
    text = out.read_text()
    assert rc == 0, text
    assert text.count("shm-ok") == 2
    assert "errno = 1" not in text and "Read -1" not in text
