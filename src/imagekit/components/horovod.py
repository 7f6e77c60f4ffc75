"""Horovod built from source against the stack's NCCL and MPI, for PyTorch."""

from __future__ import annotations

from imagekit import checks
from imagekit.components import Component, Requires, _blocks
from imagekit.components.python import VENV


class Horovod(Component):
    name = "horovod"
    summary = "Horovod (pip, built with NCCL + MPI) for PyTorch"
    order = 100
    provides = ("horovod",)
    requires = (Requires("pytorch"), Requires("mpi"), Requires("nccl"))  # pytorch brings the pip env
    sources = ("pypi",)

    def check_stack(self) -> None:
        """Horovod 0.28.1 (the last release) compiles as C++14; PyTorch >= 2.1 headers need C++17
        (horovod#3996, #4014; the fix 3a31d933 is in no release)."""
        torch = self.stack.provider("pytorch")

        def major_minor(v: str) -> tuple[int, int]:
            parts = [int(x) for x in v.split(".")[:2] if x.isdigit()]
            return (parts + [0, 0])[0], (parts + [0, 0])[1]
        if major_minor(torch.version) >= (2, 1) and major_minor(self.version) <= (0, 28):
            self.error("version", f"Horovod {self.version} does not compile against PyTorch {torch.version}: it "
                       "builds as C++14 and PyTorch >= 2.1 needs C++17 (horovod#3996); no Horovod release has "
                       "the fix", "drop horovod and use torch.distributed, or use PyTorch 2.0.x with Horovod 0.28.1")

    def devel(self) -> list:
        nccl = self.stack.provider("nccl")
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
