"""Enroot/Pyxis squashfs: the root filesystem plus the config files Enroot derives.

Facts carried over from Enroot's ``dockerd://`` import (src/docker.sh,
common.sh, enroot-switchroot) so that a ``.sqsh`` made here starts exactly like
one made by ``enroot import dockerd://IMAGE``:

- the export stream loses ``dev/*`` (``dev`` itself stays) and ``/.dockerenv``;
- after extraction Enroot runs its fixperms step: owner ``r`` on everything,
  owner ``x`` on directories and on files with any ``x`` bit, owner ``w`` on
  directories down to depth 5;
- ``/etc/environment``: one image ``Env`` entry a line, verbatim;
- ``/etc/fstab``: one line per ``Volumes`` key (sorted), ``${ENROOT_ROOTFS}``
  left for Enroot to expand at start:
  ``${ENROOT_ROOTFS}/v /v none x-create=dir,bind,rw,nosuid,nodev``;
- ``/etc/rc``: labels as ``# key value`` comments (sorted, then a blank line),
  make and enter WORKDIR (``/`` when unset), source a non-empty
  ``/etc/rc.local``, then ``exec ENTRYPOINT "$@"`` when arguments are given,
  else ``exec ENTRYPOINT CMD``; ``/bin/sh`` when the image has neither. Words
  are quoted the way bash's ``${var@Q}`` quotes them. Enroot runs it as
  ``$SHELL /etc/rc ARGS...``;
- ``/etc/rc.local``: two comment lines (Pyxis overwrites it with
  ``exec "$@"`` when it must not run the entrypoint);
- mksquashfs options ``-all-root`` and ``$ENROOT_SQUASH_OPTIONS`` (default
  ``-comp lzo -noD``); with ``SOURCE_DATE_EPOCH`` set, ``-mkfs-time`` and
  ``-all-time`` are that value. Extended attributes are not kept (Enroot's
  ``tar -x`` does not extract them).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from imagekit.export.output import (ExportResult, Progress, atomic_output, check_free_space,
                                    interrupt_on_sigterm, prepare_target, sha256_file)
from imagekit.export.tarstream import (DIRECTORY, HARDLINK, SYMLINK, Member, dir_entry,
                                       file_entry, missing_dirs)

RC_LOCAL = ("# This file is sourced by /etc/rc when the container starts.\n"
            "# It can be used to manipulate the entrypoint or the command of the container.\n")
CONFIG_FILES = ("etc/environment", "etc/fstab", "etc/rc", "etc/rc.local")
FIXPERMS_DEPTH = 5

_ANSI_C = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
           "\v": "\\v", "\x1b": "\\E", "\\": "\\\\", "'": "\\'"}


def bash_quote(word: str) -> str:
    """Quote ``word`` as bash's ``${word@Q}`` does (``$'...'`` when it holds control chars)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in word):
        out = []
        for c in word:
            if c in _ANSI_C:
                out.append(_ANSI_C[c])
            elif ord(c) < 32 or ord(c) == 127:
                out.append("\\%03o" % ord(c))
            else:
                out.append(c)
        return "$'" + "".join(out) + "'"
    return "'" + word.replace("'", "'\\''") + "'"


def _dq(text: str) -> str:
    """Text safe inside double quotes (Enroot inserts WORKDIR raw; a quote would break rc)."""
    for ch in ("\\", '"', "$", "`"):
        text = text.replace(ch, "\\" + ch)
    return text


def environment_file(config: dict[str, Any]) -> str:
    return "".join(f"{entry}\n" for entry in (config.get("Env") or []))


def fstab_file(config: dict[str, Any]) -> str:
    volumes = sorted((config.get("Volumes") or {}).keys())
    return "".join(f"${{ENROOT_ROOTFS}}{v} {v} none x-create=dir,bind,rw,nosuid,nodev\n"
                   for v in volumes)


