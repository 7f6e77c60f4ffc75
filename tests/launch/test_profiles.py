"""Launch profiles: what the nvl72 and nccl-bootstrap profiles put in the job, and the Slurm segment that
keeps each run of up to 18 nodes in one NVL72 rack (topology/block)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from imagekit.cli import main
from imagekit.errors import UsageError
from imagekit.launch import profiles


def test_nvl72_sets_what_multi_node_nvlink_needs():
    env = profiles.environment(profiles.get(["nvl72"]), {})
    assert env["NVIDIA_IMEX_CHANNELS"] == "0" and env["NCCL_MNNVL_ENABLE"] == "1"
    assert env["NCCL_CUMEM_ENABLE"] == "1"


def test_the_users_env_wins_over_a_profile():
    env = profiles.environment(profiles.get(["nvl72", "nccl-bootstrap"]), {"NVIDIA_IMEX_CHANNELS": "3"})
    assert env["NVIDIA_IMEX_CHANNELS"] == "3" and env["UCX_TLS"] == "self,sm,tcp"


@pytest.mark.parametrize("nodes,segment", [(1, 1), (2, 2), (18, 18), (36, 18), (20, 10), (54, 18), (22, 11)])
def test_segments_keep_runs_inside_one_rack(nodes, segment):
    assert profiles.segment(profiles.get(["nvl72"]), nodes, 4) == segment


def test_segments_only_for_nvlink_domain_profiles():
    assert profiles.segment(profiles.get(["nccl-bootstrap"]), 40, 8) is None


@pytest.mark.parametrize("nodes,gpus,words", [(19, 4, "equal runs"), (21, 4, "multiple of 18"),
                                              (2, 8, "--gpus-per-node 8")])
def test_placements_nvl72_cannot_keep_are_refused(nodes, gpus, words):
    with pytest.raises(UsageError) as info:
        profiles.segment(profiles.get(["nvl72"]), nodes, gpus)
    assert words in str(info.value) + (info.value.hint or "")


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(UsageError) as info:
        profiles.get(["gb200"])
    assert "nvl72" in info.value.hint and "nccl-bootstrap" in info.value.hint


def test_slurm_script_of_an_nvl72_job():
    res = CliRunner().invoke(main, ["launch", "slurm", "--profile", "nvl72", "--image", "./nccl.sqsh", "-N", "18",
                                    "--gpus-per-node", "4", "--no-preflight", "--", "all_reduce_perf", "-g", "1"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "#SBATCH --segment=18" in lines and "export NVIDIA_IMEX_CHANNELS=0" in lines
    assert "export NCCL_MNNVL_ENABLE=1" in lines
    srun = next(line for line in lines if line.startswith("srun "))
    assert "--container-env=" in srun and "NVIDIA_IMEX_CHANNELS" in srun   # Pyxis hands it to the container
    bad = CliRunner().invoke(main, ["launch", "slurm", "--profile", "nvl72", "--image", "./x.sqsh", "-N", "19",
                                    "--gpus-per-node", "4", "--", "a"])
    assert bad.exit_code == 2 and "equal runs" in bad.output


def test_nccl_bootstrap_profile_in_an_mpirun_launch():
    res = CliRunner().invoke(main, ["launch", "mpirun", "--profile", "nccl-bootstrap", "--image", "img",
                                    "--hosts", "localhost:2", "--dry-run", "--no-preflight", "--", "./app"])
    assert res.exit_code == 0, res.output
    assert "UCX_TLS" in res.output and "self,sm,tcp" in res.output
