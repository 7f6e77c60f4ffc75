"""Preflight: each check against recorded host facts, plus the real host and a real labelled image."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from click.testing import CliRunner

from helpers.arch_images import make

from imagekit import image_facts
from imagekit.engines import docker as engine
from imagekit.cli import main
from imagekit.util.errors import ImagekitError
from imagekit.launch import preflight as pf
from imagekit.launch import runtimes, targets
from imagekit.launch.gpu_env import GpuLaunch

# What each `imagekit launch` target's rank starter declares to preflight.
NEEDS = {t.name: t.starter.needs for t in targets.TARGETS}

LABELS = {
    "io.imagekit.stack": "debian-mpi", "io.imagekit.components": "pmix,openmpi,ucx,rdma-core,cuda",
    "io.imagekit.component.pmix.version": "4.2.2", "io.imagekit.component.openmpi.version": "4.1.4",
    "io.imagekit.component.openmpi.pmix": "true", "io.imagekit.component.ucx.version": "1.13.1",
    "io.imagekit.component.rdma-core.version": "44.0", "io.imagekit.component.cuda.version": "12.4.1",
    "io.imagekit.arch": "x86_64",
}
HOST = dict(shm_bytes=16 << 30, memlock=None, infiniband=True, driver="550.54.15",
            nvidia_container_cli="/usr/bin/nvidia-container-cli",
            srun_mpi=["pmix", "none", "pmi2", "pmix_v4"], mpirun_version="4.1.4", machine="x86_64",
            gpus=[("NVIDIA H100 80GB HBM3", "9.0")])
# A login or CI node: no driver, no nvidia-container-cli.
GPU_LESS = {**HOST, "driver": None, "nvidia_container_cli": None, "gpus": []}
CUDA_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}


def by_name(checks):
    return {c.name: c for c in checks}


def test_all_ok_on_a_matching_host():
    checks = by_name(pf.run("img", pf.PreflightPlan(slurm=True, needs=NEEDS["mpirun"]),
                            labels=LABELS, host=pf.HostFacts(**HOST)))
    assert {c.status for c in checks.values()} == {"ok"}, pf.format_checks(list(checks.values()))


@pytest.mark.parametrize("host_change,check,status,fix_word", [
    ({"srun_mpi": ["none", "pmi2"]}, "slurm pmix", "fail", "pmix"),
    ({"srun_mpi": ["pmix", "pmix_v2"]}, "slurm pmix", "fail", "PMIx 2"),
    ({"srun_mpi": ["pmix", "pmix_v5"]}, "slurm pmix", "warn", "PMIx 5"),
    ({"srun_mpi": None}, "slurm pmix", "fail", "login node"),
    ({"shm_bytes": 64 << 20}, "/dev/shm", "warn", "--shm-size"),
    ({"memlock": 64 * 1024}, "memlock", "warn", "ulimit -l unlimited"),
    ({"infiniband": False}, "/dev/infiniband", "warn", "--device=/dev/infiniband"),
    ({"driver": "470.82.01"}, "GPU driver", "fail", "upgrade the host driver to >= 525.60.13"),
    ({"driver": None}, "GPU driver", "not checked", None),
    ({"mpirun_version": "5.0.3"}, "host mpirun", "fail", "Open MPI 4.1.4"),
    ({"mpirun_version": "4.0.7"}, "host mpirun", "warn", "4.1.x"),
    ({"mpirun_version": None}, "host mpirun", "fail", "openmpi-bin"),
])
def test_each_mismatch_is_reported_with_its_fix(host_change, check, status, fix_word):
    host = pf.HostFacts(**{**HOST, **host_change})
    c = by_name(pf.run("img", pf.PreflightPlan(slurm=True, needs=NEEDS["mpirun"]), labels=LABELS, host=host))[check]
    assert c.status == status, c
    if fix_word:
        assert fix_word in (c.fix or ""), c


def test_image_side_problems():
    no_mpi = {k: v for k, v in LABELS.items() if "openmpi" not in k}
    no_mpi["io.imagekit.components"] = "cuda"
    assert by_name(pf.run("img", labels=no_mpi, host=pf.HostFacts(**HOST)))["image MPI"].status == "fail"
    no_sshd = by_name(pf.run("img", pf.PreflightPlan(needs=NEEDS["inside-out"]),
                             labels=LABELS, host=pf.HostFacts(**HOST)))["image sshd"]
    assert no_sshd.status == "fail" and "sshd component" in no_sshd.fix
    cuda13 = {**LABELS, "io.imagekit.component.cuda.version": "13.0.0"}
    assert by_name(pf.run("img", labels=cuda13, host=pf.HostFacts(**HOST)))["GPU driver"].status == "fail"
    nopmix = {**LABELS, "io.imagekit.component.openmpi.pmix": "false"}
    assert by_name(pf.run("i", pf.PreflightPlan(slurm=True),
                          labels=nopmix, host=pf.HostFacts(**HOST)))["slurm pmix"].status == "warn"
    # debian-cuda before imagekit turned Slurm support on: srun direct launch fails in MPI_Init.
    noslurm = {**LABELS, "io.imagekit.component.openmpi.slurm": "false"}
    c = by_name(pf.run("i", pf.PreflightPlan(slurm=True),
                       labels=noslurm, host=pf.HostFacts(**HOST)))["slurm pmix"]
    assert c.status == "fail" and "without-slurm" in c.detail and "slurm: true" in c.fix
    five = {**noslurm, "io.imagekit.component.openmpi.version": "5.0.7", "io.imagekit.component.pmix.version": "4.2.2"}
    assert by_name(pf.run("i", pf.PreflightPlan(slurm=True),
                          labels=five, host=pf.HostFacts(**HOST)))["slurm pmix"].status == "ok"


def test_file_images_say_not_checked():
    checks = pf.run("./mpi.sqsh", pf.PreflightPlan(needs=NEEDS["slurm"]), host=pf.HostFacts(**HOST))
    c = by_name(checks)
    assert c["image labels"].status == "not checked" and "file image" in c["image labels"].detail
    assert c["image MPI"].status == "not checked" and not pf.failed(checks)


def gpu_check(image_env, host=GPU_LESS, ref="img", runtime=None, launcher=None, **launch):
    """The GPU runtime check for a launch by ``launcher`` (a target's name) with ``runtime`` (a name)."""
    img = image_facts.from_labels({}, ref=ref, env=image_env)
    launch = GpuLaunch(runtime=runtimes.of(runtime) if runtime else None,
                       fix=NEEDS[launcher].gpu_fix if launcher else None, **launch)
    return pf.check_gpu_runtime(img, pf.HostFacts(**host), launch)


# What Enroot/Pyxis do with the image's NVIDIA_VISIBLE_DEVICES on a host without the GPU runtime.
@pytest.mark.parametrize("env,host,launch,status,words", [
    # The image asks: a warning where this may be a login node, a failure where the containers start here.
    (CUDA_ENV, GPU_LESS, {}, "warn", ["NVIDIA_VISIBLE_DEVICES=all", "Command not found: nvidia-container-cli",
                                      "login node"]),
    (CUDA_ENV, GPU_LESS, {"runtime": "pyxis", "launcher": "slurm"}, "warn", ["login node"]),
    (CUDA_ENV, GPU_LESS, {"runtime": "enroot", "here": True, "launcher": "mpirun"}, "fail", ["98-nvidia.sh"]),
    ({"NVIDIA_VISIBLE_DEVICES": "none"}, GPU_LESS, {}, "warn", ["driver libraries without devices"]),
    (CUDA_ENV, {**HOST, "nvidia_container_cli": None}, {}, "warn", ["no nvidia-container-cli", "Command not found"]),
    (CUDA_ENV, {**HOST, "driver": None}, {}, "warn", ["no NVIDIA driver", "driver error"]),
    # The launcher's value wins over the image's, as in Enroot's hook.
    (CUDA_ENV, GPU_LESS, {"env": {"NVIDIA_VISIBLE_DEVICES": "void"}, "here": True}, "ok", ["the launch sets"]),
    ({"NVIDIA_VISIBLE_DEVICES": "void"}, GPU_LESS, {"env": {"NVIDIA_VISIBLE_DEVICES": "all"}, "here": True},
     "fail", ["the launch sets NVIDIA_VISIBLE_DEVICES=all"]),
    # Nothing to inject, or a host that can.
    ({}, GPU_LESS, {}, "ok", ["does not set NVIDIA_VISIBLE_DEVICES"]),
    ({"NVIDIA_VISIBLE_DEVICES": ""}, GPU_LESS, {"here": True}, "ok", ["no GPU runtime needed"]),
    ({"NVIDIA_VISIBLE_DEVICES": "void"}, GPU_LESS, {"here": True}, "ok", ["=void"]),
    (CUDA_ENV, HOST, {"runtime": "enroot", "here": True}, "ok", ["driver 550.54.15"]),
    (None, GPU_LESS, {}, "not checked", ["not read"]),
    (None, HOST, {}, "ok", ["nvidia-container-cli"]),
    # Docker and Apptainer inject GPUs only when asked; Docker's --gpus fails without the toolkit.
    (CUDA_ENV, GPU_LESS, {"runtime": "docker", "here": True}, "ok", ["only with --gpus"]),
    (CUDA_ENV, GPU_LESS, {"runtime": "docker", "gpus": True, "here": True}, "fail", ["--gpus all"]),
    (CUDA_ENV, GPU_LESS, {"runtime": "docker", "gpus": True}, "warn", ["login node"]),
    (CUDA_ENV, GPU_LESS, {"runtime": "apptainer", "gpus": True, "here": True}, "ok", ["start without GPUs"]),
    (CUDA_ENV, GPU_LESS, {"runtime": "apptainer"}, "ok", ["only with --nv"]),
])
def test_gpu_runtime_check(env, host, launch, status, words):
    c = gpu_check(env, host, **launch)
    assert c.status == status, c
    for word in words:
        assert word in c.detail, (word, c)
    if status in ("warn", "fail"):
        assert c.fix, c


def test_gpu_runtime_fix_names_the_launchers_own_flags():
    """The fix is the exact command line for the runtime the user starts the image with."""
    slurm = gpu_check(CUDA_ENV, runtime="pyxis", launcher="slurm").fix
    assert "`export NVIDIA_VISIBLE_DEVICES=void` and `srun --container-env=NVIDIA_VISIBLE_DEVICES" in slurm
    assert "without --gpus-per-node" in slurm and "enroot start" not in slurm
    mpirun = gpu_check(CUDA_ENV, runtime="enroot", here=True, launcher="mpirun").fix
    assert "`enroot start --env NVIDIA_VISIBLE_DEVICES=void" in mpirun and "without --gpus" in mpirun
    plain = gpu_check(CUDA_ENV, ref="./cuda.sqsh").fix           # a .sqsh may go to Pyxis or Enroot
    assert "--container-env=NVIDIA_VISIBLE_DEVICES" in plain and "--env NVIDIA_VISIBLE_DEVICES=void" in plain
    assert gpu_check(CUDA_ENV, ref="./cuda.sif").status == "ok"  # a .sif is Apptainer's: --nv only


def test_gpu_runtime_joins_every_run_and_a_refusal_names_the_fix():
    img = image_facts.from_labels({}, ref="./cuda.sqsh", env=CUDA_ENV)
    checks = pf.run("./cuda.sqsh", facts=img, host=pf.HostFacts(**GPU_LESS))
    assert by_name(checks)["GPU runtime"].status == "warn" and not pf.failed(checks)
    with pytest.raises(ImagekitError, match="preflight refused: GPU runtime") as err:
        gpu = GpuLaunch(runtime=runtimes.of("enroot"), here=True, fix=NEEDS["mpirun"].gpu_fix)
        pf.enforce("./cuda.sqsh", pf.PreflightPlan(gpu=gpu),
                   log=lambda _m: None, facts=img, host=pf.HostFacts(**GPU_LESS))
    assert "--env NVIDIA_VISIBLE_DEVICES=void" in err.value.hint and "--no-preflight" in err.value.hint


def test_probe_knows_this_hosts_gpu_runtime():
    import shutil

    host = pf.HostFacts.probe()
    assert host.nvidia_container_cli == shutil.which("nvidia-container-cli", path=os.environ.get("PATH", "")
                                                      + ":/usr/sbin:/sbin")
    assert host.driver == pf._driver_version()


def test_srun_mpi_list_formats():
    text = "MPI plugin types are...\n\tpmix\n\tnone\n\tcray_shasta\n\tpmi2\nspecific pmix plugin versions available: pmix_v4\n"
    assert pf.parse_srun_mpi_list(text) == ["pmix", "none", "cray_shasta", "pmi2", "pmix_v4"]
    assert pf.parse_srun_mpi_list("srun: MPI types are...\nsrun: none\nsrun: pmix_v3\nsrun: pmi2\n") == \
        ["none", "pmix_v3", "pmi2"]


def test_real_host_probe_and_cli_json():
    host = pf.HostFacts.probe(want_mpirun=True)
    assert host.shm_bytes and host.shm_bytes > 0
    # Nothing of ./x.sif can be checked (no such file): this host's checks alone, asked for.
    res = CliRunner().invoke(main, ["preflight", "--image", "./x.sif", "--json", "--allow-unchecked"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["ok"] is True and {c["name"] for c in data["checks"]} >= {"image labels", "/dev/shm", "memlock"}
    res = CliRunner().invoke(main, ["preflight", "--image", "x", "--scheduler", "pbs"])
    assert res.exit_code == 2 and "unknown scheduler" in res.output


@pytest.mark.engine
def test_labels_are_read_from_a_real_image(base_image, tmp_path):
    tag = "imagekit-test/preflight-labels:latest"
    labels = "".join(f' --label "{k}={v}"' for k, v in {**LABELS, "io.imagekit.component.pmix.version": "2.2.5"}.items())
    subprocess.run(f"printf 'FROM {base_image}\\n' | /usr/bin/docker build -q {labels} -t {tag} -",
                   shell=True, check=True, stdout=subprocess.DEVNULL)
    host = pf.HostFacts(**HOST)
    c = by_name(pf.run(tag, pf.PreflightPlan(slurm=True), host=host))
    assert c["image labels"].status == "ok" and "debian-mpi" in c["image labels"].detail
    assert c["slurm pmix"].status == "fail" and "2.2.5" in c["slurm pmix"].detail
    res = CliRunner().invoke(main, ["preflight", "--image", tag, "--json"])
    assert json.loads(res.output)["image"] == tag


@pytest.mark.engine
def test_probe_finds_mpi_in_a_throwaway_container_and_leaves_none(mpi_image, base_image):
    from imagekit.util import leases
    from imagekit.engines import docker as engine

    def mine():
        return engine.client().containers.list(all=True, filters={"label": f"{leases.LABEL}={leases.me()}"},
                                               sparse=True)

    before = mine()
    found = pf.probe_image(mpi_image)
    assert found["mpirun"].endswith("/mpirun") and "Open MPI" in found["mpi_version"] and found["sshd"] == "yes"
    assert pf.probe_image(base_image) == {"mpirun": ""}
    assert mine() == before


@pytest.mark.engine
def test_preflight_on_this_host_says_a_gpu_image_needs_void(base_image, tmp_path):
    """`imagekit preflight` on the image, its .sqsh and its .sif (made by `imagekit export`): on a host
    without a GPU runtime (this one, and CI's) a warning with the fix; exit 0, as compute nodes may have GPUs."""
    from helpers import gpu_image

    tag = gpu_image.build(base_image)
    sqsh = gpu_image.export(tag, "enroot", tmp_path / "gpu.sqsh")
    sif = gpu_image.export(tag, "sif", tmp_path / "gpu.sif")
    gpu_less = not gpu_image.host_has_gpu_runtime()
    for ref in (tag, str(sqsh)):
        # The stand-in carries no imagekit labels, so its image side goes unchecked (exit 11 unless asked).
        res = CliRunner().invoke(main, ["preflight", "--image", ref, "--allow-unchecked"])
        assert res.exit_code == 0, res.output
        line = next(l for l in res.output.splitlines() if "GPU runtime" in l)
        if gpu_less:
            assert line.split()[0] == "WARN" and "NVIDIA_VISIBLE_DEVICES=all" in line, res.output
            assert "fix: on hosts without GPUs start it with NVIDIA_VISIBLE_DEVICES=void" in res.output
            assert "srun --container-env=NVIDIA_VISIBLE_DEVICES" in res.output
            assert "enroot start --env NVIDIA_VISIBLE_DEVICES=void" in res.output
        else:
            assert line.split()[0] == "OK", res.output
    res = CliRunner().invoke(main, ["preflight", "--image", str(sif), "--json", "--allow-unchecked"])
    gpu = {c["name"]: c for c in json.loads(res.output)["checks"]}["GPU runtime"]
    assert gpu["status"] == "ok" and "--nv" in gpu["detail"]
    res = CliRunner().invoke(main, ["preflight", "--image", base_image, "--json", "--allow-unchecked"])
    gpu = {c["name"]: c for c in json.loads(res.output)["checks"]}["GPU runtime"]
    assert gpu["status"] == "ok", gpu


# --- the host driver against the image's CUDA ----------------------------------------------------
# There is no GPU (and no NVIDIA driver) on the machines that run these tests: the driver's version is
# read from files and a program written in the documented formats (/proc/driver/nvidia/version as the
# proprietary and the open kernel modules print it; `nvidia-smi --query-gpu=driver_version
# --format=csv,noheader`, one line per GPU), and the image side from labels as `imagekit build` writes them.
CUDA13 = {"io.imagekit.stack": "debian-cuda", "io.imagekit.components": "cuda,openmpi",
          "io.imagekit.component.cuda.version": "13.0.2", "io.imagekit.component.cuda.min_driver": "580.65.06",
          "io.imagekit.component.openmpi.version": "5.0.7"}
CUDA12 = {**CUDA13, "io.imagekit.stack": "debian-cuda12", "io.imagekit.component.cuda.version": "12.4.1",
          "io.imagekit.component.cuda.min_driver": "525.60.13"}


@pytest.mark.parametrize("text, version", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"
     "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", "535.183.01"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  "
     "(dvs-builder@U16-I3-B03-4-3)  Tue Jul 29 20:34:47 UTC 2025\nGCC version:  gcc version 12.3.0\n", "580.65.06"),
])
def test_driver_version_from_proc(tmp_path, monkeypatch, text, version):
    """A stand-in for /proc/driver/nvidia/version (no driver here), in the two formats the modules write."""
    proc = tmp_path / "version"
    proc.write_text(text)
    monkeypatch.setattr(pf, "PROC_DRIVER_VERSION", proc)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert pf._driver_version() == version


def test_driver_version_from_nvidia_smi_and_none_without_a_driver(tmp_path, monkeypatch):
    """Without /proc's file, a fake nvidia-smi on PATH answers as the real one does (a line per GPU)."""
    monkeypatch.setattr(pf, "PROC_DRIVER_VERSION", tmp_path / "absent")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    assert pf._driver_version() is None, "a GPU-less host has no driver"
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$1 $2" = "--query-gpu=driver_version --format=csv,noheader" ] || exit 9\n'
                   "printf '550.54.15\\n550.54.15\\n'\n")
    smi.chmod(0o755)
    assert pf._driver_version() == "550.54.15"


