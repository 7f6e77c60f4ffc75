"""Schedulers: what gives a job its nodes, and what becomes of the job once it is written.

- :class:`Local`: this host (and the hosts ``mpirun`` reaches from it); imagekit runs the job itself,
  or prints (``--dry-run``) or writes (``-o DIR``) what it would run.
- :class:`Slurm`: an sbatch script, whose ``#SBATCH`` head is written here and nowhere else
  (:meth:`Slurm.preamble`); printed, written (``-o FILE``), submitted (``--submit``), or submitted and
  waited for (``--validate``).
- :class:`Kubernetes`: manifests that ``kubectl apply`` takes; printed or written (``-o FILE``).

Each is made from the options a command was given (``from_options``); the rank starter declares them.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, ClassVar

from imagekit.util import quoting
from imagekit.util.errors import ImagekitError, UsageError
from imagekit.launch.common import check_count, require_tool, write_atomic
from imagekit.launch.starters import Output

_DNS1123 = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def print_or_write(outputs: list[Output], path: Path | None, echo: Callable[[str], None],
                    log: Callable[[str], None]) -> None:
    """One output printed bare, several each under a ``# NAME`` line; with ``path``, the first written
    there and the others beside it."""
    if path is None:
        echo(outputs[0].text if len(outputs) == 1 else "\n".join(f"# {o.name}\n{o.text}" for o in outputs))
        return
    written = write_outputs(outputs, Path(path))
    log(f"imagekit: wrote {' and '.join(str(p) for p in written)}")


def write_outputs(outputs: list[Output], path: Path) -> list[Path]:
    """The first output at ``path``, the others beside it under their own names."""
    written = [write_atomic(path, outputs[0].text, outputs[0].mode)]
    written += [write_atomic(path.parent / o.name, o.text, o.mode) for o in outputs[1:]]
    return written


@dataclass(frozen=True)
class Local:
    """This host: the job runs here unless it is only printed or written (``into``: a directory)."""

    dry_run: bool = False
    into: Path | None = None
    name: ClassVar[str] = "local"

    @classmethod
    def from_options(cls, values: dict) -> "Local":
        return cls(dry_run=bool(values.get("dry_run")), into=values.get("into"))

    @property
    def runs(self) -> bool:
        return not (self.dry_run or self.into)

    @property
    def preflights(self) -> bool:
        """Preflight compares this host with the image only when the job runs here."""
        return self.runs

    reads_facts: ClassVar[bool] = True

    def deliver(self, outputs: list[Output], echo: Callable[[str], None], log: Callable[[str], None]) -> None:
        if self.dry_run:
            print_or_write(outputs, None, echo, log)
        else:
            print_or_write(outputs, Path(self.into) / outputs[0].name, echo, log)


@dataclass(frozen=True)
class Slurm:
    """An sbatch allocation: ``nodes`` nodes, ``tasks_per_node`` tasks each (None: one per GPU, else 1),
    and the usual ``#SBATCH`` options; ``segment`` asks Slurm's topology/block plugin for runs of that
    many nodes in one block (launch profile nvl72). ``dry_run``: print (or write to ``output``) rather
    than submit."""

    nodes: int
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    partition: str | None = None
    time: str | None = None
    account: str | None = None
    job_name: str = "imagekit"
    segment: int | None = None
    output: Path | None = None
    dry_run: bool = True
    name: ClassVar[str] = "slurm"

    def __post_init__(self) -> None:
        check_count("--nodes", self.nodes)
        if self.tasks_per_node is not None:
            check_count("--ntasks-per-node", self.tasks_per_node)
        if self.cpus_per_task is not None:
            check_count("--cpus-per-task", self.cpus_per_task)
        for option, value in (("job-name", self.job_name), ("partition", self.partition), ("time", self.time),
                              ("account", self.account)):
            if value is not None:
                quoting.sbatch_value(value, f"--{option}", "launch")

    @classmethod
    def from_options(cls, values: dict) -> "Slurm":
        dry_run = values["dry_run"] if "dry_run" in values else not values.get("submit", False)
        known = {k: values[k] for k in ("tasks_per_node", "cpus_per_task", "account", "segment")
                 if values.get(k) is not None}
        return cls(nodes=values["nodes"], partition=values.get("partition"), time=values.get("time"),
                   job_name=values.get("job_name") or cls.job_name, output=values.get("output"),
                   dry_run=dry_run, **known)

    @property
    def runs(self) -> bool:
        return False

    @property
    def preflights(self) -> bool:
        return True      # a login node: what it lacks is a warning, Slurm's own plugin is checked on --submit

    reads_facts: ClassVar[bool] = True

    def beside(self, name: str) -> Path:
        """Where a file written beside the script is found: its absolute path (the script's own directory,
        or this one when it is printed)."""
        return (Path(self.output).parent if self.output else Path.cwd()).resolve() / name

    def tasks(self, gpus: int) -> int:
        """Tasks per node: as asked, else one per GPU (``gpus`` per node), else one."""
        return self.tasks_per_node or (gpus if gpus > 0 else 1)

    def sbatch_options(self, gpus: int) -> dict[str, str]:
        """The ``#SBATCH --OPTION=VALUE`` lines, in order (values are checked to be one token)."""
        opts = {"job-name": self.job_name, "nodes": str(self.nodes), "ntasks-per-node": str(self.tasks(gpus))}
        if gpus > 0:
            opts["gpus-per-node"] = str(gpus)
        if self.cpus_per_task:
            opts["cpus-per-task"] = str(self.cpus_per_task)
        if self.segment:
            # topology/block: every `segment` nodes from one block (the site's block is one NVLink domain),
            # and the job's one srun step spans them. An sbatch that predates the option refuses it.
            opts["segment"] = str(self.segment)
        for option, value in (("partition", self.partition), ("time", self.time), ("account", self.account)):
            if value:
                opts[option] = value
        return opts

    def preamble(self, gpus: int) -> list[str]:
        """The script's first lines: the shebang and one ``#SBATCH`` line per option."""
        return ["#!/bin/bash"] + [f"#SBATCH --{option}={value}" for option, value in self.sbatch_options(gpus).items()]

    def deliver(self, outputs: list[Output], echo: Callable[[str], None], log: Callable[[str], None]) -> Path | None:
        """Print or write the script (dry run); else write it and return its path, to be submitted."""
        if self.dry_run:
            print_or_write(outputs, self.output, echo, log)
            return None
        path = Path(self.output) if self.output else Path(outputs[0].name)
        write_outputs(outputs, path)
        return path


