"""``NVIDIA_VISIBLE_DEVICES``: whether a container asks the host's GPU runtime for GPUs.

CUDA images set ``NVIDIA_VISIBLE_DEVICES=all`` so that the GPU runtime injects the driver.
Enroot's ``98-nvidia.sh`` hook (and so Pyxis) and the NVIDIA container toolkit read it
from the container's environment (the image's, then the user's ``--env`` values, which
win): unset, empty or ``void`` means "no GPU runtime"; ``none`` still injects the driver
libraries without devices; anything else runs ``nvidia-container-cli``, which a host
without it (or without a loaded driver) fails on, so the container never starts. Docker
injects GPUs only with ``--gpus`` and Apptainer only with ``--nv``; they never fail
because of the variable alone.

This module holds those rules, shared by preflight (which says when a start will fail
here) and the launchers (which give CPU-only jobs ``NVIDIA_VISIBLE_DEVICES=void``). Which
runtime reads the variable, and each one's fix, is its class's
(:mod:`imagekit.launch.runtimes`: ``gpu_hook``, ``gpu_fix``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

VAR = "NVIDIA_VISIBLE_DEVICES"
NO_GPU = "void"


def asks_for_gpus(value: str | None) -> bool:
    """True when a container with ``NVIDIA_VISIBLE_DEVICES=value`` needs the GPU runtime.

    Enroot's hook exits early for ``${NVIDIA_VISIBLE_DEVICES:-void} = void``; ``none`` still
    runs nvidia-container-cli (driver libraries, no device), so it counts as asking."""
    return (value or NO_GPU) != NO_GPU


@dataclass(frozen=True)
class GpuLaunch:
    """How the containers will be started, as far as the GPU runtime cares (preflight's input).

    ``runtime``: the container runtime (:class:`imagekit.launch.runtimes.Runtime`), or None when preflight
    runs without a launcher (then a ``.sif`` means Apptainer and a ``.sqsh`` Enroot/Pyxis). ``env``: what
    the launcher sets in the containers (it wins over the image's). ``gpus``: the launcher asks for GPUs
    (``--gpus-per-node``, ``--gpus``). ``here``: the containers start on this host, so a missing GPU
    runtime here fails the start; otherwise (a Slurm login node) the compute nodes may well have what this
    host lacks. ``fix``: how the launcher itself hides GPUs from jobs that ask for none.
    """

    runtime: Any = None
    env: Mapping[str, str] = field(default_factory=dict)
    gpus: bool = False
    here: bool = False
    fix: str | None = None


def cpu_only_env(env: dict[str, str], image_env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment for the containers of a job that asks for no GPUs, under a runtime where the
    variable alone starts the GPU runtime (``Runtime.gpu_hook``).

    Adds ``NVIDIA_VISIBLE_DEVICES=void``: always when the image's environment could not be read here
    (the variable is harmless where nothing reads it), never when the user set the variable (``--env``
    wins) or the image asks for no GPUs (nothing to undo, no noise in the script)."""
    if VAR in env:
        return env
    if image_env is not None and not asks_for_gpus(image_env.get(VAR)):
        return env
    return {**env, VAR: NO_GPU}
