"""Node-local copies of a store entry, staged by Slurm's ``sbcast``: one read of the shared file system
per job, whatever its node count.

``imagekit launch slurm --stage sbcast`` writes a job whose first step is ``imagekit-pyxis-importer
stage --mode sbcast URI`` on the job's first node (:func:`broadcast`):

1. the image's store entry is found (or converted, once) on the shared file system;
2. every node prepares its stage directory (``srun`` of ``stage-prepare``, :func:`prepare`): a
   directory of the user's own under ``IMAGEKIT_STAGE_DIR`` (node-local disk), room for the copy
   (older copies of this user evicted, least recently used first), and whether a verified copy is
   there already (then nothing is sent);
3. ``sbcast`` sends the entry from that one node to all of them through slurmd's tree (TreeWidth),
   into ``<sha256>.part-<job>``: the one read of the entry from the shared file system;

then every container step's importer serves the node-local copy (:func:`local_copy`): a part is
hashed against the sha256 its publisher recorded, renamed to ``<sha256>.sqsh`` and sealed (inode,
size and mtime in ``<sha256>.seal``, as :mod:`imagekit.export.store.verify` seals entries); a copy
whose seal no longer matches is hashed again; one whose bytes differ is removed and never served.
Seals live beside the copies, in the node's own directory: a stamp in a home directory shared by
all nodes would be keyed by device and inode numbers, which two nodes' local disks can share.

Who is trusted: the copy is the user's own (sbcast writes it as the job's user, in a directory only
the user may enter); it is checked against the digest the store's publisher recorded, so it can only
ever be the bytes the shared store holds. Nothing here writes the shared store.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from imagekit.util import digests, private_names
from imagekit.util.errors import ImagekitError, IntegrityError, NoSpaceError, UsageError

PART = ".part-"
SUFFIX = ".sqsh"
SEAL = ".seal"
PART_STALE = 3600.0       # another job's part untouched this long was left by a killed transfer
_HEX64 = re.compile(r"[0-9a-f]{64}")


class StageError(ImagekitError):
    """Staging failed on a node; the message names the node."""


def host() -> str:
    return socket.gethostname().split(".")[0] or "this node"


def check_sha(sha256: str) -> str:
    sha = sha256.removeprefix("sha256:")
    if not _HEX64.fullmatch(sha):
        raise UsageError(f"{sha256!r} is not a sha256 (64 lowercase hex digits)")
    return sha


def user_dir(base: Path, *, create: bool) -> Path:
    """``base/imagekit-stage-<uid>``, else ``…-<uid>-<token>`` (:mod:`imagekit.util.private_names`: a name
    another user cannot take first): the first that is a real directory, this user's, that nobody else
    may write or enter. ``base`` is the node-local directory the site chose (IMAGEKIT_STAGE_DIR)."""
    uid = os.geteuid()
    candidates: list[Path] = []
    taken = []
    for path in private_names.names(Path(base), f"imagekit-stage-{uid}"):
        candidates.append(path)
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StageError(f"{host()}: cannot use the stage directory {path}: {exc.strerror}") from None
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o077:
            return path
        taken.append(f"{path} (mode {stat.S_IMODE(st.st_mode):04o}, owner {st.st_uid})")
    if not taken:
        raise StageError(f"{host()}: no stage directory {candidates[0]} (the job's stage step did not run here)",
                         "run the job's first step, imagekit-pyxis-importer stage, on all its nodes")
    raise StageError(f"{host()}: no stage directory of uid {uid} closed to others: {', '.join(taken)}",
                     "the names are another user's: an admin removes them, or give --stage-dir a directory of "
                     "your own" + ("" if len(candidates) > 1 else "; with a home of your own ($HOME), "
                                   "imagekit also tries a name nobody else can guess"))


def _seal_of(st: os.stat_result) -> dict[str, int]:
    return {"ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _sealed(copy: Path) -> bool:
    """Is ``copy`` the file, unchanged, that was hashed and sealed on this node?"""
    try:
        st = os.lstat(copy)
        seal = json.loads(copy.with_suffix(SEAL).read_bytes()[:4096])
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(st.st_mode) and seal == _seal_of(st)


def _write_seal(copy: Path) -> None:
    seal = copy.with_suffix(SEAL)
    tmp = seal.with_name(f".{seal.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, json.dumps(_seal_of(os.lstat(copy))).encode())
    finally:
        os.close(fd)
    os.replace(tmp, seal)


@contextlib.contextmanager
def _locked(directory: Path):
    """One verifier per node and user at a time (two steps of one job may start together)."""
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    """A copy and its seal, or a part (which has none)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    if path.name.endswith(SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path.with_suffix(SEAL))


def _copies(directory: Path) -> list[Path]:
    return [directory / n for n in os.listdir(directory) if n.endswith(SUFFIX) and not n.startswith(".")]


# --- on every node, before the transfer -------------------------------------------------------------

def prepare(base: Path, sha256: str, size: int, job: str) -> str:
    """Get this node ready for the copy of ``sha256`` (``size`` bytes): "have" when a sealed copy is
    here (nothing to send), else "need", with room made for it. NoSpaceError names the node."""
    sha = check_sha(sha256)
    directory = user_dir(base, create=True)
    with _locked(directory):
        _sweep_parts(directory, job)
        if _sealed(directory / f"{sha}{SUFFIX}"):
            os.utime(directory / f"{sha}{SUFFIX}")     # most recently used: the last to be evicted
            return "have"
        _make_room(directory, size, keep=sha)
    return "need"


def _sweep_parts(directory: Path, job: str) -> None:
    """Parts of transfers that were cut off (a killed job, a node that died mid-sbcast)."""
    for name in os.listdir(directory):
        if PART not in name or name.endswith(f"{PART}{job}"):
            continue
        path = directory / name
        with contextlib.suppress(OSError):
            if time.time() - os.lstat(path).st_mtime > PART_STALE:
                os.unlink(path)


