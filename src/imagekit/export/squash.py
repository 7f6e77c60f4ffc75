"""docker export → filter → squashfs tool, as one pipeline with no unpacked copy.

The engine flattens the image (a throwaway container + ``docker export``), the tar
filter in :mod:`imagekit.export.tarstream` edits the stream on the way, and
``sqfstar`` (squashfs-tools >= 4.5) or ``tar2sqfs`` (squashfs-tools-ng) builds
the image from stdin. Nothing of the root filesystem ever lands on disk.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from imagekit.errors import EngineError, ImagekitError, UsageError
from imagekit.procs import stop
from imagekit.export import tarstream

# Compression presets, as options for each tool. sqfstar takes mksquashfs options.
SQFSTAR_PRESETS: dict[str, list[str]] = {
    # Enroot's default ENROOT_SQUASH_OPTIONS: lzo metadata, data left uncompressed.
    "enroot": ["-comp", "lzo", "-noD"],
    # Many nodes start the same image from Lustre/GPFS: 1 MiB blocks match the
    # file system's stripe size and cut metadata round trips; zstd decompresses
    # fast while keeping the file small. sqfstar 4.5.1 rejects every -X
    # compressor option (a parsing bug), so it gets zstd's default level and
    # "auto" prefers tar2sqfs, which takes level 3, for this preset.
    "shared-fs": ["-comp", "zstd", "-b", "1M"],
    "none": ["-noI", "-noD", "-noF", "-noX"],
    "gzip": ["-comp", "gzip"],                      # Apptainer's SIF default
    "zstd": ["-comp", "zstd"],
}
TAR2SQFS_PRESETS: dict[str, list[str]] = {
    # tar2sqfs cannot leave data uncompressed; lzo is the closest to Enroot's default.
    "enroot": ["-c", "lzo"],
    "shared-fs": ["-c", "zstd", "-X", "level=3", "-b", "1048576"],
    "gzip": ["-c", "gzip"],
    "zstd": ["-c", "zstd", "-X", "level=3"],
}
TOOLS = ("sqfstar", "tar2sqfs")
PREFER_TAR2SQFS = frozenset({"shared-fs"})   # presets that need a compression level
INSTALL_HINT = "apt-get install squashfs-tools (sqfstar) or squashfs-tools-ng (tar2sqfs)"


@dataclass
class SquashSpec:
    """How to turn the stream into squashfs."""

    preset: str = "enroot"
    extra_args: tuple[str, ...] = ()
    tool: str = "auto"
    all_root: bool = True
    xattrs: bool = False
    epoch: int | None = None          # SOURCE_DATE_EPOCH
    offset: int = 0                   # bytes before the squashfs (SIF writes in place)


def pick_tool(tool: str = "auto", preset: str | None = None) -> tuple[str, str]:
    """(name, path) of the squashfs tool to use."""
    if tool not in ("auto", *TOOLS):
        raise UsageError(f"unknown squashfs tool {tool!r}", f"use one of: auto, {', '.join(TOOLS)}")
    order = TOOLS[::-1] if preset in PREFER_TAR2SQFS else TOOLS
    for name in (order if tool == "auto" else (tool,)):
        path = shutil.which(name)
        if path:
            return name, path
    raise ImagekitError(f"no squashfs tool found ({'sqfstar or tar2sqfs' if tool == 'auto' else tool})",
                        INSTALL_HINT)


def tool_command(name: str, path: str, spec: SquashSpec, out: Path) -> list[str]:
    if name == "sqfstar":
        if spec.preset not in SQFSTAR_PRESETS:
            raise UsageError(f"unknown compression preset {spec.preset!r}",
                             f"use one of: {', '.join(SQFSTAR_PRESETS)}")
        cmd = [path, *SQFSTAR_PRESETS[spec.preset], "-force", "-quiet", "-no-progress",
               "-exit-on-error", "-root-mode", "0755"]
        if spec.all_root:
            cmd.append("-all-root")
        if not spec.xattrs:
            cmd.append("-no-xattrs")
        if spec.epoch is not None:
            cmd += ["-mkfs-time", str(spec.epoch), "-all-time", str(spec.epoch)]
        if spec.offset:
            cmd += ["-offset", str(spec.offset)]
        return cmd + list(spec.extra_args) + [str(out)]
    if spec.preset not in TAR2SQFS_PRESETS:
        raise UsageError(f"preset {spec.preset!r} is not available with tar2sqfs",
                         f"use one of: {', '.join(TAR2SQFS_PRESETS)}, or install squashfs-tools")
    if spec.offset:
        raise UsageError("tar2sqfs cannot write at an offset", "internal: write to a file first")
    cmd = [path, *TAR2SQFS_PRESETS[spec.preset], "--force", "--quiet"]
    if not spec.xattrs:
        cmd.append("--no-xattr")
    if spec.epoch is not None:
        cmd += ["--no-keep-time", "--defaults", f"mtime={spec.epoch}"]
    return cmd + list(spec.extra_args) + [str(out)]


def image_inspect(image: str) -> dict[str, Any]:
    """``docker inspect IMAGE`` as a dict; EngineError naming the image when absent."""
    from imagekit import engine

    return engine.inspect(image).attrs


def _tail(path: str, lines: int = 8) -> str:
    try:
        with open(path, errors="replace") as fh:
            return "\n".join(fh.read().strip().splitlines()[-lines:])
    except OSError:
        return ""


def stream_to_squashfs(image: str, out: Path, spec: SquashSpec, *,
                       keep: Callable[[tarstream.Member], bool],
                       adjust: Callable[[tarstream.Member], None] | None,
                       extra, on_bytes: Callable[[int], None] | None = None) -> str:
    """Run the pipeline into ``out``; returns the tool name used. Cleans up on any exit."""
    from imagekit import engine

    name, path = pick_tool(spec.tool, None if spec.offset else spec.preset)
    cmd = tool_command(name, path, spec, out)
    if name == "tar2sqfs" and spec.all_root:
        inner = adjust

        def adjust(member: tarstream.Member) -> None:  # tar2sqfs has no -all-root
            if inner is not None:
                inner(member)
            member.uid = member.gid = 0

    docker = engine.docker_cli()
    procs: list[subprocess.Popen] = []
    # The container is removed after the finally below has stopped the pipeline.
    with engine.throwaway(image, purpose="export") as container, \
            tempfile.NamedTemporaryFile(prefix="imagekit-export-", suffix=".err") as exp_err, \
            tempfile.NamedTemporaryFile(prefix="imagekit-squash-", suffix=".err") as sq_err:
        try:
            exporter = subprocess.Popen([docker, "export", container], stdout=subprocess.PIPE,
                                        stderr=exp_err)
            procs.append(exporter)
            # sqfstar refuses SOURCE_DATE_EPOCH next to explicit times; the times are explicit.
            tool_env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
            squasher = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        stderr=sq_err, env=tool_env)
            procs.append(squasher)
            src = io.BufferedReader(exporter.stdout, buffer_size=1 << 20)
            try:
                tarstream.filter_tar(src, squasher.stdin, keep=keep, adjust=adjust, extra=extra,
                                     on_bytes=on_bytes)
                squasher.stdin.close()
            except BrokenPipeError:
                squasher.wait()
                raise ImagekitError(f"{name} stopped reading the stream (exit {squasher.returncode}): "
                                    f"{_tail(sq_err.name)}",
                                    "check the --squash-opt values and the free space") from None
            except tarstream.TarFormatError as exc:
                exporter.wait()
                detail = _tail(exp_err.name) or str(exc)
                raise EngineError(f"docker export {image} failed: {detail}") from None
            rc_sq, rc_exp = squasher.wait(), exporter.wait()
            if rc_exp != 0:
                raise EngineError(f"docker export {image} failed (exit {rc_exp}): {_tail(exp_err.name)}")
            if rc_sq != 0:
                raise ImagekitError(f"{name} failed (exit {rc_sq}): {_tail(sq_err.name)}",
                                    "check the squashfs options (--squash-opt) and free space")
            return name
        finally:
            for proc in procs:
                stop(proc, grace=0)
                for stream in (proc.stdin, proc.stdout):
                    if stream is not None:
                        try:
                            stream.close()
                        except (BrokenPipeError, OSError):
                            pass


def source_date_epoch(env: dict[str, str] | None = None) -> int | None:
    value = (env if env is not None else os.environ).get("SOURCE_DATE_EPOCH")
    if value in (None, ""):
        return None
    try:
        epoch = int(value)
    except ValueError:
        raise UsageError(f"SOURCE_DATE_EPOCH={value!r} is not an integer",
                         "set it to seconds since 1970, e.g. $(git log -1 --format=%ct)") from None
    if not 0 <= epoch < 2 ** 32:
        raise UsageError(f"SOURCE_DATE_EPOCH={epoch} is out of squashfs's 32-bit range")
    return epoch
