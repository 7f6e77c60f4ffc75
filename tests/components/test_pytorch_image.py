"""The framework image (debian-pytorch), built for real and checked green and red.

PyPI's torch 2.15.0 on the offline CUDA stack (debian-cuda): one CUDA (13.2) and one NCCL
(2.30.7, debian-cuda's, which torch's wheel pins), the stack's Open MPI, and a C compiler with
Python.h for torch.compile. No GPU exists here: torch imports and reports its CUDA build and NCCL
without one, `pytorch.cuda` and the other GPU checks are reported as not run. Each torch check is
then shown failing on a broken copy of the real image; the exported .sqsh starts under the real
Slurm + Pyxis + Enroot (NVIDIA_VISIBLE_DEVICES=void, as on a GPU-less node) and runs a two-rank
torch.distributed (gloo) allreduce.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from helpers.broken_images import broken_copy
from helpers.cuda_images import check_outcomes, green_but_hardware
from imagekit.engines import docker as engine
from imagekit.checks import runner

pytestmark = pytest.mark.engine

TORCH_CHECKS = {"pytorch.version", "pytorch.cuda_build", "pytorch.nccl", "pytorch.nccl_version",
                "pytorch.one_nccl", "pytorch.ldd_closure", "pytorch.compiler"}
SITE = "/opt/venv/lib/python3.11/site-packages"
# torch still imports, but reports another version and CUDA build; a second NCCL (the real
# nvidia-nccl-cu13 2.32.3 wheel's library; an older one, 2.28.9, lacks symbols torch links, and torch
# does not import at all) replaces the wheel's link and comes first in the loader's cache, where torch
# finds libnccl.so.2; and Python.h is gone (torch.compile's launcher build fails).
BREAK_IMPORTABLE = f"""set -e
sed -i "s/^__version__ = .*/__version__ = '2.14.0+cu132'/; s/^cuda: .*/cuda: Optional[str] = '13.0'/" {SITE}/torch/version.py
rm {SITE}/nvidia/nccl/lib/libnccl.so.2
cp /tmp/add/libnccl.so.2 {SITE}/nvidia/nccl/lib/libnccl.so.2
mkdir -p /opt/other && cp /tmp/add/libnccl.so.2 /opt/other/libnccl.so.2
echo /opt/other > /etc/ld.so.conf.d/00-other.conf
ldconfig
rm -rf /tmp/add /usr/include/python3.11/Python.h
"""
OTHER_NCCL = "nvidia-nccl-cu13==2.32.3"
BROKEN_IMPORTABLE_FAILS = {"pytorch.version", "pytorch.cuda_build", "pytorch.nccl_version", "pytorch.one_nccl",
                           "pytorch.compiler"}
# A CUDA library torch links is missing, and there is no C compiler.
BREAK_LINKS = f"""set -e
rm {SITE}/nvidia/cu13/lib/libcublasLt.so.13
rm -f /usr/bin/cc /usr/bin/gcc /usr/bin/gcc-12 /usr/bin/x86_64-linux-gnu-gcc-12
"""


def _torch_specs(image: str) -> list:
    return [s for s in runner.checks_from_image(image) if s["id"] in TORCH_CHECKS]


def test_runtime_image_passes_every_check_and_leaves_gpu_checks_not_run(pytorch_images):
    runtime, _ = pytorch_images
    outcomes = green_but_hardware(runtime, frozenset({"pytorch.cuda"}))
    assert TORCH_CHECKS <= {i for i, o in outcomes.items() if o.status == "passed"}


def test_the_labels_record_the_nccl_torch_loads(pytorch_images):
    """torch.cuda.nccl.version() is the NCCL the labels record, and that is debian-cuda's NCCL."""
    runtime, _ = pytorch_images
    labels = engine.image_labels(runtime)
    assert labels["io.imagekit.component.pytorch.nccl"] == labels["io.imagekit.component.nccl.version"] == "2.30.7"
    out = subprocess.run([engine.docker_cli(), "run", "--rm", runtime, "python3", "-c",
                          "import torch; print('.'.join(map(str, torch.cuda.nccl.version())))"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "2.30.7", out.stdout + out.stderr


def test_devel_image_passes_its_checks(pytorch_images):
    _, devel = pytorch_images
    outcomes = check_outcomes(devel, runner.checks_from_image(devel))
    assert not {i: o.detail for i, o in outcomes.items() if o.status == "failed"}


def test_each_torch_check_catches_a_broken_copy(pytorch_images, tmp_path):
    runtime, _ = pytorch_images
    # The other NCCL comes through the host's pip (the build has no CA bundle for the index).
    (tmp_path / "a").mkdir()
    got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest",
                          str(tmp_path / "whl"), OTHER_NCCL], capture_output=True, text=True)
    assert got.returncode == 0, got.stdout + got.stderr
    with zipfile.ZipFile(next((tmp_path / "whl").glob("nvidia_nccl_cu13-*.whl"))) as wheel:
        (tmp_path / "a" / "libnccl.so.2").write_bytes(wheel.read("nvidia/nccl/lib/libnccl.so.2"))
    importable = broken_copy(runtime, BREAK_IMPORTABLE, "imagekit-test/pytorch-broken:importable", tmp_path / "a",
                              add=tmp_path / "a" / "libnccl.so.2")
    links = broken_copy(runtime, BREAK_LINKS, "imagekit-test/pytorch-broken:links", tmp_path / "b")
    try:
        outcomes = check_outcomes(importable, _torch_specs(runtime))
        failed = {i for i, o in outcomes.items() if o.status == "failed"}
        assert failed == BROKEN_IMPORTABLE_FAILS, {i: o.detail for i, o in outcomes.items()}
        assert "built 2.30.7" in outcomes["pytorch.nccl_version"].detail  # compiled into torch
        assert "loaded 2.32.3" in outcomes["pytorch.nccl_version"].detail
        assert "nvidia/nccl/lib/libnccl.so.2" in outcomes["pytorch.one_nccl"].detail
        assert "Python.h" in outcomes["pytorch.compiler"].detail
        outcomes = check_outcomes(links, [s for s in _torch_specs(runtime)
                                     if s["id"] in ("pytorch.ldd_closure", "pytorch.compiler")])
        assert {i for i, o in outcomes.items() if o.status == "failed"} == {"pytorch.ldd_closure", "pytorch.compiler"}
        assert "libcublasLt.so.13 => not found" in outcomes["pytorch.ldd_closure"].detail
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", importable, links], capture_output=True)


