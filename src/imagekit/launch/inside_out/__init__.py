"""Inside-out: worker containers run sshd; ``mpirun`` inside the first one starts the ranks.

For one launch imagekit makes a key pair and an sshd host key (never in the
image), mounts them read-only at ``/run/imagekit`` and each worker copies them
into place with mode 600 before starting ``sshd -D -p 2222`` (a non-default
port, so a node's own sshd is never in the way when workers use the host
network under Slurm). The launcher pins the job's host key in known_hosts
instead of turning host-key checking off.

Everything is labelled ``io.imagekit.job=<id>`` and removed on exit, failure,
Ctrl-C or SIGTERM (``finally`` + signal handlers), within ``cleanup_timeout``
seconds however slow the engine is: what it did not remove by then is named,
and carries the launcher's owner label, so the next imagekit command sweeps it
(``imagekit launch cleanup --job ID`` removes it at once). Leftovers from a
killed launcher can be found with ``docker ps -a --filter label=io.imagekit.job``.
"""

from imagekit.launch.inside_out.job import (CALL_TIMEOUT, EXIT_NO_MPI, EXIT_NO_SSHD, MOUNT, PORT, ROOT_ENV,
                                            SSH_CONFIG, START_SH, WAIT_SH, make_job_dir)
from imagekit.launch.inside_out.local import InsideOutRun, execute, remove_job
from imagekit.launch.inside_out.sbatch import render_sbatch
from imagekit.launch.inside_out.sshd_inside import SshdInside

__all__ = ["CALL_TIMEOUT", "EXIT_NO_MPI", "EXIT_NO_SSHD", "MOUNT", "PORT", "ROOT_ENV", "SSH_CONFIG", "START_SH",
           "WAIT_SH", "InsideOutRun", "SshdInside", "execute", "make_job_dir", "remove_job", "render_sbatch"]
