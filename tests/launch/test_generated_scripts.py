"""What `imagekit launch` writes, byte for byte, for a representative set of requests.

Golden files live in tests/golden/launch/<case>.txt and are compared byte for byte: a change to a
generated sbatch script, rank wrapper, run.sh or manifest shows here as a diff, and is either a
mistake or a deliberate change that the commit lists. After an intended change, regenerate them with

    IMAGEKIT_REGEN_GOLDEN=1 pytest tests/launch/test_generated_scripts.py

and review the diff. The requests go through the CLI (`--dry-run`, `--no-preflight`: nothing is
started, no image is read), with the job id fixed, so the same request always writes the same text.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit.cli import main

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "launch"
REGEN = os.environ.get("IMAGEKIT_REGEN_GOLDEN") == "1"
SIF, SQSH, REF = "./mpi.sif", "./mpi.sqsh", "nvcr.io#org/img:tag"

# name -> the arguments after `imagekit launch`
CASES: dict[str, list[str]] = {
    # --- launch slurm: each runtime, the GPU policy, profiles, staging --------------------------
    "slurm-pyxis-gpus": ["slurm", "--image", REF, "--nodes", "2", "--gpus-per-node", "8", "--partition", "gpu",
                         "--time", "01:00:00", "--mounts", "/data:/data:ro", "--", "python3", "train.py"],
    "slurm-pyxis-cpu-options": ["slurm", "--image", SQSH, "-N", "3", "--ntasks-per-node", "4", "--cpus-per-task",
                                "2", "-A", "proj", "--job-name", "cpu-job", "--workdir", "/work",
                                "--container-name", "keep", "--no-mount-home", "--nccl-debug",
                                "--srun-arg=--exclusive", "--env", "FOO=a b", "--env", "BAR=$x'y",
                                "--profile", "nccl-bootstrap", "--mounts", "/a:/b,/c:/d:ro",
                                "--", "sh", "-c", "echo \"$FOO\""],
    "slurm-pyxis-mount-home": ["slurm", "--image", REF, "-N", "1", "--mount-home", "--", "./app"],
    "slurm-gpu-in-srun-args": ["slurm", "--image", REF, "-N", "2", "--srun-arg=--gres=gpu:4", "--", "./app"],
    "slurm-apptainer": ["slurm", "--runtime", "apptainer", "--image", SIF, "-N", "4", "--ntasks-per-node", "32",
                        "--workdir", "/w", "--mounts", "/scratch:/scratch", "--env", "OMP_NUM_THREADS=1",
                        "--", "./app", "--flag"],
    "slurm-apptainer-gpus": ["slurm", "--runtime", "apptainer", "--image", SIF, "-N", "2", "--gpus-per-node", "4",
                             "--", "./app"],
    "slurm-enroot": ["slurm", "--runtime", "enroot", "--image", SQSH, "-N", "2", "--gpus-per-node", "2",
                     "--workdir", "/w", "--mounts", "/data:/data:ro", "--env", "A=1", "--", "./app"],
    "slurm-docker": ["slurm", "--runtime", "docker", "--image", "imagekit/debian-mpi:latest", "-N", "1",
                     "--ntasks-per-node", "2", "--mounts", "/d:/d", "--env", "X=y", "--", "./app"],
    "slurm-stage-sbcast": ["slurm", "--image", "registry.site#hpc/mpi:1", "-N", "512", "--stage", "sbcast",
                           "--stage-dir", "/local/scratch", "--", "./app"],
    "slurm-stage-shared": ["slurm", "--image", "docker://registry.site#hpc/mpi:1", "-N", "8", "--stage", "shared",
                           "--importer", "/opt/ik/importer", "--", "./app"],
    "slurm-profile-nvl72": ["slurm", "--profile", "nvl72", "--image", SQSH, "-N", "36", "--gpus-per-node", "4",
                            "--env", "NCCL_DEBUG=WARN", "--", "all_reduce_perf", "-b", "512M"],
    # --- launch mpirun: run.sh and rank.sh ------------------------------------------------------
    "mpirun-docker": ["mpirun", "--image", "imagekit/debian-mpi:latest", "--hosts", "localhost:2", "--dry-run",
                      "--", "python3", "-m", "mpi4py.bench", "helloworld"],
    "mpirun-docker-options": ["mpirun", "--image", "imagekit/debian-mpi:latest", "--hosts", "n1:4,n2:4", "--np",
                              "6", "--gpus", "--workdir", "/w", "--mounts", "/d:/d:ro", "--env", "A=1 2",
                              "--mpirun-arg=--bind-to", "--mpirun-arg=core", "--profile", "nvl72", "--dry-run",
                              "--", "./app"],
    "mpirun-apptainer": ["mpirun", "--runtime", "apptainer", "--image", SIF, "--hosts", "n1:8,n2:8", "--gpus",
                         "--workdir", "/w", "--mounts", "/scratch:/scratch", "--dry-run", "--", "./app"],
    "mpirun-enroot": ["mpirun", "--runtime", "enroot", "--image", SQSH, "--hosts", "n1:2", "--workdir", "/w",
                      "--mounts", "/data:/data:ro", "--env", "B=2", "--dry-run", "--", "./app"],
    # --- launch inside-out --scheduler slurm: the sbatch form ------------------------------------
    "inside-out-slurm": ["inside-out", "--scheduler", "slurm", "--image", "imagekit/debian-mpi:latest", "--nodes",
                         "4", "--", "./app"],
    "inside-out-slurm-options": ["inside-out", "--scheduler", "slurm", "--image", "reg/img:1", "--nodes", "2",
                                 "--slots", "4", "--iface", "ib0", "--mpirun-arg=--bind-to", "--mpirun-arg=core",
                                 "--gpus", "--partition", "gpu", "--time", "00:10:00", "--mounts", "/d:/d:ro",
                                 "--env", "A=1", "--profile", "nccl-bootstrap", "--ready-timeout", "30",
                                 "--", "python3", "-m", "mpi4py.bench", "ringtest"],
    # --- launch mpijob: the manifest -------------------------------------------------------------
    "mpijob-gpus": ["mpijob", "--name", "nccl", "--image", "reg/img:tag", "--workers", "2", "--gpus-per-worker",
                    "8", "--env", "NCCL_DEBUG=INFO", "--", "all_reduce_perf", "-b", "8", "-e", "1G"],
    "mpijob-cpu": ["mpijob", "--image", "reg/img:1", "--workers", "3", "--slots-per-worker", "4", "--namespace",
                   "hpc", "--cpu", "16", "--memory", "32Gi", "--", "./app"],
    # --- the targets added with the launch room's rebuild (their first texts, for review) ---------
    "trainer-gpus": ["trainer", "--name", "nccl", "--image", "reg/img:tag", "--nodes", "2", "--gpus-per-node", "8",
                     "--env", "NCCL_DEBUG=INFO", "--", "all_reduce_perf", "-b", "8", "-e", "1G"],
    "jobset": ["jobset", "--image", "reg/img:1", "--nodes", "3", "--namespace", "hpc", "--", "./app"],
    "skypilot": ["skypilot", "--image", "reg/img:1", "--nodes", "2", "--gpus-per-node", "8", "--accelerator", "H100",
                 "--", "all_reduce_perf", "-b", "8"],
    "slurm-edf": ["slurm", "--runtime", "edf", "--image", "reg#org/img:1", "-N", "2", "--gpus-per-node", "4",
                  "--mounts", "/scratch:/scratch:ro", "--env", "A=$x ${y}", "--", "./app"],
    "slurm-sarus-suite": ["slurm", "--runtime", "sarus-suite", "--image", "reg#org/img:1", "-N", "2",
                          "--gpus-per-node", "4", "--workdir", "/w", "--", "./app"],
}
# The targets that take --no-preflight (the Kubernetes and SkyPilot ones preflight nothing of this host).
PREFLIGHTED = {"slurm", "mpirun", "inside-out"}


# name -> the arguments after `imagekit launch`, for an image whose facts are read (its benchmark label
# names the command and the image's own environment; the image does not ask for GPUs).
FACTS_CASES: dict[str, list[str]] = {
    "mpirun-docker-benchmark": ["mpirun", "--no-preflight", "--validate", "--image", "imagekit/debian-mpi:latest",
                                "--hosts", "localhost:2", "--env", "UCX_TLS=tcp", "--dry-run"],
    "mpirun-apptainer-benchmark": ["mpirun", "--no-preflight", "--validate", "--runtime", "apptainer", "--image",
                                   SIF, "--hosts", "n1:2", "--dry-run"],
    "mpirun-enroot-benchmark": ["mpirun", "--no-preflight", "--validate", "--runtime", "enroot", "--image", SQSH,
                                "--hosts", "n1:2", "--dry-run"],
    "slurm-pyxis-facts": ["slurm", "--image", SQSH, "-N", "2", "--", "./app"],
    "slurm-enroot-facts": ["slurm", "--runtime", "enroot", "--image", SQSH, "-N", "2", "--", "./app"],
}
BENCHMARK_LABELS = {
    "io.imagekit.schema": "2", "io.imagekit.stack": "debian-mpi", "io.imagekit.components": "openmpi,sshd",
    "io.imagekit.component.openmpi.version": "4.1.4", "io.imagekit.component.openmpi.source": "distro",
    "io.imagekit.component.sshd.version": "9.2", "io.imagekit.component.sshd.source": "distro",
    "io.imagekit.role.mpi": "openmpi", "io.imagekit.role.sshd": "sshd", "io.imagekit.arch": "x86_64",
    "io.imagekit.benchmark": '{"command": ["imagekit-mpi-ring", "65536"], "env": {"UCX_TLS": "self,sm", '
                             '"NCCL_DEBUG": "INFO", "OMPI_MCA_btl": "^openib"}}',
}


@pytest.fixture
def fixed_job_id(monkeypatch):
    """Every job id of the run is ik00000000: the text depends on the request alone."""
    monkeypatch.setattr(secrets, "token_hex", lambda n=None: "0" * (2 * (n or 32)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_generated_text_is_the_golden_one(case, fixed_job_id, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "set-here")   # a bare --env NAME would copy it; none of the cases does
    monkeypatch.chdir("/")                          # EDF files are named by their absolute path
    target, *args = CASES[case]
    result = CliRunner().invoke(main, ["launch", target, *(["--no-preflight"] if target in PREFLIGHTED else []), *args])
    assert result.exit_code == 0, result.output
    _compare(case, result.stdout)


@pytest.mark.parametrize("case", sorted(FACTS_CASES))
def test_the_generated_text_from_an_images_facts_is_the_golden_one(case, fixed_job_id, monkeypatch):
    """The image's facts decide the command (its benchmark), the image's own variables (for its containers
    only) and whether a CPU-only job hides GPUs (not when the image asks for none). The image is not
    read: its facts are the labels above, and preflight sees a host with nothing on it."""
    from imagekit import image_facts
    from imagekit.image_facts import reader
    from imagekit.launch import preflight

    facts = image_facts.from_labels(BENCHMARK_LABELS, ref="x", env={"PATH": "/usr/bin"})
    monkeypatch.setattr(reader, "read_or_reason", lambda ref: facts)
    monkeypatch.setattr(preflight.HostFacts, "probe", classmethod(lambda cls, **kw: cls(machine="x86_64")))
    result = CliRunner().invoke(main, ["launch", *FACTS_CASES[case]])
    assert result.exit_code == 0, result.output
    _compare(case, result.stdout)


def _compare(case: str, text: str) -> None:
    path = GOLDEN / f"{case}.txt"
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"no golden file {path}: run with IMAGEKIT_REGEN_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{case}: the generated text changed (diff it against {path})"


def test_every_golden_file_has_its_case():
    """A case removed from CASES leaves no golden file behind that nothing compares."""
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == sorted([*CASES, *FACTS_CASES])
