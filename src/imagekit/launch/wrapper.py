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
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from imagekit import quoting
from imagekit.launch.common import (COMPONENT_ENV_PREFIXES, JOB_LABEL, MPI_ENV_PREFIXES, SLURM_ENV_PREFIXES,
                                    Mount, check_line, check_token)

RUNTIMES = ("docker", "apptainer", "enroot")
# The enroot runtime's node container (one per node, every rank inside it): a bash part of its own.
ENROOT_NODE = Path(__file__).resolve().parents[1] / "data" / "enroot-node.sh"
# Slurm's GPU binding must reach the rank too.
EXTRA_ENV_NAMES = ("CUDA_VISIBLE_DEVICES",)


def forwarded_prefixes() -> tuple[str, ...]:
    """The process manager's variables, and the tuning a user sets on the host for any component
    (NCCL_IB_HCA, UCX_TLS, FI_PROVIDER, ...) that components declare."""
    return MPI_ENV_PREFIXES + SLURM_ENV_PREFIXES + COMPONENT_ENV_PREFIXES


def _forward_loop(flag: str) -> str:
    patterns = "|".join([p + "*" for p in forwarded_prefixes()] + list(EXTRA_ENV_NAMES))
    return (
        "forward=()\n"
        "while IFS= read -r name; do\n"
        '  case "$name" in\n'
        f'    {patterns}) forward+=({flag} "$name") ;;\n'
        "  esac\n"
        "done < <(compgen -e)\n"
    )


def _extra_env(flag: str, names: list[str]) -> str:
    return "".join(f"forward+=({flag} {quoting.sh_arg(quoting.env_name(n, 'launch', '--env name'))})\n" for n in names)


def _image_env(flag: str, env: Mapping[str, str]) -> str:
    """The image's variables as the runtime's own arguments, ``FLAG 'NAME=VALUE'``: quoted words that
    the runtime hands to the container, never a variable of this (host) script."""
    if not env:
        return ""
    return ("# The image's own variables (its label): for the container only.\n" +
            "".join(f"forward+=({flag} {quoting.sh(f'{quoting.env_name(k)}={v}')})\n" for k, v in env.items()))


