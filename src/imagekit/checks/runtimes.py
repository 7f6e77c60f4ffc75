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

import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator

from imagekit import procs
from imagekit.errors import EngineError, UsageError

RUNTIMES = ("enroot", "apptainer")
START_TIMEOUT = 120.0   # seconds for `enroot start` to show its container (unpacking is done by then)
INSTALL = {"enroot": "install Enroot (github.com/NVIDIA/enroot releases; scripts/setup-cluster.sh builds it)",
           "apptainer": "install Apptainer (apt, or scripts/setup-cluster.sh builds it)"}


def pick(path: Path, runtime: str | None) -> str:
    """The runtime for an image file: the one asked for, else Enroot for a squashfs and Apptainer
    for a SIF (Apptainer also runs a squashfs where Enroot is missing)."""
    if runtime is not None:
        if runtime not in RUNTIMES:
            raise UsageError(f"unknown runtime {runtime!r}", f"use one of: {', '.join(RUNTIMES)}")
        if runtime == "enroot" and path.suffix == ".sif":
            raise UsageError(f"Enroot cannot run a SIF ({path})", "use --runtime apptainer, or check the .sqsh")
        _need(runtime)
        return runtime
    if path.suffix != ".sif" and shutil.which("enroot"):
        return "enroot"
    if shutil.which("apptainer") or shutil.which("singularity"):
        return "apptainer"
    _need("enroot" if path.suffix != ".sif" else "apptainer")
    return ""  # pragma: no cover - _need raised


def _need(runtime: str) -> None:
    names = ("apptainer", "singularity") if runtime == "apptainer" else (runtime,)
    if not any(shutil.which(n) for n in names):
        raise EngineError(f"no {runtime} on PATH to run the image's checks under", INSTALL[runtime])


@contextlib.contextmanager
def container(path: Path, runtime: str, *, gpu: bool = False) -> Iterator[list[str]]:
    """The argv prefix that runs a command (appended) inside a container of ``path``."""
    if runtime == "enroot":
        with _enroot(path) as prefix:
            yield prefix
    else:
        binary = shutil.which("apptainer") or shutil.which("singularity") or "apptainer"
        yield [binary, "-s", "exec", "--contain", "--cleanenv", "--pwd", "/", *(["--nv"] if gpu else []),
               str(path.absolute())]


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
