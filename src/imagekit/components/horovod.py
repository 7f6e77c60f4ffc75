"""Horovod built from source against the stack's NCCL and MPI, for PyTorch."""

from __future__ import annotations

from imagekit import checks
from imagekit.components import Component, _blocks
from imagekit.components.python import VENV


class Horovod(Component):
    name = "horovod"
    summary = "Horovod (pip, built with NCCL + MPI) for PyTorch"
    order = 100
    sources = ("pypi",)

    def devel(self) -> list:
        nccl = self.stack.get("nccl")
        env = {
            "HOROVOD_GPU_OPERATIONS": "NCCL", "HOROVOD_NCCL_HOME": nccl.prefix,
            "HOROVOD_WITH_MPI": "1", "HOROVOD_WITH_PYTORCH": "1",
            "HOROVOD_WITHOUT_TENSORFLOW": "1", "HOROVOD_WITHOUT_MXNET": "1",
        }
        return _blocks.apt_install(["cmake", "g++", "make"], "Horovod build tools") + \
            _blocks.pip_run([f"{VENV}/bin/python -m pip install --no-build-isolation horovod=={self.version}"],
                            f"Horovod {self.version} (NCCL + MPI)", env=env)

    def checks(self) -> list:
        return [
            checks.run("horovod.build", "Horovod is built with NCCL, MPI and PyTorch", "horovodrun --check-build",
                       expect=r"(?s)\[X\] PyTorch.*\[X\] MPI.*\[X\] NCCL"),
        ]