def render(runtime: str, image: str, *, job_id: str, mounts: list[Mount] = (),
           env_names: list[str] = (), gpus: bool = False, workdir: str | None = None,
           docker: str = "docker", image_env: Mapping[str, str] | None = None) -> str:
    """The wrapper script text for ``runtime``; it runs ``"$@"`` as one rank.

    ``env_names``: the job's variables (set in the environment that starts the wrapper), forwarded
    by name. ``image_env``: the image's variables, which reach the container as values and never
    this host script's environment (see ``common.check_image_env``)."""
    q = quoting.sh_arg
    check_token("job id", job_id)
    check_line("image", image)
    check_line("--workdir", workdir)
    image_env = dict(image_env or {})
    head = (
        "#!/bin/bash\n"
        f"# imagekit rank wrapper ({runtime}, job {job_id}): runs one MPI rank in a container.\n"
        "set -euo pipefail\n"
        f"image={q(image)}\n"
    )
    if runtime == "docker":
        # Slurm scripts set IMAGEKIT_JOB_ID per allocation; the literal is the generating job's id.
        head += f'job="${{IMAGEKIT_JOB_ID:-{job_id}}}"\n'
    if runtime == "docker":
        binds = "".join(f"binds+=(-v {q(f'{m.src}:{m.dst}' + (':ro' if m.readonly else ''))})\n" for m in mounts)
        body = (
            _forward_loop("-e") + _extra_env("-e", list(env_names)) + _image_env("-e", image_env) +
            "# /tmp holds ORTE's session directory; PMIX_SERVER_TMPDIR holds Slurm's PMIx rendezvous.\n"
            "binds=(-v /tmp:/tmp)\n"
            'if [ -n "${PMIX_SERVER_TMPDIR:-}" ]; then\n'
            '  binds+=(-v "$PMIX_SERVER_TMPDIR:$PMIX_SERVER_TMPDIR")\n'
            "fi\n" + binds +
            "# RDMA pins memory: give the rank the host's hard memlock limit (docker's default is 64 KiB).\n"
            'memlock=$(ulimit -H -l)\n'
            'if [ "$memlock" = unlimited ]; then memlock=-1; else memlock=$((memlock * 1024)); fi\n'
            'extra=(--ulimit "memlock=$memlock:$memlock")\n' +
            ("extra+=(--gpus all)\n" if gpus else "") +
            (f"extra+=(-w {q(workdir)})\n" if workdir else "") +
            f'exec {q(docker)} run --rm --label "{JOB_LABEL}=$job" \\\n'
            "  --network=host --ipc=host --pid=host --cap-add=SYS_PTRACE \\\n"
            '  --user "$(id -u):$(id -g)" "${forward[@]}" "${binds[@]}" "${extra[@]}" \\\n'
            '  "$image" "$@"\n'
        )
    elif runtime == "apptainer":
        binds = "".join(f"binds+=(--bind {q(f'{m.src}:{m.dst}' + (':ro' if m.readonly else ''))})\n" for m in mounts)
        body = (
            "# Apptainer passes the host environment and namespaces through; only\n"
            "# Slurm's PMIx directory (outside /tmp) must be bound explicitly.\n"
            "binds=()\n"
            'if [ -n "${PMIX_SERVER_TMPDIR:-}" ]; then\n'
            '  binds+=(--bind "$PMIX_SERVER_TMPDIR")\n'
            "fi\n" + binds +
            "extra=()\n" +
            ("extra+=(--nv)\n" if gpus else "") +
            (f"extra+=(--pwd {q(workdir)})\n" if workdir else "") +
            # APPTAINERENV_NAME=VALUE is Apptainer's own channel to the container (exact, unlike
            # --env, whose parser splits at commas and trims quotes); no host program reads it.
            ("# The image's own variables (its label): for the container only.\n"
             "exec env " + " ".join(quoting.sh(f"APPTAINERENV_{quoting.env_name(k)}={v}")
                                    for k, v in image_env.items()) + " \\\n  "
             if image_env else "exec ") +
            'apptainer exec "${binds[@]}" "${extra[@]}" "$image" "$@"\n'
        )
    elif runtime == "enroot":
        def fstab(src: str, dst: str, ro: bool = False) -> str:
            return f"{src}:{dst}:none:x-create=auto,rbind" + (",ro" if ro else "")
        # Always quoted: shellcheck reads bare commas in an array as a mistake.
        binds = "".join(f"binds+=(--mount {quoting.sh(fstab(m.src, m.dst, m.readonly))})\n"
                        for m in (m.check_fstab("enroot") for m in mounts))
        body = (
            f'job="${{IMAGEKIT_JOB_ID:-{job_id}}}"\n' +
            _forward_loop("--env") + _extra_env("--env", list(env_names)) + _image_env("--env", image_env) +
            f"binds=(--mount {quoting.sh(fstab('/tmp', '/tmp'))})\n"
            'if [ -n "${PMIX_SERVER_TMPDIR:-}" ]; then\n'
            '  binds+=(--mount "$PMIX_SERVER_TMPDIR:$PMIX_SERVER_TMPDIR:none:x-create=dir,rbind")\n'
            "fi\n" + binds +
            # enroot has no workdir flag: the rank's command runs through sh -c cd.
            ("# shellcheck disable=SC2016 # expanded by the container's sh, not here\n"
             f'set -- sh -c \'cd "$0" && exec "$@"\' {q(workdir)} "$@"\n' if workdir else "") +
            ENROOT_NODE.read_text()
        )
    else:  # pragma: no cover - callers validate the runtime first
        raise ValueError(runtime)
    return head + body