@pytest.mark.slurm
def test_the_export_runs_torch_distributed_under_slurm_and_pyxis(pytorch_images, cluster, test_user, user_dir):
    """imagekit export -> .sqsh -> srun --container-image, as the unprivileged user, two ranks: torch
    imports with the stack's NCCL and the ranks allreduce over gloo (no GPU here)."""
    runtime, _ = pytorch_images
    sqsh = user_dir / "debian-pytorch.sqsh"
    proc = subprocess.run([sys.executable, "-m", "imagekit", "export", runtime, "--to", "enroot", "-o", str(sqsh),
                           "--no-store"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    os.chmod(sqsh, 0o644)
    script = ("import os, torch, torch.distributed as d\n"
              "d.init_process_group('gloo', rank=int(os.environ['SLURM_PROCID']),"
              " world_size=int(os.environ['SLURM_NTASKS']), init_method='tcp://127.0.0.1:29531')\n"
              "t = torch.tensor([d.get_rank() + 1.0]); d.all_reduce(t)\n"
              "print('rank', d.get_rank(), torch.__version__, torch.version.cuda,"
              " '.'.join(map(str, torch.cuda.nccl.version())), 'sum', t.item(), flush=True)\n"
              "d.destroy_process_group()\n")
    job = test_user.run(["srun", "-n", "2", f"--container-image={sqsh}",
                         "--container-env=NVIDIA_VISIBLE_DEVICES", "python3", "-c", script],
                        env={"SLURM_CONF": str(cluster.conf), "NVIDIA_VISIBLE_DEVICES": "void"}, timeout=600,
                        stderr=subprocess.PIPE)
    out = job.stdout + job.stderr
    assert job.returncode == 0, out
    for rank in (0, 1):
        assert f"rank {rank} 2.15.0" in out and "13.2 2.30.7 sum 3.0" in out, out
