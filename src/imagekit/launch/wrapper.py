"""The per-rank wrapper: outside-in launchers start one container per MPI rank with it.

The host's process manager (``mpirun`` or ``srun --mpi=pmix``) starts the
wrapper once per rank; the wrapper runs the rank's command inside a container
that can still talk to that process manager:

- Docker isolates the environment, so every ``OMPI_*``/``PMIX_*``/``OPAL_*``
  (and ``SLURM_*``/``PMI_*``) variable is forwarded by name; the names are only
  known when the rank starts, hence a run-time loop rather than a fixed list.
- The PMIx server's rendezvous files live under ``$PMIX_SERVER_TMPDIR`` (Slurm)
  or the session directory in ``/tmp`` (ORTE): both are bind-mounted, otherwise
  every rank comes up as rank 0 of 1.
- ``--network=host --ipc=host --pid=host`` keep TCP, shared-memory and
  ``/proc``-based peer discovery working between ranks on one node.
- ``--cap-add=SYS_PTRACE``: Open MPI's shared-memory single copy (CMA,
  ``process_vm_readv``) is refused by Docker's default seccomp profile without
  it; every large message then fails over with "Read -1, expected N, errno = 1"
  at about half the bandwidth (measured by bench/launch.py).

Apptainer shares host namespaces and environment by default. Enroot takes
environment variables with ``--env NAME``, and runs one container per node, as
Pyxis does (``data/enroot-node.sh``): ranks of a node share its user and mount
namespace, so shared-memory single copy (CMA) works between them.

Each runtime's part of the wrapper is its class in :mod:`imagekit.launch.runtimes`
(``Runtime.rank_wrapper``); this module holds what they share.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from imagekit.util import quoting
from imagekit.launch.common import COMPONENT_ENV_PREFIXES, MPI_ENV_PREFIXES, SLURM_ENV_PREFIXES

# The enroot runtime's node container (one per node, every rank inside it): a bash part of its own.
ENROOT_NODE = Path(__file__).resolve().parents[1] / "data" / "enroot-node.sh"
# Slurm's GPU binding must reach the rank too.
EXTRA_ENV_NAMES = ("CUDA_VISIBLE_DEVICES",)


def forwarded_prefixes() -> tuple[str, ...]:
    """The process manager's variables, and the tuning a user sets on the host for any component
    (NCCL_IB_HCA, UCX_TLS, FI_PROVIDER, ...) that components declare."""
    return MPI_ENV_PREFIXES + SLURM_ENV_PREFIXES + COMPONENT_ENV_PREFIXES


def forward_loop(flag: str) -> str:
    """Bash that collects ``FLAG NAME`` for every variable of the process manager and the components,
    whose names are known only when the rank starts."""
    patterns = "|".join([p + "*" for p in forwarded_prefixes()] + list(EXTRA_ENV_NAMES))
    return (
        "forward=()\n"
        "while IFS= read -r name; do\n"
        '  case "$name" in\n'
        f'    {patterns}) forward+=({flag} "$name") ;;\n'
        "  esac\n"
        "done < <(compgen -e)\n"
    )


def extra_env(flag: str, names: list[str]) -> str:
    """``FLAG NAME`` for the job's own variables (set where the wrapper starts)."""
    return "".join(f"forward+=({flag} {quoting.sh_arg(quoting.env_name(n, 'launch', '--env name'))})\n" for n in names)


def image_env_args(flag: str, env: Mapping[str, str]) -> str:
    """The image's variables as the runtime's own arguments, ``FLAG 'NAME=VALUE'``: quoted words that
    the runtime hands to the container, never a variable of this (host) script."""
    if not env:
        return ""
    return ("# The image's own variables (its label): for the container only.\n" +
            "".join(f"forward+=({flag} {quoting.sh(f'{quoting.env_name(k)}={v}')})\n" for k, v in env.items()))


def head(runtime: str, image: str, job_id: str) -> str:
    """The wrapper's first lines, the same for every runtime: strict bash and the image."""
    return (
        "#!/bin/bash\n"
        f"# imagekit rank wrapper ({runtime}, job {job_id}): runs one MPI rank in a container.\n"
        "set -euo pipefail\n"
        f"image={quoting.sh_arg(image)}\n"
    )
