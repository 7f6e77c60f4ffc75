"""Where ``imagekit check`` runs an image's checks when there is no engine: Enroot or Apptainer.

Each runtime gives the command prefix that runs one shell command inside a container of the image
file; the testinfra module runs every check's commands through it (``IMAGEKIT_BACKEND=exec``):

- Enroot (a ``.sqsh``): ``enroot create`` unpacks the file once, one ``enroot start --root``
  keeps the container up, and each command is ``enroot exec PID`` into it (the container's own
  environment, as Pyxis's ranks get it; about 0.1 s a command, against 1-2 s for a new start);
  the container is stopped and removed afterwards, also on Ctrl-C.
- Apptainer (a ``.sif`` or a ``.sqsh``): each command is ``apptainer exec --contain --cleanenv``
  of the file (the image's environment alone, none of the host's home or /tmp, as ``docker run``
  would see it). Instances would save the start-up, but need a cgroup manager that batch hosts
  often lack.
"""

from __future__ import annotations

import abc
import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from imagekit.util import procs
from imagekit.util.errors import EngineError, UsageError

START_TIMEOUT = 120.0   # seconds for `enroot start` to show its container (unpacking is done by then)


@dataclass(frozen=True)
class Runner(abc.ABC):
    """One runtime that can run an image file's checks: what it is called, what it runs, how to get it."""

    name: str
    binaries: tuple[str, ...]
    install: str
    runs_sif: bool

    def available(self) -> bool:
        return any(shutil.which(b) for b in self.binaries)

    def need(self) -> None:
        if not self.available():
            raise EngineError(f"no {self.name} on PATH to run the image's checks under", self.install)

    def refuse(self, path: Path) -> None:
        if path.suffix == ".sif" and not self.runs_sif:
            raise UsageError(f"{self.name.capitalize()} cannot run a SIF ({path})",
                             "use --runtime apptainer, or check the .sqsh")

    @abc.abstractmethod
    def container(self, path: Path, gpu: bool) -> contextlib.AbstractContextManager[list[str]]:
        """The argv prefix (entered as a context) that runs one command inside a container of ``path``."""


class Enroot(Runner):
    def container(self, path: Path, gpu: bool) -> contextlib.AbstractContextManager[list[str]]:
        return _enroot(path)


class Apptainer(Runner):
    @contextlib.contextmanager
    def container(self, path: Path, gpu: bool) -> Iterator[list[str]]:
        binary = next((shutil.which(b) for b in self.binaries if shutil.which(b)), self.binaries[0])
        yield [binary, "-s", "exec", "--contain", "--cleanenv", "--pwd", "/", *(["--nv"] if gpu else []),
               str(path.absolute())]


# In the order pick() tries them for a squashfs; a SIF goes to the first that runs one.
RUNNERS = {r.name: r for r in (
    Enroot("enroot", ("enroot",), "install Enroot (github.com/NVIDIA/enroot releases; scripts/setup-cluster.sh "
           "builds it)", runs_sif=False),
    Apptainer("apptainer", ("apptainer", "singularity"), "install Apptainer (apt, or scripts/setup-cluster.sh "
              "builds it)", runs_sif=True),
)}
RUNTIMES = tuple(RUNNERS)


def pick(path: Path, runtime: str | None) -> str:
    """The runtime for an image file: the one asked for, else Enroot for a squashfs and Apptainer
    for a SIF (Apptainer also runs a squashfs where Enroot is missing)."""
    if runtime is not None:
        if runtime not in RUNNERS:
            raise UsageError(f"unknown runtime {runtime!r}", f"use one of: {', '.join(RUNTIMES)}")
        RUNNERS[runtime].refuse(path)
        RUNNERS[runtime].need()
        return runtime
    fits = [r for r in RUNNERS.values() if r.runs_sif or path.suffix != ".sif"]
    for runner in fits:
        if runner.available():
            return runner.name
    fits[-1].need()
    return ""  # pragma: no cover - need() raised


def container(path: Path, runtime: str, *, gpu: bool = False) -> contextlib.AbstractContextManager[list[str]]:
    """The argv prefix that runs a command (appended) inside a container of ``path``."""
    return RUNNERS[runtime].container(path, gpu)


@contextlib.contextmanager
def _enroot(path: Path) -> Iterator[list[str]]:
    name = f"imagekit-check-{uuid.uuid4().hex[:12]}"
    created = subprocess.run(["enroot", "create", "--name", name, str(path.absolute())], capture_output=True,
                             text=True)
    if created.returncode != 0:
        raise EngineError(f"enroot create of {path} failed: {_last(created.stderr)}",
                          "is it an Enroot squashfs, and is ENROOT_DATA_PATH writable with room for it?")
    keeper = None
    try:
        # The container stays up for `enroot exec`; it is ours, in its own process group.
        keeper = subprocess.Popen(["enroot", "start", "--root", name, "/bin/sh", "-c", "exec sleep 86400"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        pid = _enroot_pid(name, keeper)
        yield ["enroot", "exec", str(pid)]
    finally:
        if keeper is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(keeper.pid, signal.SIGTERM)
            procs.stop(keeper)
        subprocess.run(["enroot", "remove", "--force", name], capture_output=True)


def _enroot_pid(name: str, keeper: subprocess.Popen) -> int:
    """The pid `enroot list --fancy` shows for the running container ``name``."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if keeper.poll() is not None:
            raise EngineError(f"enroot start {name} stopped (exit {keeper.returncode}): "
                              f"{_last(keeper.stderr.read() if keeper.stderr else '')}",
                              "run `enroot start` of the file by hand to see why")
        listing = subprocess.run(["enroot", "list", "--fancy"], capture_output=True, text=True).stdout
        for line in listing.splitlines()[1:]:
            words = line.split()
            if len(words) > 1 and words[0] == name and words[1].isdigit():
                return int(words[1])
        time.sleep(0.2)
    raise EngineError(f"enroot start {name} did not start within {START_TIMEOUT:.0f} s")


def _last(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"
