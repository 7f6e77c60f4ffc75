"""Slurm sbatch scripts: Pyxis/Apptainer/Enroot checked against documented flags, Docker run for real."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib

import pytest
from click.testing import CliRunner

from imagekit import image_facts
from imagekit.cli import main
from imagekit.util.errors import UsageError
from helpers.launch_jobs import slurm_job
from imagekit.launch import runtimes, slurm
from imagekit.launch.common import parse_mounts
from imagekit.launch.schedulers import write_outputs
from imagekit.launch.slurm import Srun
from imagekit.launch.starters import Job

# Flags srun gains from the Pyxis SPANK plugin (NVIDIA/pyxis wiki "Usage" / args.c spank_opts).
PYXIS_FLAGS = {"--container-image", "--container-mounts", "--container-workdir", "--container-name",
               "--container-save", "--container-mount-home", "--no-container-mount-home",
               "--container-remap-root", "--no-container-remap-root", "--container-entrypoint",
               "--no-container-entrypoint", "--container-entrypoint-log", "--container-writable",
               "--container-readonly", "--container-env"}
# `apptainer exec` options (apptainer.org docs, CLI reference) and enroot's (NVIDIA/enroot doc/cmd/: start.md
# --env --mount --rw --root --conf --rc; create.md --name; exec.md --env; remove.md --force/-f).
APPTAINER_FLAGS = {"--nv", "--bind", "--pwd", "--env", "--cleanenv", "--contain"}
ENROOT_FLAGS = {"--env", "--mount", "--rw", "--root", "--conf", "--rc", "--name", "--force"}


def job(**kw) -> Job:
    base = dict(image="nvcr.io#org/img:1", nodes=2, gpus_per_node=8, command=["python3", "train.py", "--lr", "0.1"])
    base.update(kw)
    return slurm_job(**base)


def rank_wrapper(script: str) -> str:
    """The wrapper the script hands to every task: the value of its one-word `rank_wrapper=` assignment."""
    lexer = shlex.shlex(script[script.index("\nrank_wrapper=") + 1:], posix=True)
    lexer.whitespace_split = True
    return lexer.get_token().removeprefix("rank_wrapper=")


def srun_line(script: str) -> list[str]:
    line = next(l for l in script.splitlines() if l.startswith("srun --mpi=pmix"))
    return shlex.split(line)


def test_pyxis_script_uses_only_documented_pyxis_flags(shellcheck):
    """Pyxis cannot run here: the srun line is checked against the flags Pyxis documents."""
    script = slurm.render(job(mounts=parse_mounts(["/data:/data:ro,/scratch:/scratch"]), workdir="/work",
                              env={"FOO": "a b"}, nccl_debug=True, mount_home=False,
                              partition="gpu", time="01:00:00"))
    shellcheck(script)
    argv = srun_line(script)
    flags = [a.split("=")[0] for a in argv[2:] if a.startswith("--container") or a.startswith("--no-container")]
    assert set(flags) <= PYXIS_FLAGS
    assert "--container-image=nvcr.io#org/img:1" in argv
    # Pyxis: entries separated by ",", flags after a third ":" (ro, or "+"-joined)
    assert "--container-mounts=/data:/data:ro,/scratch:/scratch" in argv
    assert "--container-workdir=/work" in argv and "--no-container-mount-home" in argv
    assert "--container-env=FOO,NCCL_DEBUG" in argv
    assert argv[-4:] == ["python3", "train.py", "--lr", "0.1"]
    for opt in ("--nodes=2", "--ntasks-per-node=8", "--gpus-per-node=8", "--partition=gpu", "--time=01:00:00"):
        assert f"#SBATCH {opt}" in script
    assert "export NCCL_DEBUG=INFO" in script and "export FOO='a b'" in script
    assert "memlock" in script.lower() and "/dev/shm" in script


def test_nccl_debug_is_opt_in_and_cpu_only_takes_ntasks():
    script = slurm.render(job(gpus_per_node=0, ntasks_per_node=32))
    assert "export NCCL_DEBUG" not in script
    assert "#SBATCH --ntasks-per-node=32" in script and "#SBATCH --gpus-per-node" not in script
    assert "#SBATCH --ntasks-per-node=1" in slurm.render(job(gpus_per_node=0))


@pytest.mark.parametrize("runtime,flags", [("apptainer", APPTAINER_FLAGS), ("enroot", ENROOT_FLAGS)])
def test_apptainer_and_enroot_scripts_use_documented_flags(runtime, flags, shellcheck):
    """The wrapper's runtime lines use only options the runtimes document (they also run for real:
    tests/launch/test_enroot_runtime.py and tests/export/test_stacks_under_runtimes.py)."""
    script = slurm.render(job(runtime=runtime, image="./img.sif" if runtime == "apptainer" else "./img.sqsh",
                              mounts=parse_mounts(["/data:/data:ro"]), workdir="/work"))
    shellcheck(script)
    assert srun_line(script)[:2] == ["srun", "--mpi=pmix"]
    body = rank_wrapper(script)
    shellcheck(body)
    code = "\n".join(l for l in body.splitlines() if not l.lstrip().startswith("#"))
    runtime_lines = re.findall(rf"(?:^|[\s(])({runtime} (?:exec|create|start|list|remove)\b[^\n]*)", code, re.M)
    assert runtime_lines, body
    used = {f for l in runtime_lines for f in re.findall(r"\s(--[a-z][a-z-]*)", l)}
    assert used <= flags, used - flags
    assert "PMIX_SERVER_TMPDIR" in body          # Slurm's PMIx rendezvous must be visible in the container
    if runtime == "apptainer":
        assert runtime_lines == ['apptainer exec "${binds[@]}" "${extra[@]}" "$image" "$@"']
        assert "--nv" in body and "--bind /data:/data:ro" in body and "--pwd /work" in body
    else:  # enroot fstab fields are colon-separated: src:dst:type:options
        assert "--mount '/data:/data:none:x-create=auto,rbind,ro'" in body
        assert 'forward+=(--env "$name")' in body
        # One container per node: created and started by local rank 0, every rank runs in it.
        assert {l.split()[1] for l in runtime_lines} == {"create", "start", "exec", "list", "remove"}


@pytest.mark.parametrize("kw,msg", [
    ({"runtime": "singularity-ce"}, "unknown runtime"),
    ({"nodes": 0}, "--nodes must be >= 1"),
    ({"command": []}, "no command"),
    ({"gpus_per_node": -1}, "--gpus-per-node must be >= 0"),
])
def test_bad_input_is_one_clear_usage_error(kw, msg):
    with pytest.raises(UsageError, match=msg) as err:
        job(**kw)
    assert err.value.hint


def test_cli_dry_run_prints_script_and_bad_runtime_exits_2(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["launch", "slurm", "--image", "./x.sqsh", "-N", "2", "--gpus-per-node", "4",
                               "--", "./app", "-x", "1"])
    assert res.exit_code == 0, res.output
    assert "srun --mpi=pmix --container-image=./x.sqsh ./app -x 1" in res.output
    res = runner.invoke(main, ["launch", "slurm", "--image", "x", "-N", "1", "--runtime", "podman", "--", "a"])
    assert res.exit_code == 2 and "imagekit: error: unknown runtime 'podman'" in res.output
    out = tmp_path / "job.sbatch"
    res = runner.invoke(main, ["launch", "slurm", "--image", "./x.sqsh", "-N", "1", "-o", str(out), "--", "a"])
    assert res.exit_code == 0 and out.read_text().startswith("#!/bin/bash") and list(tmp_path.iterdir()) == [out]


def test_submit_without_sbatch_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    res = CliRunner().invoke(main, ["launch", "slurm", "--image", "./x.sqsh", "-N", "1", "--submit", "--", "a"])
    assert res.exit_code == 1
    assert "`sbatch` not found" in res.output and "fix:" in res.output
    assert not list(tmp_path.iterdir())


@pytest.mark.slurm
@pytest.mark.engine
def test_docker_ranks_under_real_slurm_see_distinct_ranks(local_slurm, mpi_image, tmp_path, shellcheck):
    """sbatch + srun --mpi=pmix + docker rank wrapper (binding $PMIX_SERVER_TMPDIR) on Debian's Slurm."""
    script = tmp_path / "job.sbatch"
    code = "from mpi4py import MPI; c = MPI.COMM_WORLD; print(f'rank {c.rank} of {c.size}', flush=True)"
    job = slurm_job(image=mpi_image, nodes=1, ntasks_per_node=2, runtime="docker", command=["python3", "-c", code])
    write_outputs(job.starter.files(job), script)
    shellcheck(script)
    out = tmp_path / "job.out"
    proc = subprocess.run(["sbatch", "--parsable", "--wait", "-o", str(out), str(script)], env=local_slurm.env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=180)
    text = out.read_text() if out.exists() else ""
    assert proc.returncode == 0, proc.stdout + proc.stderr + text
    assert "rank 0 of 2" in text and "rank 1 of 2" in text, text
    # Only this job's containers (the script labels them imagekit-$SLURM_JOB_ID): others may share the engine.
    flt = f"label=io.imagekit.job=imagekit-{proc.stdout.strip().split(';')[0]}"
    left = subprocess.run(["/usr/bin/docker", "ps", "-aq", "--filter", flt],
                          stdout=subprocess.PIPE, text=True).stdout.split()
    assert left == []