def submit(script: Path, *, extra: list[str] = ()) -> str:
    """``sbatch --parsable SCRIPT``; returns the Slurm job id."""
    sbatch = require_tool("sbatch", "run on a Slurm login node, or write the script with --dry-run / -o and "
                                    "copy it there")
    proc = subprocess.run([sbatch, "--parsable", *extra, str(script)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        msg = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        raise ImagekitError(f"sbatch refused {script}: {msg}", "check the partition/time/GPU options with `sinfo`")
    return proc.stdout.strip().split(";")[0]


def submit_and_wait(script: Path, output: Path) -> tuple[str, int, str]:
    """``sbatch --wait`` with the job's output in ``output``: (job id, the job's exit code, its output)."""
    sbatch = require_tool("sbatch", "run on a Slurm login node, or write the script with --dry-run / -o and "
                                    "copy it there")
    proc = subprocess.run([sbatch, "--parsable", "--wait", f"--output={output}", str(script)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job_id = proc.stdout.strip().split(";")[0]
    if not job_id:
        msg = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        raise ImagekitError(f"sbatch refused {script}: {msg}", "check the partition/time/GPU options with `sinfo`")
    text = output.read_text(errors="replace") if output.exists() else ""
    return job_id, proc.returncode, text


@dataclass
class SlurmRun:
    """A written sbatch script as a :class:`~imagekit.launch.launcher.Launcher`: submitted, waited for,
    and its job's output file handed to ``stdout`` at the end (the job runs on the compute nodes)."""

    script: Path
    output: Path
    log: Callable[[str], None]

    def run(self, stdout: IO[str] | None) -> int:
        job_id, rc, text = submit_and_wait(self.script, self.output)
        self.log(f"imagekit: Slurm job {job_id} ended (exit {rc})")
        if stdout is not None:
            stdout.write(text)
            stdout.flush()
        return rc


@dataclass(frozen=True)
class Kubernetes:
    """A Kubernetes cluster: the manifests' ``name`` (a DNS-1123 label) and ``namespace``, printed or
    written to ``output``."""

    name: str = "imagekit"
    namespace: str | None = None
    output: Path | None = None

    def __post_init__(self) -> None:
        for what, value in (("name", self.name), ("--namespace", self.namespace)):
            if value is not None and (not re.match(_DNS1123, value) or len(value) > 63):
                raise UsageError(f"{what} {value!r} is not a DNS-1123 label",
                                 "use lower-case letters, digits and '-', at most 63 characters")

    @classmethod
    def from_options(cls, values: dict) -> "Kubernetes":
        return cls(name=values.get("name") or cls.name, namespace=values.get("namespace"),
                   output=values.get("output"))

    @property
    def runs(self) -> bool:
        return False

    @property
    def preflights(self) -> bool:
        return False     # the pods start on the cluster's nodes: nothing of this host matters

    # The image's facts say which MPI it has, and so the words its launcher pod needs.
    reads_facts: ClassVar[bool] = True

    def metadata(self, name: str | None = None) -> dict:
        """A manifest's ``metadata``: its name, imagekit's label and the namespace."""
        meta: dict = {"name": name or self.name, "labels": {"app.kubernetes.io/managed-by": "imagekit"}}
        if self.namespace:
            meta["namespace"] = self.namespace
        return meta

    def deliver(self, outputs: list[Output], echo: Callable[[str], None], log: Callable[[str], None]) -> None:
        print_or_write(outputs, self.output, echo, log)
