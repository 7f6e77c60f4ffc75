"""The container runtimes a launch starts its containers with: one class each, and the one list of names.

Every rank starter asks its runtime instead of testing its name: how a rank's container starts (the
rank wrapper, or Pyxis's ``srun`` flags), how mounts and the environment reach it, what an sbatch script
or ``run.sh`` adds for it, what it can do (a rank wrapper, containers on this engine: the starters that
need it accept it), what preflight checks for it, and how it treats ``NVIDIA_VISIBLE_DEVICES``
(:mod:`imagekit.launch.gpu_env`). A new runtime is one :class:`Runtime` subclass here and its row in
``_ALL``; a launch resolves the name once with :func:`of`.

- :class:`Pyxis`: Slurm's SPANK plugin; ``srun --container-image=…`` starts one Enroot container
  per task, its hooks bring in PMIx and GPUs (flags as NVIDIA/pyxis's usage documents them).
- :class:`Apptainer`: shares the host's environment and namespaces; ``--bind``, ``--nv``, ``--pwd``.
- :class:`Enroot`: one container per node (``data/enroot-node.sh``), ``--env NAME`` and fstab mounts.
- :class:`Docker`: the image engine's CLI, one container per rank, every variable forwarded by name,
  each container labelled with the job so that what a killed rank leaves is removed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from imagekit.util import quoting
from imagekit.util.errors import UsageError
from imagekit.launch import edf, gpu_env, wrapper
from imagekit.launch.common import JOB_LABEL, Mount, check_line, check_token, quote
from imagekit.launch.workload import Workload

if TYPE_CHECKING:
    from imagekit.launch.starters import Starter


@dataclass(frozen=True)
class RankStart:
    """What starts one rank's container, whichever starter runs the wrapper: the ``workload``, the
    names of the job's variables (``env_names``: set where the wrapper starts, forwarded by name; the
    image's reach the container as values, never the host script's environment, see
    ``common.check_image_env``), whether the container gets the host's GPUs (``pass_gpus``: ``--gpus
    all``, ``--nv``) and the engine's CLI (``docker``)."""

    workload: Workload
    env_names: Sequence[str] = ()
    pass_gpus: bool = False
    docker: str = "docker"

    @property
    def image_env(self) -> dict[str, str]:
        """The image's variables the job's own do not override."""
        return {k: v for k, v in self.workload.image_env.items() if k not in self.env_names}


@dataclass(frozen=True)
class SrunStep:
    """The sbatch script's one ``srun --mpi=pmix`` step: ``srun`` is its words up to the command.
    ``container_name`` and ``mount_home`` are for Pyxis, which starts the containers itself."""

    rank: RankStart
    srun: list[str]
    container_name: str | None = None
    mount_home: bool | None = None
    # The files the runtime contributes (``Runtime.files``), by name: where the job finds each.
    files: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuVerdict:
    """A runtime's own answer to "will the containers start here?" (preflight's GPU runtime check).
    Not ``fine``: the start fails where the containers start on this host."""

    fine: bool
    detail: str
    fix: str | None = None