@pytest.mark.slurm
def test_preflight_reads_real_srun_mpi_list(local_slurm, monkeypatch):
    from imagekit.launch import preflight

    monkeypatch.setenv("SLURM_CONF", local_slurm.env["SLURM_CONF"])
    host = preflight.HostFacts.probe(want_srun=True)
    assert "pmix" in host.srun_mpi and "pmix_v4" in host.srun_mpi
    img = image_facts.from_labels({"io.imagekit.components": "pmix,openmpi",
                                            "io.imagekit.component.pmix.version": "4.2.2",
                                            "io.imagekit.component.openmpi.version": "4.1.4"})
    assert preflight.check_slurm_pmix(img, host).status == "ok"
    img3 = image_facts.from_labels({"io.imagekit.components": "pmix,openmpi",
                                             "io.imagekit.component.pmix.version": "3.2.3"})
    assert preflight.check_slurm_pmix(img3, host).status == "warn"


@pytest.mark.slurm
@pytest.mark.engine
def test_submit_validate_waits_for_the_job_and_gates_its_output(local_slurm, mpi_image, tmp_path):
    """`launch slurm --submit --validate` with no command runs the image's benchmark (mpi4py ring test,
    from its labels) under real Slurm + srun --mpi=pmix, then judges the job's output file."""
    def launch(gate):
        return subprocess.run([sys.executable, "-m", "imagekit", "launch", "slurm", "--runtime", "docker",
                               "--image", mpi_image, "-N", "1", "--ntasks-per-node", "2", "--submit",
                               "--validate", "--max-latency-us", gate, "-o", str(tmp_path / f"j{gate}.sbatch")],
                              env=local_slurm.env, capture_output=True, text=True, timeout=300)
    ok = launch("100000")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "time for 1000 loops" in ok.stdout and "verdict: PASS" in ok.stdout
    assert (tmp_path / "j100000.out").read_text().count("time for") == 1
    bad = launch("0.001")
    assert bad.returncode == 1 and "verdict: FAIL" in bad.stdout and "max 0.001 us" in bad.stdout


