"""An image's root filesystem → filter → squashfs tool, as one pipeline with no unpacked copy.

The source flattens the image (the engine: a throwaway container + ``docker export``; a registry
or an OCI layout: its layers merged, :mod:`imagekit.export.image_source`), the tar
filter in :mod:`imagekit.export.tarstream` edits the stream on the way, and
``sqfstar`` or ``mksquashfs -tar`` (squashfs-tools >= 4.5) or ``tar2sqfs``
(squashfs-tools-ng) builds the image from stdin. Nothing of the root filesystem
ever lands on disk. :data:`PRESETS` are the compression choices, picked from
the measurements of bench/compression.py (docs/export.md).
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from imagekit.util.errors import ImagekitError, UsageError
from imagekit.util.procs import log_tail, stop, widen_pipe
from imagekit.export import tarstream
# The presets are data of their own (imagekit.export.presets); their names are this module's too.
from imagekit.export.presets import (DEFAULT_PRESET, DEFAULT_STORE_PRESET, KIB, MIB, PRESETS, TOOLS,  # noqa: F401
                                     Preset, preset, source_date_epoch)

if TYPE_CHECKING:
    from imagekit.export.image_source import Source

INSTALL_HINT = "apt-get install squashfs-tools (>= 4.5) or squashfs-tools-ng (tar2sqfs)"

# How far mksquashfs/sqfstar may read ahead of what they have compressed. Their default is a quarter of
# the machine's memory (6 GiB here), which takes a whole image in while the compressors are a minute or
# more behind: the stream's bytes then say nothing of the work left, and the progress line said "about
# 0 s left" for 2-3 minutes of gzip (review 4). Bounded, the stream moves at the compressors' pace, so
# the bytes still to stream are the bytes still to process (imagekit.util.eta), and the tools hold less
# memory on a shared login node. bench/progress_record.py measures both.
READ_AHEAD = 128 * MIB


def processors() -> int:
    """CPUs this process may run on (a Slurm job's cgroup, not the whole node)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cache_mem(block: int, jobs: int) -> int:
    """Bytes of cache for mksquashfs's ``-mem``. Its default is a quarter of the machine's memory,
    touched afresh as the stream goes by: on 24 GiB that is 0.7 GB of page faults per 771 MB image,
    twice the system CPU and a third more wall time than a cache it reuses. A few dozen blocks per
    thread keep every thread busy; the bytes written are the same whatever the size. At least
    :data:`READ_AHEAD`, which also bounds how far the tool reads ahead of its compressors."""
    return max(READ_AHEAD, 32 * block * jobs)


@functools.lru_cache(maxsize=None)
def _reads_tar(path: str) -> bool:
    """Whether this mksquashfs has -tar (squashfs-tools >= 4.5). An ``sqfstar`` beside it that is the
    same program says so without a run (4.5 brought both, and installs sqfstar as a link to it);
    else ``mksquashfs -help`` is asked."""
    sibling = Path(path).with_name("sqfstar")
    try:
        if sibling.exists() and sibling.resolve() == Path(path).resolve():
            return True
    except OSError:
        pass
    try:
        proc = subprocess.run([path, "-help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "\n-tar" in proc.stdout + proc.stderr


@dataclass
class SquashSpec:
    """How to turn the stream into squashfs."""

    preset: str | Preset = "enroot"
    extra_args: tuple[str, ...] = ()
    tool: str = "auto"
    all_root: bool = True
    xattrs: bool = False
    epoch: int | None = None          # SOURCE_DATE_EPOCH: the filesystem's time and every file's
    mkfs_time: int | None = None      # without it, the filesystem's own time (image_time): same bytes each export
    offset: int = 0                   # bytes before the squashfs (SIF writes in place)

    def resolved(self) -> Preset:
        return self.preset if isinstance(self.preset, Preset) else preset(self.preset)


def pick_tool(tool: str = "auto", preset_: str | Preset | None = None) -> tuple[str, str]:
    """(name, path) of the squashfs tool to use for ``preset_``.

    sqfstar first when it can express the preset (its output equals `mksquashfs -tar`'s),
    then `mksquashfs -tar`, then tar2sqfs.
    """
    if tool not in ("auto", *TOOLS):
        raise UsageError(f"unknown squashfs tool {tool!r}", f"use one of: auto, {', '.join(TOOLS)}")
    chosen = PRESETS.get(preset_, None) if isinstance(preset_, str) else preset_
    if tool != "auto":
        path = shutil.which(tool)
        if path is None:
            raise ImagekitError(f"no squashfs tool found ({tool})", INSTALL_HINT)
        if tool == "mksquashfs" and not _reads_tar(path):
            raise ImagekitError(f"{path} cannot read a tar stream (-tar needs squashfs-tools >= 4.5)",
                                INSTALL_HINT)
        if tool == "sqfstar" and chosen is not None and chosen.compressor_options:
            raise UsageError(f"sqfstar cannot take the compressor options of this preset "
                             f"({chosen.label()}): it misreads -X options",
                             "use --tool mksquashfs (the same squashfs-tools), or auto")
        return tool, path
    for name in TOOLS:
        if name == "sqfstar" and chosen is not None and chosen.compressor_options:
            continue
        path = shutil.which(name)
        if path is None or (name == "mksquashfs" and not _reads_tar(path)):
            continue
        if name == "tar2sqfs" and chosen is not None and chosen.compressor == "none":
            continue
        return name, path
    raise ImagekitError("no squashfs tool that reads a tar stream was found "
                        "(sqfstar, mksquashfs -tar or tar2sqfs)", INSTALL_HINT)


def tool_command(name: str, path: str, spec: SquashSpec, out: Path) -> list[str]:
    chosen = spec.resolved()
    if name in ("sqfstar", "mksquashfs"):
        head = [path] if name == "sqfstar" else [path, "-", str(out), "-tar", "-noappend"]
        jobs = processors()
        cmd = [*head, *chosen.mksquashfs_args(), "-processors", str(jobs),
               "-mem", f"{cache_mem(chosen.block, jobs) // MIB}M",
               "-quiet", "-no-progress", "-exit-on-error", "-root-mode", "0755"]
        if name == "sqfstar":
            cmd.append("-force")
        if spec.all_root:
            cmd.append("-all-root")
        if not spec.xattrs:
            cmd.append("-no-xattrs")
        if spec.epoch is not None:
            cmd += ["-mkfs-time", str(spec.epoch), "-all-time", str(spec.epoch)]
        elif spec.mkfs_time is not None:
            # -root-time applies to tar input from squashfs-tools 4.6 on; 4.5 stamps the root directory
            # with the time of the export (docs/export.md, "Same bytes").
            cmd += ["-mkfs-time", str(spec.mkfs_time), "-root-time", str(spec.mkfs_time)]
        if spec.offset:
            cmd += ["-offset", str(spec.offset)]
        cmd += list(spec.extra_args)
        return cmd + [str(out)] if name == "sqfstar" else cmd
    if spec.offset:
        raise UsageError("tar2sqfs cannot write at an offset", "internal: write to a file first")
    cmd = [path, *chosen.tar2sqfs_args(), "--num-jobs", str(processors()), "--force", "--quiet"]
    if not spec.xattrs:
        cmd.append("--no-xattr")
    if spec.epoch is not None:
        cmd += ["--no-keep-time", "--defaults", f"mtime={spec.epoch}"]
    elif spec.mkfs_time is not None:
        cmd += ["--defaults", f"mtime={spec.mkfs_time}"]     # the root directory's time; files keep theirs
    return cmd + list(spec.extra_args) + [str(out)]


def stream_to_squashfs(source: "Source", out: Path, spec: SquashSpec, rewrite: tarstream.Rewrite, *,
                       on_bytes: Callable[[int], None] | None = None,
                       on_end: Callable[[], None] | None = None) -> str:
    """Run the pipeline into ``out``: the source's root filesystem stream → filter (``rewrite``) →
    squashfs tool; returns the tool name used. ``on_end()`` when the whole stream is in the tool and it
    is finishing. Cleans up on any exit."""
    keep, adjust, extra = rewrite.keep, rewrite.adjust, rewrite.extra
    name, path = pick_tool(spec.tool, spec.resolved())
    cmd = tool_command(name, path, spec, out)
    if name == "tar2sqfs" and spec.all_root:
        inner = adjust

        def adjust(member: tarstream.Member) -> None:  # tar2sqfs has no -all-root
            if inner is not None:
                inner(member)
            member.uid = member.gid = 0

    squasher = None
    with source.rootfs() as rootfs, \
            tempfile.NamedTemporaryFile(prefix="imagekit-squash-", suffix=".err") as sq_err:
        try:
            # sqfstar refuses SOURCE_DATE_EPOCH next to explicit times; the times are explicit.
            tool_env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
            # One large buffer batches the small members into few writes (a flush comes before each
            # spliced member); a large pipe lets each side run longer before the other must.
            squasher = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        stderr=sq_err, env=tool_env, bufsize=tarstream.CHUNK)
            widen_pipe(squasher.stdin.fileno())
            try:
                tarstream.filter_tar(rootfs.file, squasher.stdin, keep=keep, adjust=adjust, extra=extra,
                                     on_bytes=on_bytes)
                squasher.stdin.close()
                if on_end is not None:
                    on_end()
            except BrokenPipeError:
                squasher.wait()
                raise ImagekitError(f"{name} stopped reading the stream (exit {squasher.returncode}): "
                                    f"{log_tail(sq_err.name)}",
                                    "check the --squash-opt values and the free space") from None
            except tarstream.TarFormatError as exc:
                raise rootfs.failed(exc) from None
            rc_sq = squasher.wait()
            rootfs.finish()
            if rc_sq != 0:
                raise ImagekitError(f"{name} failed (exit {rc_sq}): {log_tail(sq_err.name)}",
                                    "check the squashfs options (--squash-opt) and free space")
            return name
        finally:
            if squasher is not None:
                stop(squasher, grace=0)
                for stream in (squasher.stdin, squasher.stdout):
                    if stream is not None:
                        try:
                            stream.close()
                        except (BrokenPipeError, OSError):
                            pass


def image_time(info: dict, env: dict[str, str] | None = None) -> int | None:
    """The time an export writes where a time is needed (the squashfs superblock, the files imagekit adds,
    a SIF's header): SOURCE_DATE_EPOCH, else the image's own creation time, so that two exports of one
    image with one preset are the same bytes (review 4 saw two sha256s); None when neither is known."""
    epoch = source_date_epoch(env)
    if epoch is not None:
        return epoch
    created = str(info.get("Created") or "")
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)?$", created)
    if m is None:
        return None
    stamp = dt.datetime.fromisoformat(m.group(1) + ("+00:00" if m.group(2) in (None, "Z") else m.group(2)))
    seconds = int(stamp.timestamp())
    return seconds if 0 <= seconds < 2 ** 32 else None