class Runtime:
    """One container runtime. Subclasses set the class attributes and the methods that differ."""

    name: ClassVar[str]
    # It has a rank wrapper (a script that runs "$@" in a container): the host's mpirun can start its ranks.
    rank_wrapper_kind: ClassVar[bool] = True
    # It describes the containers in a file beside the script (files()), not on the srun line.
    writes_files: ClassVar[bool] = False
    # srun can name its container (--container-name) and its home mount (--[no-]container-mount-home).
    container_flags: ClassVar[bool] = False
    # NVIDIA_VISIBLE_DEVICES alone makes it start the GPU runtime: Enroot's hook (Pyxis runs Enroot), and
    # Docker when the site made the NVIDIA runtime its default (then `docker run` without --gpus reads it).
    gpu_hook: ClassVar[bool] = False
    # Enroot writes mounts as fstab lines (Pyxis too, and separates them with ','): no whitespace or ','.
    fstab_mounts: ClassVar[bool] = False
    # The image's variables pass through the job's environment on the host (Pyxis's --container-env).
    host_env: ClassVar[bool] = False
    # Started by the image engine's CLI: preflight may run a container to probe an unlabelled image, and
    # the containers carry the job label, so that the launcher removes what a killed rank leaves.
    engine: ClassVar[bool] = False
    # --stage: the runtime imports through Pyxis's importer, whose store the stage step fills.
    stages: ClassVar[bool] = False
    # The image files that imply it when no runtime is named (preflight: a .sif means Apptainer).
    own_suffixes: ClassVar[tuple[str, ...]] = ()
    # The sbatch notes' /dev/shm line: how the runtime shares the node's /dev/shm.
    shm_note: ClassVar[str] = "; size it to several GiB"
    # How to start the image without GPUs when the host has no GPU runtime (None: nothing to do).
    gpu_fix: ClassVar[str | None] = None

    def __repr__(self) -> str:
        return f"<runtime {self.name}>"

    # --- mounts and the environment --------------------------------------------------------

    def check_mounts(self, mounts: Sequence[Mount]) -> None:
        """Refuse the mounts the runtime cannot carry (fstab lines split fields at whitespace)."""
        if self.fstab_mounts:
            for m in mounts:
                m.check_fstab(self.name)

    def check_image(self, image: str) -> None:
        """Refuse an image the runtime cannot start (Sarus Suite: a file path)."""

    def cpu_only_env(self, env: dict[str, str], image_env: Mapping[str, str] | None) -> dict[str, str]:
        """The environment for a job that asks for no GPUs: ``NVIDIA_VISIBLE_DEVICES=void`` where the
        variable alone would start the GPU runtime (:func:`gpu_env.cpu_only_env`)."""
        return gpu_env.cpu_only_env(env, image_env) if self.gpu_hook else env

    # --- the rank wrapper (launch mpirun's rank.sh, launch slurm's rank_wrapper) ------------

    def rank_wrapper(self, start: RankStart) -> str:
        """The wrapper script that runs ``"$@"`` as one rank inside a container."""
        w = start.workload
        check_token("job id", w.job_id)
        check_line("image", w.image)
        check_line("--workdir", w.workdir)
        return wrapper.head(self.name, w.image, w.job_id) + self.wrapper_body(start)

    def wrapper_body(self, start: RankStart) -> str:
        """The wrapper after its head (``image`` set): binds, environment, and the runtime's ``exec``."""
        raise UsageError(f"the {self.name} runtime has no rank wrapper: it starts containers with srun's own "
                         "options only", f"use one of: {', '.join(r.name for r in _ALL if r.rank_wrapper_kind)}")

    # --- files beside the script ------------------------------------------------------------

    def files(self, workload: Workload) -> dict[str, str]:
        """Files the runtime needs beside the job's script (name -> text): EDF's TOML."""
        return {}

    # --- Slurm: the sbatch script's srun step -----------------------------------------------

    def srun_lines(self, step: SrunStep) -> list[str]:
        """The script's lines that start the containers: the rank wrapper, handed to every task with
        ``bash -c`` (no shared filesystem needed), which binds ``$PMIX_SERVER_TMPDIR``."""
        text = self.rank_wrapper(step.rank)
        return [
            'export IMAGEKIT_JOB_ID="imagekit-${SLURM_JOB_ID:-local}"',
            "# The per-rank wrapper, passed to every task with bash -c (no shared filesystem needed).",
            # One single-quoted word: no heredoc marker for a value to collide with.
            "# shellcheck disable=SC2016 # expanded by each task's bash, not here",
            f"rank_wrapper={quoting.sh(text)}",
        ] + self.sbatch_cleanup() + [quote(step.srun) + ' bash -c "$rank_wrapper" imagekit-rank '
                                     + quote(step.rank.workload.command)]

    def sbatch_cleanup(self) -> list[str]:
        """Lines that remove the job's containers on every node when the script exits."""
        return []

    # --- host mpirun: run.sh ----------------------------------------------------------------

    def run_cleanup(self, docker: str) -> list[str]:
        """``run.sh`` lines that remove this host's containers of the job when it exits."""
        return []

    # --- the GPU runtime --------------------------------------------------------------------

    def gpu_verdict(self, gpus: bool, driver: str | None, lacks: str | None) -> GpuVerdict | None:
        """Preflight's GPU runtime check for this runtime, or None where the image's
        ``NVIDIA_VISIBLE_DEVICES`` decides (the NVIDIA hook's rule, judged by preflight).
        ``gpus``: the launch asks for GPUs; ``driver``: this host's; ``lacks``: what this host lacks
        of driver and nvidia-container-cli ("this host has no …"), None when it has both."""
        return None