def test_validate_needs_submit():
    res = CliRunner().invoke(main, ["launch", "slurm", "--image", "x.sqsh", "-N", "1", "--validate", "--", "true"])
    assert res.exit_code == 2 and "needs --submit" in res.output


def _dry_run(image, *args):
    res = CliRunner().invoke(main, ["launch", "slurm", "--image", image, "-N", "2", *args, "--", "./app"])
    assert res.exit_code == 0, res.output
    return res


@pytest.mark.engine
@pytest.mark.parametrize("runtime", runtimes.names(Srun))
def test_a_cpu_only_job_of_a_gpu_image_gets_void(runtime, base_image, shellcheck):
    """No --gpus-per-node with an image that sets NVIDIA_VISIBLE_DEVICES=all: the containers get
    `void` (Pyxis through --container-env, Enroot --env, Docker -e), so GPU-less nodes start them."""
    from helpers import gpu_image

    res = _dry_run(gpu_image.build(base_image), "--runtime", runtime)
    script = res.stdout
    if runtimes.of(runtime).writes_files:        # EDF: the job's variables are the file's [env]
        edf = tomllib.loads(script[script.index("\n# imagekit-"):].split("\n", 2)[2])
        void = edf.get("env", {}).get("NVIDIA_VISIBLE_DEVICES")
        assert void == ("void" if runtimes.of(runtime).gpu_hook else None), edf
        return
    shellcheck(script)
    if runtime == "apptainer":  # GPUs only with --nv, which a CPU-only job does not pass
        assert "NVIDIA_VISIBLE_DEVICES" not in script
        return
    assert "export NVIDIA_VISIBLE_DEVICES=void" in script
    assert "the containers get NVIDIA_VISIBLE_DEVICES=void" in res.stderr
    if runtime == "pyxis":
        assert "--container-env=NVIDIA_VISIBLE_DEVICES" in srun_line(script)
    else:
        body = rank_wrapper(script)
        shellcheck(body)
        flag = "--env" if runtime == "enroot" else "-e"
        assert f"forward+=({flag} NVIDIA_VISIBLE_DEVICES)" in body


