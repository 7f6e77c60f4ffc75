"""The one interface a launch flow runs a job through (:class:`Launcher`).

:class:`imagekit.launch.session.Session` prepares a launch the same way for every launcher (the image's
facts, the command, preflight) and then runs it through this protocol, so the flow is typed against
one interface instead of a closure per CLI command. The launchers that start a job implement it next
to their job model: :class:`imagekit.launch.slurm.SlurmRun` (submit the sbatch script and wait),
:class:`imagekit.launch.mpirun.MpirunRun` (the host's mpirun) and
:class:`imagekit.launch.inside_out.local.InsideOutRun` (sshd containers, mpirun inside). The Kubeflow
MPIJob (:mod:`imagekit.launch.mpijob`) only writes a manifest that ``kubectl`` applies: imagekit never
runs it, so it has no ``run``.
"""

from __future__ import annotations

from typing import IO, Protocol


class Launcher(Protocol):
    """A job ready to start: ``name`` is what preflight and the GPU checks call the launcher."""

    name: str

    def run(self, stdout: IO[str] | None) -> int:
        """Start the job and wait for it; its output goes to ``stdout`` (None: the terminal's).
        Returns the job's exit code."""
        ...