@pytest.mark.parametrize("labels, driver, status, words", [
    # R535/R550/R570 hosts cannot run CUDA 13: both versions named, and the CUDA 12 stack offered.
    (CUDA13, "535.183.01", "fail", ["needs driver >= 580.65.06", "this host has 535.183.01", "debian-cuda12"]),
    (CUDA13, "570.124.06", "fail", ["needs driver >= 580.65.06", "570.124.06", "debian-cuda12"]),
    (CUDA13, "580.65.06", "ok", ["580.65.06 runs CUDA 13.0.2"]),
    # Too old for the CUDA 12 image as well: only an upgrade helps.
    (CUDA13, "470.256.02", "fail", ["this host has 470.256.02", "upgrade the host driver to >= 580.65.06"]),
    (CUDA12, "535.183.01", "ok", ["needs >= 525.60.13"]),
    (CUDA12, "520.61.05", "fail", ["needs driver >= 525.60.13", "this host has 520.61.05"]),
    # The label wins over the table: a later image may need more than its major's minimum.
    ({**CUDA13, "io.imagekit.component.cuda.min_driver": "590.44.01"}, "580.95.05", "fail", [">= 590.44.01"]),
    # Labels from before `min_driver`: the table still knows the major's minimum.
    ({k: v for k, v in CUDA13.items() if not k.endswith("min_driver")}, "575.57.08", "fail", [">= 580.65.06"]),
])
def test_driver_against_the_images_cuda(labels, driver, status, words):
    c = by_name(pf.run("img", labels=labels, host=pf.HostFacts(**{**HOST, "driver": driver})))["GPU driver"]
    assert c.status == status, c
    text = f"{c.detail} {c.fix or ''}"
    assert all(w in text for w in words), c
    if driver.startswith("470"):
        assert "debian-cuda12" not in text, "a CUDA 12 image does not run on R470 either"