class Pyxis(Runtime):
    name = "pyxis"
    rank_wrapper_kind = False
    container_flags = True
    gpu_hook = True
    fstab_mounts = True
    host_env = True
    stages = True
    gpu_fix = f"Pyxis: `export {gpu_env.VAR}={gpu_env.NO_GPU}` and `srun --container-env={gpu_env.VAR} …`"

    def srun_lines(self, step: SrunStep) -> list[str]:
        """Pyxis's flags on the srun line; its hooks bring in PMIx and GPUs."""
        image_env = step.rank.image_env
        lines = []
        if image_env:
            # Pyxis reads them from srun's environment: only names checked safe there (check_image_env).
            lines.append(f"# The image's own variables (label {step.rank.workload.image_env_label}), "
                         "for --container-env:")
            lines += [f"export {k}={quoting.sh_arg(v)}" for k, v in image_env.items()]
        srun = step.srun + self.flags(step, list(step.rank.env_names) + list(image_env))
        return lines + [quote(srun) + " " + quote(step.rank.workload.command)]

    @staticmethod
    def flags(step: SrunStep, env_names: list[str]) -> list[str]:
        """``--container-*`` flags (Pyxis: mounts ``SRC:DST[:FLAGS]`` separated by ``,``)."""
        w = step.rank.workload
        flags = [f"--container-image={w.image}"]
        if w.mounts:
            flags.append("--container-mounts=" + ",".join(
                f"{m.src}:{m.dst}" + (":ro" if m.readonly else "") for m in w.mounts))
        if w.workdir:
            flags.append(f"--container-workdir={w.workdir}")
        if step.container_name:
            flags.append(f"--container-name={step.container_name}")
        if env_names:
            # Exported variables reach the container anyway, but the image's values win unless listed here.
            flags.append("--container-env=" + ",".join(env_names))
        if step.mount_home is True:
            flags.append("--container-mount-home")
        elif step.mount_home is False:
            flags.append("--no-container-mount-home")
        return flags


class Apptainer(Runtime):
    name = "apptainer"
    own_suffixes = (".sif",)

    def wrapper_body(self, start: RankStart) -> str:
        q = quoting.sh_arg
        w = start.workload
        binds = "".join(f"binds+=(--bind {q(f'{m.src}:{m.dst}' + (':ro' if m.readonly else ''))})\n"
                        for m in w.mounts)
        return (
            "# Apptainer passes the host environment and namespaces through; only\n"
            "# Slurm's PMIx directory (outside /tmp) must be bound explicitly.\n"
            "binds=()\n"
            'if [ -n "${PMIX_SERVER_TMPDIR:-}" ]; then\n'
            '  binds+=(--bind "$PMIX_SERVER_TMPDIR")\n'
            "fi\n" + binds +
            "extra=()\n" +
            ("extra+=(--nv)\n" if start.pass_gpus else "") +
            (f"extra+=(--pwd {q(w.workdir)})\n" if w.workdir else "") +
            # APPTAINERENV_NAME=VALUE is Apptainer's own channel to the container (exact, unlike
            # --env, whose parser splits at commas and trims quotes); no host program reads it.
            ("# The image's own variables (its label): for the container only.\n"
             "exec env " + " ".join(quoting.sh(f"APPTAINERENV_{quoting.env_name(k)}={v}")
                                    for k, v in start.image_env.items()) + " \\\n  "
             if start.image_env else "exec ") +
            'apptainer exec "${binds[@]}" "${extra[@]}" "$image" "$@"\n'
        )

    def gpu_verdict(self, gpus: bool, driver: str | None, lacks: str | None) -> GpuVerdict:
        # --nv without a driver only warns; without --nv nothing reads the variable.
        if not gpus:
            no_driver = "" if driver else "; this host has no NVIDIA driver, so --nv finds none here"
            return GpuVerdict(True, f"Apptainer gives containers GPUs only with --nv, whatever {gpu_env.VAR} "
                                    f"says{no_driver}")
        return GpuVerdict(True, f"apptainer --nv: driver {driver}" if driver else
                          "apptainer --nv: this host has no NVIDIA driver; the containers start without GPUs")