def _free(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def margin(size: int) -> int:
    """Room kept free beside a copy: the file system's own blocks, and whatever else the node writes."""
    return (size >> 6) + (1 << 20)


def _make_room(directory: Path, size: int, keep: str) -> None:
    want = size + margin(size)
    old = sorted((p for p in _copies(directory) if not p.name.startswith(keep)),
                 key=lambda p: os.lstat(p).st_mtime)
    while _free(directory) < want and old:
        _remove(old.pop(0))
    free = _free(directory)
    if free < want:
        raise NoSpaceError(f"{host()}: not enough space in {directory} for the staged image: "
                           f"{size} bytes needed (+ {margin(size)} to spare), {free} free",
                           "free node-local space, or point IMAGEKIT_STAGE_DIR at a larger local disk; "
                           "or use --stage shared, which copies nothing")


# --- on every node, when the container starts -------------------------------------------------------

def local_copy(base: Path, sha256: str, job: str, *, log: Callable[[str], None] = lambda m: None) -> Path:
    """The verified node-local copy of ``sha256`` (see the module docstring). StageError when there is
    none, IntegrityError when the bytes here are not the recorded ones (the copy is removed)."""
    sha = check_sha(sha256)
    directory = user_dir(base, create=False)
    final, part = directory / f"{sha}{SUFFIX}", directory / f"{sha}{PART}{job}"
    with _locked(directory):
        if _sealed(final):
            _remove(part)               # sent again to a node that had it: not needed
            return final
        for candidate in (part, final):
            if os.path.lexists(candidate):
                _check(candidate, sha, log)
                if candidate != final:
                    os.replace(candidate, final)
                _write_seal(final)
                return final
    raise StageError(f"{host()}: no staged copy of sha256:{sha} in {directory}",
                     "the job's stage step (sbcast) did not reach this node: see its output")


def _check(path: Path, sha: str, log: Callable[[str], None]) -> None:
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        _remove(path)
        raise StageError(f"{host()}: {path} is not a regular file; removed")
    log(f"verifying the staged copy {path}")
    got = digests.sha256_file(path, nofollow=True)
    if got != sha:
        _remove(path)
        raise IntegrityError(f"{host()}: the staged copy {path} has sha256:{got}, but the store entry it "
                             f"was copied from has sha256:{sha}; removed, not served",
                             "stage it again (resubmit the job); if it recurs, check this node's local disk")


# --- on the job's first node: the whole stage step ---------------------------------------------------

@dataclass
class Broadcast:
    """What :func:`broadcast` did: per node "have" or "need", and whether sbcast ran."""

    nodes: dict[str, str]
    sent: bool
    seconds_prepare: float = 0.0
    seconds_sbcast: float = 0.0


@dataclass(frozen=True)
class StageJob:
    """The Slurm job a broadcast stages for: its ID and node count, the node-local ``base`` directory,
    the importer's path on the nodes, and the environment srun and sbcast run with (None: this one)."""

    job: str
    nodes: int
    base: Path
    importer: str
    env: dict[str, str] | None = None


def broadcast(source: Path, sha256: str, size: int, job: StageJob,
              log: Callable[[str], None] = lambda m: None) -> Broadcast:
    """Prepare every node of ``job`` (one ``srun`` step), then ``sbcast`` ``source`` to those that lack it.
    StageError carries what the failing node or sbcast said."""
    import subprocess   # here: a node's get (local_copy) starts nothing and need not load it
    sha = check_sha(sha256)
    base, importer, nodes, env = job.base, job.importer, job.nodes, job.env
    started = time.monotonic()
    proc = subprocess.run(["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
                           "--kill-on-bad-exit=1", importer, "stage-prepare", sha, str(size)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if proc.returncode != 0:
        raise StageError(f"preparing the nodes' stage directories failed: {_nodes_first(proc.stderr or proc.stdout)}",
                         "the line naming a node says why")
    states = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] in ("have", "need"):
            states[parts[0]] = parts[1]
    result = Broadcast(states, sent=False, seconds_prepare=time.monotonic() - started)
    if states and all(s == "have" for s in states.values()):
        log(f"every node ({len(states)}) has a verified copy of sha256:{sha[:12]}: nothing sent")
        return result
    # This node's choice, which every node makes alike unless another user took a name on some of
    # them only (then sbcast fails, naming the node).
    dest = user_dir(Path(base), create=False) / f"{sha}{PART}{job.job}"
    log(f"sbcast {source} ({size} bytes) to {dest} on {nodes} node(s)")
    started = time.monotonic()
    proc = subprocess.run(["sbcast", "--force", str(source), str(dest)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env)
    result.seconds_sbcast = time.monotonic() - started
    if proc.returncode != 0:
        raise StageError(f"sbcast of {source} failed: {_tail(proc.stderr or proc.stdout)}",
                         "the node named above did not get the copy; its partial file is never served")
    result.sent = True
    return result


def _nodes_first(text: str) -> str:
    """The failing nodes' own lines before Slurm's: with ``--kill-on-bad-exit`` one node's error is
    followed by a "Terminated" line per node that was cut off, which would push it out of a plain tail."""
    lines = text.strip().splitlines()
    slurm = [line for line in lines if line.lstrip().startswith(("srun:", "slurmstepd"))]
    nodes = [line for line in lines if line not in slurm]
    parts = ([_tail("\n".join(nodes))] if nodes else []) + ([_tail("\n".join(slurm), 2)] if slurm else [])
    return " | ".join(parts) or "(no output)"


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:]) or "(no output)"