def test_a_too_old_driver_stops_the_launch_with_one_error():
    with pytest.raises(ImagekitError) as err:
        pf.enforce("debian-cuda.sqsh", log=lambda _m: None, labels=CUDA13, host=pf.HostFacts(**{**HOST,
                                                                                                "driver": "550.54.15"}))
    assert str(err.value).startswith("preflight refused: GPU driver: the image's CUDA 13.0.2 needs driver "
                                     ">= 580.65.06; this host has 550.54.15"), err.value
    assert "debian-cuda12" in err.value.hint


def test_a_gpu_less_host_still_runs_cuda_images_cpu_only():
    """No driver: the driver check is not run, and a launch that sets NVIDIA_VISIBLE_DEVICES=void passes."""
    img = image_facts.from_labels(CUDA13, ref="./debian-cuda.sqsh", env=CUDA_ENV)
    checks = pf.run("./debian-cuda.sqsh", pf.PreflightPlan(gpu=GpuLaunch(runtime=runtimes.of("enroot"), here=True,
                                                                          fix=NEEDS["slurm"].gpu_fix,
                                  env={"NVIDIA_VISIBLE_DEVICES": "void"})), facts=img, host=pf.HostFacts(**GPU_LESS))
    assert by_name(checks)["GPU driver"].status == "not checked"
    assert not pf.failed(checks), pf.format_checks(checks)