@pytest.mark.engine
def test_void_only_where_no_gpus_are_asked_for_and_the_user_did_not_say(base_image):
    from helpers import gpu_image

    tag = gpu_image.build(base_image)
    for args in (["--gpus-per-node", "2"], ["--srun-arg=--gres=gpu:1"],
                 ["--env", "NVIDIA_VISIBLE_DEVICES=0"]):
        assert "NVIDIA_VISIBLE_DEVICES=void" not in _dry_run(tag, *args).stdout, args
    assert "export NVIDIA_VISIBLE_DEVICES=0" in _dry_run(tag, "--env", "NVIDIA_VISIBLE_DEVICES=0").stdout
    assert "NVIDIA_VISIBLE_DEVICES" not in _dry_run(base_image).output     # asks for no GPUs: no noise
    # Not read (--no-preflight reads nothing): void is harmless where nothing reads it, so set.
    assert "export NVIDIA_VISIBLE_DEVICES=void" in _dry_run(base_image, "--no-preflight").stdout


def test_an_image_not_on_this_host_gets_void_in_a_cpu_only_job():
    """A .sqsh only the compute nodes see: its environment is unknown here, and void costs nothing."""
    res = _dry_run("./only-on-the-nodes.sqsh")
    assert "export NVIDIA_VISIBLE_DEVICES=void" in res.stdout
    assert "--container-env=NVIDIA_VISIBLE_DEVICES" in srun_line(res.stdout)
    assert "was not read here" in res.stderr
    assert "NVIDIA_VISIBLE_DEVICES" not in _dry_run("./only-on-the-nodes.sqsh", "--gpus-per-node", "8").stdout


# --- --stage: many nodes (docs/many-nodes.md) -----------------------------------------------------

def test_stage_sbcast_runs_the_importers_stage_step_first_and_pins_the_job(shellcheck):
    """The first command stages the image (resolve once, fill the store once, sbcast to the nodes'
    local disks); its IMAGE_ID and SHA256 reach every container step's importer through the job's
    environment; the srun line is the usual one."""
    job = slurm_job(image="reg.site#hpc/mpi:1", nodes=512, command=["./app"], stage="sbcast",
                         stage_dir="/local/scratch", importer="/opt/site/importer wrapper")
    script = slurm.render(job)
    shellcheck(script)
    lines = script.splitlines()
    stage_at = lines.index('staged=$("$IMAGEKIT_IMPORTER" stage --mode sbcast "$IMAGEKIT_STAGE_IMAGE")')
    srun_at = next(i for i, line in enumerate(lines) if line.startswith("srun "))
    assert stage_at < srun_at
    for line in ("export IMAGEKIT_STAGE=sbcast", "export IMAGEKIT_STAGE_IMAGE='docker://reg.site#hpc/mpi:1'",
                 "export IMAGEKIT_IMPORTER='/opt/site/importer wrapper'", "export IMAGEKIT_STAGE_DIR=/local/scratch",
                 'read -r IMAGEKIT_STAGE_IMAGE_ID IMAGEKIT_STAGE_SHA256 <<<"$staged"',
                 "export IMAGEKIT_STAGE_IMAGE_ID IMAGEKIT_STAGE_SHA256"):
        assert line in lines[:srun_at], line
    assert "--container-image=reg.site#hpc/mpi:1" in srun_line(script)
    shared = slurm.render(slurm_job(image="docker://reg.site#hpc/mpi:1", nodes=2, command=["./app"],
                                         stage="shared"))
    assert "stage --mode shared" in shared and "IMAGEKIT_STAGE_DIR" not in shared
    assert "IMAGEKIT_STAGE" not in slurm.render(slurm_job(image="reg#x:1", nodes=2, command=["./app"]))


@pytest.mark.parametrize("kw, message", [
    ({"image": "./x.sqsh"}, "works with registry images"),
    ({"runtime": "apptainer", "image": "x.sif"}, "needs --runtime pyxis"),
    ({"stage_dir": "local"}, "not an absolute path"),
    ({"stage": "rsync"}, "unknown --stage"),
])
def test_stage_refuses_what_it_cannot_stage(kw, message):
    args = {"image": "reg#x:1", "nodes": 2, "command": ["./app"], "stage": "sbcast", **kw}
    with pytest.raises(UsageError, match=message):
        slurm_job(**args)


def test_stage_on_the_command_line():
    res = CliRunner().invoke(main, ["launch", "slurm", "--image", "reg#x:1", "-N", "4", "--stage", "sbcast",
                                    "--stage-dir", "/local", "--no-preflight", "--", "./app"])
    assert res.exit_code == 0, res.output
    assert "stage --mode sbcast" in res.stdout and "IMAGEKIT_STAGE_DIR=/local" in res.stdout
    res = CliRunner().invoke(main, ["launch", "slurm", "--help"])
    assert "--stage [none|shared|sbcast]" in res.output and "--stage sbcast" in res.output
