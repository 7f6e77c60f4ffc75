"""NVIDIA_REQUIRE_CUDA held against the host's driver as libnvidia-container reads it (fourth CUDA review, J9):
space-separated clauses are alternatives, comma-separated constraints all hold. The requirement is the one
nvidia/cuda 12.9's base images set (as public Dockerfiles copying NVIDIA's reproduce it); no GPU runtime
exists here, so its decisions are those the toolkit's documentation gives for these drivers."""

from __future__ import annotations

from imagekit import image_facts
from imagekit.launch import preflight as pf
from imagekit.launch import require_cuda

BRANDS = ("unknown", "grid", "tesla", "nvidia", "quadro", "quadrortx", "nvidiartx", "vapps", "vpc", "vcs", "vws",
          "cloudgaming", "geforce", "geforcertx", "titan", "titanrtx")
CUDA129 = "cuda>=12.9 " + " ".join(f"brand={b},driver>={d},driver<{d + 1}" for d in (535, 550, 560, 565, 570)
                                     for b in BRANDS)
LABELS = {"io.imagekit.stack": "nccl-tests-volta", "io.imagekit.components": "cuda",
          "io.imagekit.component.cuda.version": "12.9.1"}


def image(require: str | None):
    return image_facts.from_labels(LABELS, ref="v", env={} if require is None else {"NVIDIA_REQUIRE_CUDA": require})


def test_a_new_enough_driver_meets_the_cuda_clause():
    assert require_cuda.check(image(CUDA129), "575.51.03").status == "ok"
    assert require_cuda.check(image("cuda>=12.0"), "535.183.01").status == "ok"   # the wheel images' own


def test_a_listed_branch_starts_through_forward_compatibility():
    c = require_cuda.check(image(CUDA129), "535.183.01")
    assert c.status == "warn" and "forward-compatibility" in c.detail and "driver>=535,driver<536" in c.detail


def test_an_unlisted_branch_is_refused_as_the_gpu_runtime_would():
    for driver in ("525.147.05", "545.29.06", "555.42.06"):
        c = require_cuda.check(image(CUDA129), driver)
        assert c.status == "fail" and "refuses to start it" in c.detail and "12.9" in c.fix, driver


def test_preflight_runs_it_on_a_host_with_a_driver():
    found = {c.name: c for c in pf.run("v", host=pf.HostFacts(driver="545.29.06"), facts=image(CUDA129))}
    assert found["GPU runtime requirement"].status == "fail"
    assert "GPU runtime requirement" not in {c.name for c in pf.run("v", host=pf.HostFacts(), facts=image(CUDA129))}
    assert require_cuda.check(image(None), "580.65.06").status == "not checked"