# -- architecture -----------------------------------------------------------------------------------

ARM_LABELS = {**LABELS, "io.imagekit.arch": "aarch64"}


def test_an_image_of_another_arch_is_refused_where_its_containers_start_here():
    """launch mpirun/inside-out start containers on this host: an arm64 image on an x86_64 host
    would die with "exec format error" in every rank; preflight stops it, naming both."""
    checks = by_name(pf.run("ik-arch-test/nowhere:latest-arm64", pf.PreflightPlan(needs=NEEDS["mpirun"]),
                            labels=ARM_LABELS,
                            host=pf.HostFacts(**HOST)))
    arch = checks["architecture"]
    assert arch.status == "fail"
    assert "the image is linux/arm64 (aarch64) and this host is linux/amd64 (x86_64)" in arch.detail
    assert "--platform linux/amd64" in arch.fix
    with pytest.raises(ImagekitError, match="preflight refused: architecture"):
        pf.enforce("img", pf.PreflightPlan(needs=NEEDS["mpirun"]),
                   log=lambda _m: None, labels=ARM_LABELS, host=pf.HostFacts(**HOST))


def test_on_a_login_node_the_compute_nodes_arch_decides():
    """launch slurm from an x86 login node for Grace nodes: a warning naming what the nodes must be."""
    gpu = GpuLaunch(runtime=runtimes.of("pyxis"), here=False, fix=NEEDS["slurm"].gpu_fix)
    arch = by_name(pf.run("./grace.sqsh", pf.PreflightPlan(needs=NEEDS["slurm"], gpu=gpu),
                          labels=ARM_LABELS, host=pf.HostFacts(**HOST)))["architecture"]
    assert arch.status == "warn" and "the compute nodes must be aarch64" in arch.detail
    assert "--platform linux/amd64,linux/arm64" in arch.fix