class Enroot(Runtime):
    name = "enroot"
    gpu_hook = True
    fstab_mounts = True
    gpu_fix = f"Enroot: `enroot start --env {gpu_env.VAR}={gpu_env.NO_GPU} …`"

    @staticmethod
    def _fstab(src: str, dst: str, ro: bool = False) -> str:
        return f"{src}:{dst}:none:x-create=auto,rbind" + (",ro" if ro else "")

    def wrapper_body(self, start: RankStart) -> str:
        # Always quoted: shellcheck reads bare commas in an array as a mistake.
        w = start.workload
        binds = "".join(f"binds+=(--mount {quoting.sh(self._fstab(m.src, m.dst, m.readonly))})\n"
                        for m in (m.check_fstab(self.name) for m in w.mounts))
        return (
            f'job="${{IMAGEKIT_JOB_ID:-{w.job_id}}}"\n' +
            wrapper.forward_loop("--env") + wrapper.extra_env("--env", list(start.env_names)) +
            wrapper.image_env_args("--env", start.image_env) +
            f"binds=(--mount {quoting.sh(self._fstab('/tmp', '/tmp'))})\n"
            'if [ -n "${PMIX_SERVER_TMPDIR:-}" ]; then\n'
            '  binds+=(--mount "$PMIX_SERVER_TMPDIR:$PMIX_SERVER_TMPDIR:none:x-create=dir,rbind")\n'
            "fi\n" + binds +
            # enroot has no workdir flag: the rank's command runs through sh -c cd.
            ("# shellcheck disable=SC2016 # expanded by the container's sh, not here\n"
             f'set -- sh -c \'cd "$0" && exec "$@"\' {quoting.sh_arg(w.workdir)} "$@"\n'
             if w.workdir else "") +
            wrapper.ENROOT_NODE.read_text()
        )


class Docker(Runtime):
    name = "docker"
    gpu_hook = True
    engine = True
    shm_note = " (--ipc=host)"

    def wrapper_body(self, start: RankStart) -> str:
        q = quoting.sh_arg
        w = start.workload
        binds = "".join(f"binds+=(-v {q(f'{m.src}:{m.dst}' + (':ro' if m.readonly else ''))})\n"
                        for m in w.mounts)
        return (
            # Slurm scripts set IMAGEKIT_JOB_ID per allocation; the literal is the generating job's id.
            f'job="${{IMAGEKIT_JOB_ID:-{w.job_id}}}"\n' +
            wrapper.forward_loop("-e") + wrapper.extra_env("-e", list(start.env_names)) +
            wrapper.image_env_args("-e", start.image_env) +
            "# /tmp holds ORTE's session directory; PMIX_SERVER_TMPDIR holds Slurm's PMIx rendezvous.\n"
            "binds=(-v /tmp:/tmp)\n"
            'if [ -n "${PMIX_SERVER_TMPDIR:-}" ]; then\n'
            '  binds+=(-v "$PMIX_SERVER_TMPDIR:$PMIX_SERVER_TMPDIR")\n'
            "fi\n" + binds +
            "# RDMA pins memory: give the rank the host's hard memlock limit (docker's default is 64 KiB).\n"
            'memlock=$(ulimit -H -l)\n'
            'if [ "$memlock" = unlimited ]; then memlock=-1; else memlock=$((memlock * 1024)); fi\n'
            'extra=(--ulimit "memlock=$memlock:$memlock")\n' +
            ("extra+=(--gpus all)\n" if start.pass_gpus else "") +
            (f"extra+=(-w {q(w.workdir)})\n" if w.workdir else "") +
            f'exec {q(start.docker)} run --rm --label "{JOB_LABEL}=$job" \\\n'
            "  --network=host --ipc=host --pid=host --cap-add=SYS_PTRACE \\\n"
            '  --user "$(id -u):$(id -g)" "${forward[@]}" "${binds[@]}" "${extra[@]}" \\\n'
            '  "$image" "$@"\n'
        )

    def sbatch_cleanup(self) -> list[str]:
        return [
            "# Ranks killed hard leave containers behind: remove this job's on every node at exit.",
            "trap 'srun --overlap --nodes=\"$SLURM_JOB_NUM_NODES\" --ntasks=\"$SLURM_JOB_NUM_NODES\" sh -c \"docker ps -q "
            f"--filter label={JOB_LABEL}=$IMAGEKIT_JOB_ID | xargs -r docker rm -f >/dev/null\" || true' EXIT",
        ]

    def run_cleanup(self, docker: str) -> list[str]:
        q = quoting.sh_arg
        cleanup = f'{q(docker)} ps -q --filter "label={JOB_LABEL}=$IMAGEKIT_JOB_ID" | xargs -r {q(docker)} rm -f >/dev/null'
        return [
            "# ranks killed hard (SIGKILL to the docker client) leave their container running",
            f"trap {quoting.sh(cleanup)} EXIT",
        ]

    def gpu_verdict(self, gpus: bool, driver: str | None, lacks: str | None) -> GpuVerdict | None:
        if lacks is None:
            return None
        if not gpus:
            return GpuVerdict(True, f"Docker gives containers GPUs only with --gpus, whatever {gpu_env.VAR} says")
        return GpuVerdict(False, f"`docker run --gpus all` needs the NVIDIA container toolkit and driver, and {lacks}",
                          "leave out --gpus on hosts without GPUs, or run on GPU nodes with the NVIDIA driver "
                          "and the NVIDIA container toolkit")


