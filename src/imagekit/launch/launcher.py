"""The one interface a launch flow runs a job through (:class:`Launcher`).

:class:`imagekit.launch.session.Session` prepares a launch the same way for every launcher (the image's
facts, the command, preflight) and then runs it through this protocol, so the flow is typed against
one interface instead of a closure per CLI command. The launchers that start a job implement it next
to their rank starter: :class:`imagekit.launch.schedulers.SlurmRun` (submit the sbatch script and wait),
:class:`imagekit.launch.mpirun.MpirunRun` (the host's mpirun) and
:class:`imagekit.launch.inside_out.local.InsideOutRun` (sshd containers, mpirun inside). The Kubernetes
targets only write manifests that ``kubectl`` applies: imagekit never runs them, so they have none.
"""

from __future__ import annotations

from typing import IO, Protocol


class Launcher(Protocol):
    """A job ready to start."""

    def run(self, stdout: IO[str] | None) -> int:
        """Start the job and wait for it; its output goes to ``stdout`` (None: the terminal's).
        Returns the job's exit code."""
        ...


def report(launcher: Launcher, rc: int) -> str | None:
    """What ``launcher`` prints once its job ended with ``rc`` (inside-out's ``--json``), if anything."""
    own = getattr(launcher, "report", None)
    return own(rc) if own is not None else None