@pytest.mark.parametrize("facts, machine, status", [
    (image_facts.ImageFacts(ref="x", config_arch="arm64"), "aarch64", "ok"),
    (image_facts.ImageFacts(ref="x", config_arch="arm64", arch="x86_64"), "x86_64", "fail"),  # the engine's word wins
    (image_facts.ImageFacts(ref="x"), "x86_64", "not checked"),
    (image_facts.ImageFacts(ref="x", arch="x86_64"), None, "not checked"),
])
def test_the_images_arch_comes_from_the_engine_else_the_label(facts, machine, status):
    assert pf.check_arch(facts, pf.HostFacts(machine=machine)).status == status


@pytest.mark.engine
def test_the_fix_names_this_hosts_build_when_the_engine_has_it(base_image, tmp_path):
    """The arm64 build is asked for here, and the engine has this host's build of the same stack
    under the local-tag rule: the fix names it."""
    docker_bin = engine.docker_cli()
    make("ik-arch-test/preflight:latest-arm64", "arm64", tmp_path)
    subprocess.run([docker_bin, "tag", base_image, "ik-arch-test/preflight:latest"], check=True)
    try:
        checks = pf.run("ik-arch-test/preflight:latest-arm64", pf.PreflightPlan(needs=NEEDS["mpirun"]),
                        host=pf.HostFacts(**HOST))
        arch = by_name(checks)["architecture"]
        assert arch.status == "fail" and arch.fix == "use --image ik-arch-test/preflight:latest, its linux/amd64 build"
    finally:
        subprocess.run([docker_bin, "rmi", "ik-arch-test/preflight:latest-arm64", "ik-arch-test/preflight:latest"],
                       capture_output=True)