def rc_file(config: dict[str, Any]) -> str:
    labels = config.get("Labels") or {}
    head = "".join(f"# {k} {v}\n" for k, v in sorted(labels.items()))
    if head:
        head += "\n"
    workdir = config.get("WorkingDir") or "/"
    entrypoint = list(config.get("Entrypoint") or [])
    cmd = list(config.get("Cmd") or [])
    if not entrypoint and not cmd:
        cmd = ["/bin/sh"]
    ep = " ".join(bash_quote(w) for w in entrypoint)
    cm = " ".join(bash_quote(w) for w in cmd)
    wd = _dq(workdir)
    return (head +
            f'mkdir -p "{wd}" 2> /dev/null\n'
            f'cd "{wd}" && unset OLDPWD || exit 1\n'
            "\n"
            "if [ -s /etc/rc.local ]; then\n"
            "    . /etc/rc.local\n"
            "fi\n"
            "\n"
            "if [ $# -gt 0 ]; then\n"
            f'    exec {ep} "$@"\n'
            "else\n"
            f"    exec {ep} {cm}\n"
            "fi\n")


def config_files(config: dict[str, Any]) -> dict[str, str]:
    """The four files Enroot writes into the root filesystem, by path (no leading /)."""
    return {
        "etc/environment": environment_file(config),
        "etc/fstab": fstab_file(config),
        "etc/rc": rc_file(config),
        "etc/rc.local": RC_LOCAL,
    }


def keep(member: Member) -> bool:
    """Enroot's extraction filter plus the files it regenerates."""
    name = member.name
    if name == ".dockerenv" or name.startswith("dev/"):
        return False
    return name not in CONFIG_FILES


def fixperms(member: Member) -> None:
    """Enroot's post-extraction permission fix (``chmod -R u+rX`` and ``u+w`` on shallow dirs)."""
    if member.type in (SYMLINK, HARDLINK):
        return
    mode = member.mode | 0o400
    if member.type == DIRECTORY or mode & 0o111:
        mode |= 0o100
    if member.type == DIRECTORY and member.name.count("/") + 1 <= FIXPERMS_DEPTH:
        mode |= 0o200
    member.mode = mode


def extra_entries(config: dict[str, Any], mtime: int):
    """Callback for :func:`filter_tar`: WORKDIR and /etc if missing, then the config files."""
    files = config_files(config)
    workdir = config.get("WorkingDir") or "/"

    def build(seen: set[str]):
        out = []
        needed: list[str] = []
        for d in missing_dirs("etc", seen) + missing_dirs(workdir, seen):
            if d not in needed:
                needed.append(d)
        out += [dir_entry(d, mtime=mtime) for d in needed]
        out += [file_entry(path, text.encode(), mtime=mtime) for path, text in files.items()]
        return out

    return build


def export(image: str, output: Path, *, preset: str = "enroot", squash_opts: tuple[str, ...] = (),
           tool: str = "auto", force: bool = False, check_space: bool = True,
           progress: Callable[[int, bool], None] | None = None) -> ExportResult:
    """Write ``image`` as an Enroot/Pyxis squashfs at ``output`` (atomically)."""
    from imagekit.export import squash

    target = prepare_target(output, force)
    info = squash.image_inspect(image)
    if check_space:
        # The uncompressed image size bounds the output (the enroot preset stores data raw).
        check_free_space(target.parent, int(info.get("Size") or 0), f"{image} as squashfs")
    epoch = squash.source_date_epoch()
    spec = squash.SquashSpec(preset=preset, extra_args=squash_opts, tool=tool, all_root=True,
                             xattrs=False, epoch=epoch)
    config = info.get("Config") or {}
    mtime = epoch if epoch is not None else int(time.time())
    meter = Progress(progress)
    with interrupt_on_sigterm(), atomic_output(target) as tmp:
        used = squash.stream_to_squashfs(image, tmp, spec, keep=keep, adjust=fixperms,
                                         extra=extra_entries(config, mtime), on_bytes=meter.add)
        meter.done()
    return ExportResult(path=str(target), format="enroot", image=image,
                        bytes=target.stat().st_size, sha256=sha256_file(target), seconds=0.0,
                        tool=used, compression=preset)
