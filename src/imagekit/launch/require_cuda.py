"""``NVIDIA_REQUIRE_CUDA`` as libnvidia-container reads it, held against this host's driver (fourth CUDA
review, J9).

An nvidia/cuda base image sets ``NVIDIA_REQUIRE_CUDA`` (12.9: ``cuda>=12.9`` and a
``brand=X,driver>=535,driver<536`` clause per data-center branch and brand). libnvidia-container (through
Enroot's GPU hook and the NVIDIA container toolkit) refuses a container whose requirement the host does
not meet: space-separated clauses are alternatives, comma-separated constraints all hold (NVIDIA container
toolkit, "Environment variables": NVIDIA_REQUIRE_*). A host that meets only a ``brand``/``driver`` clause
starts the image through the image's forward-compatibility libcuda (cuda-compat), not the host's.

Brands are not read here (NVML's brand is not in nvidia-smi's query fields): a clause's brand is taken to
match, which is what NVIDIA's lists (every brand on each branch) amount to, so this errs towards
starting. The host's CUDA is the newest its driver branch supports (:data:`preflight_fabric.DRIVER_CUDA`).
"""

from __future__ import annotations

import re

from imagekit.image_facts import ImageFacts
from imagekit.launch.finding import FAIL, OK, SKIP, WARN, Finding
from imagekit.launch.preflight_fabric import driver_cuda

NAME = "GPU runtime requirement"
_CONSTRAINT = re.compile(r"(cuda|driver|brand)(>=|<=|==|=|>|<)([\w.]+)")


def _vt(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def _holds(op: str, have: tuple[int, ...], want: tuple[int, ...]) -> bool:
    width = max(len(have), len(want))
    have, want = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
    return {">=": have >= want, "<=": have <= want, ">": have > want, "<": have < want,
            "=": have == want, "==": have == want}[op]


def clause_holds(clause: str, driver: str, cuda: str) -> bool | None:
    """Whether one comma-separated clause holds for ``driver`` (and its ``cuda``); None if unreadable."""
    for part in clause.split(","):
        found = _CONSTRAINT.fullmatch(part.strip())
        if found is None:
            return None
        key, op, value = found.groups()
        if key == "brand":
            continue   # not read here: taken to match (see the module's docstring)
        if not _holds(op, _vt(driver if key == "driver" else cuda), _vt(value)):
            return False
    return True


def check(img: ImageFacts, driver: str | None) -> Finding:
    """Would the GPU runtime start this image on this host, and with which libcuda?"""
    require = (img.env or {}).get("NVIDIA_REQUIRE_CUDA") if img.env is not None else None
    if not driver:
        return Finding(NAME, SKIP, "no NVIDIA driver on this host")
    if not require:
        return Finding(NAME, SKIP, "the image sets no NVIDIA_REQUIRE_CUDA" if img.env is not None
                       else "the image's environment was not read")
    cuda = driver_cuda(driver)
    if cuda is None:
        return Finding(NAME, WARN, f"driver {driver}: its CUDA version is not known here", "check nvidia-smi")
    clauses = require.split()
    results = [clause_holds(c, driver, cuda) for c in clauses]
    if None in results:
        bad = clauses[results.index(None)]
        return Finding(NAME, WARN, f"NVIDIA_REQUIRE_CUDA clause {bad!r} is not one preflight reads",
                       "check it against the NVIDIA container toolkit's NVIDIA_REQUIRE_* syntax")
    cuda_only = [c for c, ok in zip(clauses, results) if ok and "driver" not in c and "brand" not in c]
    if cuda_only:
        return Finding(NAME, OK, f"driver {driver} (CUDA {cuda}) meets {cuda_only[0]}")
    branch = [c for c, ok in zip(clauses, results) if ok]
    if branch:
        return Finding(NAME, WARN, f"driver {driver} (CUDA {cuda}) meets NVIDIA_REQUIRE_CUDA only through "
                       f"{branch[0]!r}: the GPU runtime starts the image with its own forward-compatibility "
                       "libcuda (cuda-compat; data-center GPUs only), not this host's",
                       f"a driver of CUDA {_first_cuda(clauses) or 'the image'} or later runs it on the host's libcuda")
    return Finding(NAME, FAIL, f"driver {driver} (CUDA {cuda}) meets no clause of the image's NVIDIA_REQUIRE_CUDA "
                   f"({require}): the GPU runtime (Enroot's hook, the NVIDIA container toolkit) refuses to start it",
                   f"a driver of CUDA {_first_cuda(clauses) or 'the image'} or later, or a branch the clauses name")


def _first_cuda(clauses: list[str]) -> str | None:
    for clause in clauses:
        found = re.search(r"cuda>=([\d.]+)", clause)
        if found:
            return found.group(1)
    return None
