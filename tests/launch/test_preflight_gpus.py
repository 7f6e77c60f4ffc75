"""Preflight against the host's GPUs: a CUDA 13 image on a V100 (Volta, dropped by CUDA 13.0), GPU code the
image does not carry, and multi-node NVLink (the IMEX daemon and channel on GB200/GB300). Host facts are
recorded ones: no GPU exists here. The probes that gather them are run against made-up /proc and /dev trees."""

from __future__ import annotations

import pytest

from imagekit import image_facts
from imagekit.launch import preflight as pf
from imagekit.launch.gpu_env import GpuLaunch

CUDA13 = {"io.imagekit.stack": "debian-cuda", "io.imagekit.components": "cuda,nccl",
          "io.imagekit.component.cuda.version": "13.2.2", "io.imagekit.component.cuda.archs": "80,90,100,120",
          "io.imagekit.component.nccl.version": "2.30.7"}
VOLTA = {**CUDA13, "io.imagekit.stack": "nccl-tests-volta", "io.imagekit.component.cuda.version": "12.9.1",
         "io.imagekit.component.cuda.archs": "70,80,90"}
V100 = [("Tesla V100-SXM2-32GB", "7.0")] * 8
H100 = [("NVIDIA H100 80GB HBM3", "9.0")]
GB200 = [("NVIDIA GB200", "10.0")] * 4


def arch(labels, gpus):
    return pf.check_gpu_arch(image_facts.from_labels(labels, ref="img"), pf.HostFacts(driver="580.65.06", gpus=gpus))


def test_cuda13_image_on_v100_is_refused_naming_gpu_and_release():
    c = arch(CUDA13, V100)
    assert c.status == "fail"
    for word in ("Tesla V100-SXM2-32GB", "sm_70", "Volta", "CUDA 13.0 dropped", "CUDA 13.2.2"):
        assert word in c.detail, (word, c.detail)
    assert "nccl-tests-volta" in c.fix


def test_the_volta_image_runs_on_v100_and_on_later_gpus():
    assert arch(VOLTA, V100).status == "ok"
    assert arch(VOLTA, H100).status == "ok"                       # sm_90 SASS
    assert arch(VOLTA, GB200).status == "ok"                      # compute_90 PTX, JIT for sm_100
    assert arch(VOLTA, [("NVIDIA A10", "8.6")]).status == "ok"    # sm_80 SASS runs on 8.6


def test_gpu_code_the_image_lacks_is_refused():
    """Code for Hopper and later only, on an A100: no SASS of its major and PTX only for later GPUs."""
    hopper_only = {**CUDA13, "io.imagekit.component.cuda.archs": "90,100"}
    c = arch(hopper_only, [("NVIDIA A100-SXM4-80GB", "8.0")])
    assert c.status == "fail" and "no kernel image" in c.detail and '"80"' in c.fix


def test_no_gpu_or_no_cuda_is_not_checked():
    assert arch(CUDA13, []).status == "not checked"
    assert arch({"io.imagekit.stack": "debian-mpi", "io.imagekit.components": "openmpi",
                 "io.imagekit.component.openmpi.version": "4.1.4"}, H100).status == "not checked"


def imex(host, env=None, image_env=None, here=True):
    img = image_facts.from_labels(CUDA13, ref="img", env=image_env or {})
    return pf.check_imex(img, pf.HostFacts(driver="580.65.06", **host), GpuLaunch(env=env or {}, here=here))


NVL72_ENV = {"NVIDIA_IMEX_CHANNELS": "0", "NCCL_MNNVL_ENABLE": "1"}


