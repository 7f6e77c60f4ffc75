"""Inside-out: real sshd workers on a private Docker network, real mpirun, real cleanup."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from imagekit.util.errors import ImagekitError, UsageError
from imagekit.launch import inside_out, preflight
from imagekit.launch.common import JOB_LABEL
from helpers.polling import wait_for
from helpers.slow_engine import SlowEngine
from helpers.launch_jobs import inside_out_job

DOCKER = "/usr/bin/docker"


def leftovers(job_id: str) -> tuple[list[str], list[str]]:
    flt = f"label={JOB_LABEL}={job_id}"
    containers = subprocess.run([DOCKER, "ps", "-aq", "--filter", flt], stdout=subprocess.PIPE, text=True).stdout.split()
    networks = subprocess.run([DOCKER, "network", "ls", "-q", "--filter", flt], stdout=subprocess.PIPE, text=True).stdout.split()
    return containers, networks


def key_dirs(job_id: str) -> list[Path]:
    import tempfile

    return list(Path(tempfile.gettempdir()).glob(f"imagekit-{job_id}-*"))


def _as_in_a_terminal() -> None:
    """SIGINT as a foreground command in a terminal gets it. Run from a shell's background job (`cmd &`,
    nohup), the suite inherits SIGINT ignored, and the launcher rightly keeps an ignored signal ignored:
    its Ctrl-C tests would then test nothing and hang."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Launched:
    """``imagekit launch inside-out`` in a child process, its output read by a thread, so that
    every wait on it has a ceiling even when the CLI (or the engine under it) hangs."""

    def __init__(self, image: str, *args: str, docker_host: str | None = None) -> None:
        env = dict(os.environ, **({"DOCKER_HOST": docker_host} if docker_host else {}))
        self.proc = subprocess.Popen([sys.executable, "-m", "imagekit", "launch", "inside-out", "--image", image,
                                      "--nodes", "2", "--no-preflight", *args, "--", "sleep", "300"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     preexec_fn=_as_in_a_terminal)
        self.lines: list[str] = []
        self.job_id: str | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if self.job_id is None and line.startswith("imagekit: job "):
                self.job_id = line.split("job ")[1].split(":")[0]
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_running(self) -> str:
        """Until the job's command runs in its first worker; the job id."""
        wait_for(lambda: any("mpirun -np" in l for l in self.lines) or self.proc.poll() is not None,
                 "the launch reaching mpirun", seconds=240)
        assert self.job_id and self.proc.poll() is None, self.output
        wait_for(lambda: subprocess.run([DOCKER, "exec", f"imagekit-{self.job_id}-0", "pgrep", "-x", "sleep"],
                                        capture_output=True).returncode == 0, "the job's command running")
        return self.job_id

    def wait(self, seconds: float = 240) -> int:
        """Its exit code; a generous ceiling, never a timing: a CLI that hangs fails the test."""
        rc = self.proc.wait(timeout=seconds)
        self._reader.join(timeout=30)
        return rc

    def reap(self) -> None:
        """However the test went: the CLI stopped, and its job removed here if the CLI did not remove it,
        so that nothing of it is left for the next test."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=60)
        if self.job_id:
            inside_out.remove_job(self.job_id)
            for d in key_dirs(self.job_id):
                shutil.rmtree(d, ignore_errors=True)


def test_bad_input():
    with pytest.raises(UsageError, match="unknown runtime 'podman'"):
        inside_out_job(image="x", nodes=2, command=["a"], runtime="podman")
    with pytest.raises(UsageError, match="--nodes must be >= 1"):
        inside_out_job(image="x", nodes=0, command=["a"])
    with pytest.raises(UsageError, match="no command"):
        inside_out_job(image="x", nodes=1, command=[])


def test_job_dir_keys_are_private_and_pinned():
    job = inside_out_job(image="x", nodes=3, slots=2, command=["a"])
    d = inside_out.make_job_dir(job)
    try:
        assert preflight.check_ssh_keys(d).status == "ok"
        assert (d / "hostfile").read_text() == "node0 slots=2\nnode1 slots=2\nnode2 slots=2\n"
        host_pub = (d / "ssh_host_ed25519_key.pub").read_text().split()[1]
        assert (d / "known_hosts").read_text().split()[2] == host_pub
        assert "StrictHostKeyChecking yes" in (d / "ssh_config").read_text()
        os.chmod(d / "id_ed25519", 0o644)
        bad = preflight.check_ssh_keys(d)
        assert bad.status == "fail" and "chmod 600" in bad.fix
    finally:
        import shutil

        shutil.rmtree(d)


def test_worker_scripts_pass_shellcheck(shellcheck):
    shellcheck(inside_out.START_SH, "sh")
    shellcheck(inside_out.WAIT_SH, "sh")


def test_slurm_variant_script(shellcheck):
    job = inside_out_job(image="reg/img:1", nodes=4, slots=8, scheduler="slurm", command=["./app", "-n", "1"],
                                  env={"NCCL_DEBUG": "INFO"}, partition="gpu", time="00:30:00")
    script = inside_out.render_sbatch(job)
    shellcheck(script)
    assert "#SBATCH --nodes=4" in script and "#SBATCH --ntasks-per-node=1" in script
    assert 'srun --ntasks-per-node=1 --ntasks="$SLURM_JOB_NUM_NODES"' in script
    assert "--network=host" in script and "sshd -D -e -p 2222" in script
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in script
    assert "mpirun --hostfile /run/imagekit/hostfile -np 32 -x NCCL_DEBUG ./app -n 1" in script
    assert "btl_tcp_if_include" not in script       # host network: no guessed interface name
    assert "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" in script and 'rm -rf -- "$keys"' in script


@pytest.mark.engine
def test_ringtest_across_three_containers(mpi_image, capfd):
    job = inside_out_job(image=mpi_image, nodes=3, command=["python3", "-m", "mpi4py.bench", "helloworld"])
    timings: dict = {}
    rc = inside_out.execute(job, log=lambda m: None, timings=timings)
    out = capfd.readouterr().out
    assert rc == 0
    for rank in range(3):
        assert f"I am process {rank} of 3 on node{rank}" in out, out
    assert leftovers(job.workload.job_id) == ([], []) and key_dirs(job.workload.job_id) == []
    job = inside_out_job(image=mpi_image, nodes=3, command=["python3", "-m", "mpi4py.bench", "ringtest"])
    assert inside_out.execute(job, log=lambda m: None) == 0
    assert "time for 1 loops" in capfd.readouterr().out


@pytest.mark.engine
def test_job_exit_code_is_returned(mpi_image):
    job = inside_out_job(image=mpi_image, nodes=2, command=["sh", "-c", "exit 3"])
    assert inside_out.execute(job, log=lambda m: None) != 0
    assert leftovers(job.workload.job_id) == ([], [])


@pytest.mark.engine
def test_killing_a_worker_fails_clearly_and_cleans_up(mpi_image):
    code = ("import time; from mpi4py import MPI; c = MPI.COMM_WORLD; print('up', c.rank, flush=True); "
            "c.Barrier(); time.sleep(120)")
    job = inside_out_job(image=mpi_image, nodes=3, command=["python3", "-c", code])
    victim = f"imagekit-{job.workload.job_id}-2"

    def kill_when_running():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ps = subprocess.run([DOCKER, "exec", f"imagekit-{job.workload.job_id}-0", "pgrep", "-f", "python3 -c"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            if ps.returncode == 0:
                subprocess.run([DOCKER, "kill", victim], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                return
            time.sleep(0.3)

    killer = threading.Thread(target=kill_when_running)
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(ImagekitError, match=r"worker node2 .* stopped while the job ran") as err:
        inside_out.execute(job, log=lambda m: None, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    killer.join()
    assert time.monotonic() - t0 < 60
    assert err.value.hint
    assert leftovers(job.workload.job_id) == ([], []) and key_dirs(job.workload.job_id) == []


@pytest.mark.engine
def test_ctrl_c_removes_everything(mpi_image):
    """SIGINT (and SIGTERM) to the CLI mid-run: containers, network and keys are gone afterwards."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        launched = Launched(mpi_image)
        try:
            job_id = launched.wait_running()
            launched.proc.send_signal(sig)
            assert launched.wait() != 0, launched.output
            assert leftovers(job_id) == ([], []), (sig, launched.output)
            assert key_dirs(job_id) == []
        finally:
            launched.reap()


@pytest.mark.engine
def test_a_second_signal_during_a_slow_cleanup_does_not_stop_it(mpi_image):
    """Ctrl-C, then SIGTERM while the engine (slowed down) is still removing the job: the cleanup goes on
    to the end, and nothing of the job is left."""
    with SlowEngine() as slow:
        # A cleanup timeout far beyond what the slowed engine needs: the second signal is what is tested.
        launched = Launched(mpi_image, "--cleanup-timeout", "300", docker_host=slow.docker_host)
        try:
            job_id = launched.wait_running()
            slow.slow(2.0)
            launched.proc.send_signal(signal.SIGINT)
            assert slow.deletes.wait(timeout=240), "the cleanup never asked the engine to remove anything"
            launched.proc.send_signal(signal.SIGTERM)
            assert launched.wait(seconds=420) != 0, launched.output
            assert "imagekit: error:" not in launched.output, launched.output
            assert leftovers(job_id) == ([], []), launched.output
            assert key_dirs(job_id) == []
        finally:
            launched.reap()


@pytest.mark.engine
def test_an_engine_that_never_removes_ends_the_cleanup_and_the_next_command_sweeps(mpi_image):
    """The engine never answers the removal: the CLI still exits (non-zero) after --cleanup-timeout,
    names what it left and how that goes, and the next imagekit command removes it."""
    with SlowEngine() as slow:
        launched = Launched(mpi_image, "--cleanup-timeout", "5", docker_host=slow.docker_host)
        try:
            job_id = launched.wait_running()
            slow.hold_deletes()
            launched.proc.send_signal(signal.SIGTERM)
            assert launched.wait() != 0, launched.output
            out = launched.output
            assert f"imagekit: error: job {job_id}: the engine did not finish removing" in out, out
            for name in (f"container imagekit-{job_id}-0", f"container imagekit-{job_id}-1",
                         f"network imagekit-{job_id}"):
                assert name in out, out
            assert f"imagekit launch cleanup --job {job_id}" in out and "next imagekit command" in out, out
            assert key_dirs(job_id) == []
            assert leftovers(job_id) != ([], []), "the engine removed them after all: not the case under test"
            subprocess.run([sys.executable, "-c", "from imagekit.engines import docker; docker.client()"], check=True)
            assert leftovers(job_id) == ([], [])
        finally:
            launched.reap()


@pytest.mark.engine
def test_image_without_sshd_is_refused(no_sshd_image):
    job = inside_out_job(image=no_sshd_image, nodes=2, command=["hostname"])
    with pytest.raises(ImagekitError, match="has no sshd") as err:
        inside_out.execute(job, log=lambda m: None)
    assert "openssh-server" in err.value.hint
    assert leftovers(job.workload.job_id) == ([], [])


@pytest.mark.engine
def test_image_without_mpi_is_refused(no_mpi_image):
    job = inside_out_job(image=no_mpi_image, nodes=2, command=["hostname"])
    with pytest.raises(ImagekitError, match="has no MPI") as err:
        inside_out.execute(job, log=lambda m: None)
    assert "openmpi" in err.value.hint
    assert leftovers(job.workload.job_id) == ([], [])


@pytest.mark.engine
def test_missing_image_is_one_line(base_image):
    from click.testing import CliRunner

    from imagekit.cli import main

    res = CliRunner().invoke(main, ["launch", "inside-out", "--image", "imagekit-test/does-not-exist:1",
                                    "--nodes", "2", "--", "hostname"])
    assert res.exit_code != 0 and "imagekit: error:" in res.output and "not found" in res.output


@pytest.mark.slurm
@pytest.mark.engine
def test_inside_out_over_real_slurm(local_slurm, mpi_image, tmp_path):
    """One node is all this machine has: srun starts the worker, the batch script runs mpirun in it."""
    job = inside_out_job(image=mpi_image, nodes=1, slots=2, scheduler="slurm",
                                  command=["python3", "-m", "mpi4py.bench", "helloworld"])
    script = tmp_path / "io.sbatch"
    script.write_text(inside_out.render_sbatch(job))
    out = tmp_path / "io.out"
    proc = subprocess.run(["sbatch", "--parsable", "--wait", "-D", str(tmp_path), "-o", str(out), str(script)],
                          env=local_slurm.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=240)
    text = out.read_text() if out.exists() else ""
    assert proc.returncode == 0, proc.stdout + proc.stderr + text
    assert "I am process 0 of 2" in text and "I am process 1 of 2" in text, text
    assert not list(tmp_path.glob(".imagekit-*"))    # keys removed
    # The script labels its workers with its own Slurm job id: only this job's are looked for.
    slurm_job = proc.stdout.strip().split(";")[0]
    assert leftovers(f"imagekit-{slurm_job}") == ([], [])
