"""A SkyPilot task (0.13/0.14 YAML): ``num_nodes`` nodes of the image, ``mpirun`` from the first.

SkyPilot provisions the nodes (clouds, Kubernetes, Slurm), starts the image on each
(``resources.image_id: docker:REF``), gives every node the others' addresses
(``SKYPILOT_NODE_IPS``, one a line, and ``SKYPILOT_NODE_RANK``) and ssh between them. So the task's
``run`` writes a hostfile of those addresses with the job's slots, names it (and the ssh options) in the
image's own MPI's words (:mod:`imagekit.launch.mpi`), and starts ``mpirun`` on node 0; the other nodes'
``run`` ends at once and they serve the ranks. The pattern is SkyPilot's own MPI example.

What SkyPilot has no field for is refused, naming the field: bind mounts of a node's paths
(``file_mounts`` uploads files or mounts buckets), and a GPU count without the GPU's name
(``resources.accelerators`` is ``NAME:COUNT``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar

import yaml

from imagekit.util import quoting
from imagekit.util.errors import UsageError
from imagekit.launch.common import MPIRUN, check_count, check_token
from imagekit.launch.mpi import SSH_ARGS
from imagekit.launch.opts import FILE, opt
from imagekit.launch.schedulers import print_or_write
from imagekit.launch.starters import Job, LauncherNeeds, Output, Starter

# The hostfile node 0 writes: in the container user's home, not a name anyone may take first in /tmp.
HOSTFILE = '"$HOME/.imagekit-hostfile"'
_NAME = re.compile(r"^[a-zA-Z]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?$")


@dataclass(frozen=True)
class SkyPilot:
    """SkyPilot's scheduler: the task's ``name``, printed or written to ``output``."""

    name: str = "imagekit"
    output: Path | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or len(self.name) > 63:
            raise UsageError(f"skypilot: name {self.name!r} is not a SkyPilot task name",
                             "letters, digits, '-', '_' and '.', starting with a letter")

    @classmethod
    def from_options(cls, values: dict) -> "SkyPilot":
        return cls(name=values.get("name") or cls.name, output=values.get("output"))

    runs = False
    preflights = False
    reads_facts = True

    def deliver(self, outputs: list[Output], echo: Callable[[str], None], log: Callable[[str], None]) -> None:
        print_or_write(outputs, self.output, echo, log)


@dataclass(frozen=True)
class NodeZeroMpirun(Starter):
    """``mpirun`` on SkyPilot's node 0 starts ``procs_per_node`` ranks (None: one per GPU, else 1) on each of
    ``nodes`` nodes; ``accelerator``: the GPU's name, for ``resources.accelerators``."""

    nodes: int
    procs_per_node: int | None = None
    accelerator: str | None = None
    cpus: str | None = None
    memory: str | None = None
    needs: ClassVar = LauncherNeeds(here=False)
    options: ClassVar = (
        opt("--name", default="imagekit", show_default=True, help="The task's name."),
        opt("--nodes", type=int, required=True, help="Nodes (num_nodes)."),
        opt("--gpus-per-node", dest="gpus", type=int, default=0, show_default=True),
        opt("--accelerator", metavar="NAME", help="The GPU's name for resources.accelerators, e.g. H100."),
        opt("--procs-per-node", type=int, help="Ranks per node (default: GPUs per node, or 1)."),
        opt("--cpus", help="resources.cpus, e.g. 16 or 16+."),
        opt("--memory", help="resources.memory in GB, e.g. 64 or 64+."),
        opt("--output", "-o", path=FILE, help="Write the task YAML here (default: stdout)."),
    )

    def __post_init__(self) -> None:
        check_count("--nodes", self.nodes)
        if self.procs_per_node is not None:
            check_count("--procs-per-node", self.procs_per_node)
        if self.accelerator is not None:
            check_token("--accelerator", self.accelerator)
        for what, value in (("--cpus", self.cpus), ("--memory", self.memory)):
            if value is not None and not re.fullmatch(r"\d+(\.\d+)?\+?", value):
                raise UsageError(f"skypilot: resources.{what[2:]}: {value!r} is not a count", "e.g. 16 or 16+")

    @classmethod
    def from_options(cls, values: dict) -> "NodeZeroMpirun":
        keys = ("procs_per_node", "accelerator", "cpus", "memory")
        return cls(nodes=values["nodes"], **{k: values[k] for k in keys if values.get(k) is not None})

    def gpus(self, values: dict) -> int:
        return check_count("--gpus-per-node", values.get("gpus") or 0, 0)

    def check(self, job: Job) -> None:
        w = job.workload
        if w.mounts:
            raise UsageError(f"skypilot: file_mounts: a bind mount of the nodes' {w.mounts[0].src} has no SkyPilot "
                             "field (file_mounts uploads files or mounts buckets)",
                             "drop --mounts, or add file_mounts to the task yourself")
        if w.gpus > 0 and not self.accelerator:
            raise UsageError(f"skypilot: resources.accelerators: {w.gpus} GPUs per node need the GPU's name "
                             "(accelerators is NAME:COUNT)", "add --accelerator H100 (or the nodes' GPU)")

    def slots(self, gpus: int) -> int:
        return self.procs_per_node or (gpus if gpus > 0 else 1)

    def files(self, job: Job) -> list[Output]:
        return [Output(f"{job.scheduler.name}.yaml", yaml.safe_dump(task(job), sort_keys=False,
                                                                      default_flow_style=False), 0o644)]


def run_script(job: Job) -> str:
    """The task's ``run``: on node 0, a hostfile of every node with its slots, then mpirun."""
    w, starter = job.workload, job.starter
    slots = starter.slots(w.gpus)
    q = quoting.sh_arg
    exports = [f"export {k}={v if v == HOSTFILE else q(v)}"
               for k, v in w.mpi.env(hostfile=HOSTFILE, ssh_args=SSH_ARGS).items()]
    argv = [MPIRUN, "-np", str(starter.nodes * slots), "--allow-run-as-root"] + \
        [a for k in w.container_env for a in ("-x", k)] + list(w.command)
    return "\n".join([
        "set -eu",
        "# SkyPilot runs this on every node; node 0 starts the ranks of all of them.",
        'if [ "${SKYPILOT_NODE_RANK}" != 0 ]; then exit 0; fi',
        "# shellcheck disable=SC2086 # one address a line: the shell splits them into printf's arguments",
        f'printf \'%s slots={slots}\\n\' $SKYPILOT_NODE_IPS > {HOSTFILE}',
        "# The hostfile and ssh options in the image's own MPI's words (ORTE, PRRTE, or both).",
        *exports,
        " ".join(q(a) for a in argv),
    ]) + "\n"


def task(job: Job) -> dict:
    """The task as a plain dict."""
    w, starter, sky = job.workload, job.starter, job.scheduler
    resources: dict = {"image_id": f"docker:{w.image}"}
    if w.gpus > 0:
        resources["accelerators"] = f"{starter.accelerator}:{w.gpus}"
    if starter.cpus:
        resources["cpus"] = starter.cpus
    if starter.memory:
        resources["memory"] = starter.memory
    out: dict = {"name": sky.name, "num_nodes": starter.nodes, "resources": resources}
    if w.container_env:
        out["envs"] = dict(w.container_env)
    out["run"] = run_script(job)
    return out