@pytest.mark.parametrize("host,env,status,words", [
    # A GB200 host with the daemon and channel 0, and a job that asks for it.
    ({"gpus": GB200, "imex_daemon": True, "imex_channels": [0]}, NVL72_ENV, "ok", ["channel device(s) 0"]),
    # The daemon is down: the other trays cannot import this tray's memory.
    ({"gpus": GB200, "imex_daemon": False, "imex_channels": [0]}, NVL72_ENV, "fail", ["no nvidia-imex daemon"]),
    # No channel device on the host: libnvidia-container has nothing to inject.
    ({"gpus": GB200, "imex_daemon": True, "imex_channels": []}, NVL72_ENV, "fail", ["no channel device"]),
    ({"gpus": GB200, "imex_daemon": True, "imex_channels": [1]}, NVL72_ENV, "fail", ["no channel 0"]),
    # A GB200 host and a job that does not ask for a channel: NCCL silently uses IB between trays.
    ({"gpus": GB200, "imex_daemon": True, "imex_channels": [0]}, {}, "warn", ["NVIDIA_IMEX_CHANNELS unset"]),
    # MNNVL asked for on a host that is not GB200 (a login node, or the wrong partition).
    ({"gpus": H100, "imex_daemon": False, "imex_channels": None}, NVL72_ENV, "fail", ["no nvidia-imex daemon"]),
    # Nothing to do with multi-node NVLink.
    ({"gpus": H100, "imex_daemon": False, "imex_channels": None}, {}, "ok", ["not needed"]),
])
def test_imex_check(host, env, status, words):
    c = imex(host, env)
    assert c.status == status, c
    for word in words:
        assert word in c.detail, (word, c)
    if status in ("warn", "fail"):
        assert c.fix


def test_imex_on_a_login_node_warns_unless_mnnvl_is_required():
    host = {"gpus": GB200, "imex_daemon": False, "imex_channels": [0]}
    assert imex(host, {"NVIDIA_IMEX_CHANNELS": "0"}, here=False).status == "warn"
    assert imex(host, NVL72_ENV, here=False).status == "fail"
    # The image's own environment counts as the job's.
    assert imex(host, image_env=NVL72_ENV).status == "fail"


def test_host_probes_read_the_real_interfaces(tmp_path):
    """The IMEX channel directory and /proc, as the kernel lays them out."""
    channels = tmp_path / "nvidia-caps-imex-channels"
    assert pf._imex_channels(channels) is None
    channels.mkdir()
    assert pf._imex_channels(channels) == []
    (channels / "channel0").touch()
    (channels / "channel12").touch()
    assert pf._imex_channels(channels) == [0, 12]
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "comm").write_text("nvidia-imex\n")
    assert pf._process_running("nvidia-imex", proc) and not pf._process_running("slurmd", proc)
    assert pf.runs_on(["70", "80", "90"], (12, 0)) and not pf.runs_on(["90", "100"], (8, 6))


def test_slurm_without_pmix_points_to_the_pmi2_image():
    """Review 3 H14: every shipped MPI is Open MPI 5 (PMIx only); a Slurm with pmi2 and no pmix plugin gets
    the PMI-2 stack as the fix, and an image built with `pmi2: true` passes there."""
    labels = {"io.imagekit.stack": "debian-cuda12", "io.imagekit.components": "pmix,openmpi",
              "io.imagekit.component.pmix.version": "5.0.10", "io.imagekit.component.openmpi.version": "5.0.10",
              "io.imagekit.component.openmpi.pmix": "true"}
    host = pf.HostFacts(srun_mpi=["none", "pmi2", "cray_shasta"])
    c = pf.check_slurm_pmix(image_facts.from_labels(labels, ref="img"), host)
    assert c.status == "fail" and "debian-cuda12-pmi2" in c.fix and "srun --mpi=pmi2" in c.fix
    pmi2 = {**labels, "io.imagekit.component.openmpi.version": "4.1.8", "io.imagekit.component.openmpi.pmi2": "true"}
    assert pf.check_slurm_pmix(image_facts.from_labels(pmi2, ref="img"), host).status == "ok"


def test_the_pmi2_stack_renders_against_slurms_libpmi2():
    from imagekit import render, stack

    path = stack.SHIPPED_DIR / "pmi2" / "debian-cuda12-pmi2.yaml"
    s = stack.load(str(path))
    assert (s.get("openmpi").version, s.get("openmpi").enabled("pmi2")) == ("4.1.8", True)
    text = render.render(s, "docker")
    assert "--with-pmi=/usr" in text and "libpmi2-0t64" in text