class Edf(Runtime):
    """CSCS's production Container Engine: ``srun --environment=FILE``, the EDF written beside the script
    (:mod:`imagekit.launch.edf`); its hooks bring PMIx, GPUs and the network."""

    name = "edf"
    rank_wrapper_kind = False
    writes_files = True
    gpu_hook = True     # the production CE starts Enroot, whose NVIDIA hook reads the variable
    flavour = edf.PRODUCTION
    flag = "--environment"
    shm_note = " (the Container Engine's)"

    def files(self, workload: Workload) -> dict[str, str]:
        return {f"imagekit-{workload.job_id}.toml": edf.render(
            flavour=self.flavour, image=workload.image, env=workload.container_env, mounts=workload.mounts,
            workdir=workload.workdir, gpus=workload.wants_gpus, traits=workload.traits)}

    def srun_lines(self, step: SrunStep) -> list[str]:
        (path,) = step.files.values()
        return [f"# The job's containers are described by {path} (EDF): image, environment, mounts, hooks.",
                quote(step.srun + [f"{self.flag}={path}"]) + " " + quote(step.rank.workload.command)]


class SarusSuite(Edf):
    """CSCS's Sarus Suite (Podman): ``srun --edf=FILE``; registry references only."""

    name = "sarus-suite"
    flavour = edf.SARUS_SUITE
    flag = "--edf"
    gpu_hook = False    # Podman takes GPUs as CDI devices (the EDF's devices), never from the variable

    def check_image(self, image: str) -> None:
        if image.startswith(("/", ".")):
            raise UsageError(f"sarus-suite: image: {image} is a file path, and Sarus Suite takes registry "
                             "references only (its image store is Podman's)",
                             "push the image and give its reference (REGISTRY#IMAGE:TAG), or use --runtime edf")


# The runtimes, in the order the CLI and errors name them. A new runtime: its class above and a row here.
_ALL: tuple[Runtime, ...] = (Pyxis(), Apptainer(), Enroot(), Docker(), Edf(), SarusSuite())
_BY_NAME = {rt.name: rt for rt in _ALL}
RUNTIMES: tuple[str, ...] = tuple(_BY_NAME)


def names(starter: "type[Starter] | None" = None) -> tuple[str, ...]:
    """The runtimes ``starter`` accepts (None: every one), in ``RUNTIMES`` order."""
    return tuple(n for n in RUNTIMES if starter is None or starter.accepts(_BY_NAME[n]))


def of(name: str, starter: "type[Starter] | None" = None, target: str = "") -> Runtime:
    """The runtime called ``name``; with ``starter``, one it accepts (``target``: the command, for the
    message)."""
    rt = _BY_NAME.get(name)
    if rt is None:
        raise UsageError(f"unknown runtime {name!r}", f"use one of: {', '.join(names(starter))}")
    if starter is not None and not starter.accepts(rt):
        raise UsageError(f"the {name} runtime cannot start the containers of `imagekit launch {target}`",
                         f"use one of: {', '.join(names(starter))}")
    return rt


def implied_by(ref: str) -> Runtime | None:
    """The runtime an image file implies when none is named (a ``.sif``: Apptainer); None for the rest
    (a squashfs goes to Enroot or Pyxis, an engine image to Docker or Pyxis)."""
    return next((rt for rt in _ALL if rt.own_suffixes and ref.endswith(rt.own_suffixes)), None)


def gpu_fixes(rt: Runtime | None, launcher_fix: str | None = None) -> str:
    """How to start the image on a host without a GPU runtime, for ``rt`` (None: every runtime).
    ``launcher_fix``: how the launcher itself sets the variable for jobs without GPUs."""
    own = rt.gpu_fix if rt is not None else None
    parts = [own] if own else [r.gpu_fix for r in _ALL if r.gpu_fix]
    if launcher_fix:
        parts.append(launcher_fix)
    elif rt is None:
        parts.append("`imagekit launch slurm|mpirun` sets it for jobs without GPUs; "
                     "Docker and Apptainer need nothing without --gpus/--nv")
    return (f"on hosts without GPUs start it with {gpu_env.VAR}={gpu_env.NO_GPU} — " + "; ".join(parts)
            + "; on GPU nodes install the NVIDIA driver and nvidia-container-cli (libnvidia-container-tools)")
