"""NVIDIA_VISIBLE_DEVICES rules: what asks for the GPU runtime, and what CPU-only jobs get."""

from __future__ import annotations

import pytest

from imagekit.launch import gpu_env, runtimes
from imagekit.launch import targets

CUDA = {"NVIDIA_VISIBLE_DEVICES": "all", "PATH": "/usr/bin"}


@pytest.mark.parametrize("value,asks", [
    (None, False), ("", False), ("void", False),           # Enroot's hook: ${VAR:-void} = void exits
    ("all", True), ("0,1", True), ("GPU-8e1f", True),
    ("none", True),                                        # driver libraries, no device: still the CLI
])
def test_which_values_ask_for_the_gpu_runtime(value, asks):
    assert gpu_env.asks_for_gpus(value) is asks


@pytest.mark.parametrize("runtime", ["pyxis", "enroot", "docker"])
def test_a_cpu_only_job_of_a_cuda_image_gets_void(runtime):
    rt = runtimes.of(runtime)
    assert rt.cpu_only_env({"A": "1"}, CUDA) == {"A": "1", "NVIDIA_VISIBLE_DEVICES": "void"}
    # Not read here (a file only the compute nodes see, a registry reference): harmless, so set.
    assert rt.cpu_only_env({}, None) == {"NVIDIA_VISIBLE_DEVICES": "void"}


@pytest.mark.parametrize("env,image_env,runtime", [
    ({"NVIDIA_VISIBLE_DEVICES": "all"}, CUDA, "pyxis"),    # the user's --env wins
    ({"NVIDIA_VISIBLE_DEVICES": "0"}, None, "enroot"),
    ({}, {"PATH": "/usr/bin"}, "pyxis"),                   # the image asks for no GPUs: nothing to undo
    ({}, {"NVIDIA_VISIBLE_DEVICES": "void"}, "enroot"),
    ({}, CUDA, "apptainer"),                               # only --nv gives GPUs there
])
def test_cpu_only_env_leaves_alone_what_needs_nothing(env, image_env, runtime):
    assert runtimes.of(runtime).cpu_only_env(env, image_env) is env


def test_the_hook_runtimes_are_the_ones_cpu_only_jobs_hide_gpus_from():
    """Which runtimes the variable alone decides for: Enroot's hook, Pyxis and the production CE (EDF) through
    it, and Docker with the NVIDIA runtime as the site's default; Apptainer and Sarus Suite never."""
    assert [n for n in runtimes.RUNTIMES if runtimes.of(n).gpu_hook] == ["pyxis", "enroot", "docker", "edf"]


def fixes(runtime, launcher):
    return runtimes.gpu_fixes(runtimes.of(runtime) if runtime else None,
                              targets.of(launcher).starter.needs.gpu_fix if launcher else None)


def test_fixes_name_each_runtimes_exact_flags():
    pyxis = "`export NVIDIA_VISIBLE_DEVICES=void` and `srun --container-env=NVIDIA_VISIBLE_DEVICES"
    enroot = "`enroot start --env NVIDIA_VISIBLE_DEVICES=void"
    assert pyxis in fixes("pyxis", None) and enroot not in fixes("pyxis", None)
    assert enroot in fixes("enroot", None) and pyxis not in fixes("enroot", None)
    both = fixes(None, None)
    assert pyxis in both and enroot in both and "--gpus/--nv" in both
    assert "without --gpus-per-node" in fixes("pyxis", "slurm")
    assert "ranks without --gpus" in fixes("enroot", "mpirun")
