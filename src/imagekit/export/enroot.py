"""Enroot/Pyxis squashfs: the root filesystem plus the config files Enroot derives.

Facts carried over from Enroot's ``dockerd://`` import (src/docker.sh,
common.sh, enroot-switchroot) so that a ``.sqsh`` made here starts exactly like
one made by ``enroot import dockerd://IMAGE``:

- what Docker's init layer puts into every container (``docker export``'s stream, and what the
  other sources apply to give the same tree): an empty 0755 ``/etc/hosts``, ``/etc/hostname``,
  ``/etc/resolv.conf`` and ``/etc/mtab`` -> ``/proc/mounts`` are left out, as no image layer holds
  them (``enroot import docker://`` has none; Enroot's own ``dockerd://`` import, which reads
  ``docker export``, keeps them). At start Enroot binds the host's ``/etc/hosts``,
  ``/etc/hostname`` and ``/etc/resolv.conf`` over them (``x-create=file``). An image's own file
  at one of these paths is hidden from ``docker export`` by the init layer, so no source gives it;
- the export stream loses ``dev/*`` (``dev`` itself stays) and ``/.dockerenv``; a hard link to one
  of them makes Enroot's ``tar -x`` fail ("Cannot hard link"), so it is refused here, and another
  name of a file Enroot regenerates (it writes /etc/rc, ... in place) becomes a link to the new one;
- after extraction Enroot runs its fixperms step: owner ``r`` on everything,
  owner ``x`` on directories and on files with any ``x`` bit, owner ``w`` on
  directories down to depth 15 (Enroot 4.x; 3.x stopped at 5), which shows
  when Pyxis starts straight from the squashfs (``use_squashfuse``);
- ``/etc/environment``: one image ``Env`` entry a line, verbatim;
- ``/etc/fstab``: one line per ``Volumes`` key (sorted), ``${ENROOT_ROOTFS}``
  left for Enroot to expand at start:
  ``${ENROOT_ROOTFS}/v /v none x-create=dir,bind,rw,nosuid,nodev``;
- ``/etc/rc``: labels as ``# key value`` comments (sorted, then a blank line),
  make and enter WORKDIR (``/`` when unset), source a non-empty
  ``/etc/rc.local``, then ``exec ENTRYPOINT "$@"`` when arguments are given,
  else ``exec ENTRYPOINT CMD``; ``/bin/sh`` when the image has neither. Enroot
  runs it as ``$SHELL /etc/rc ARGS...``;
- ``/etc/rc.local``: two comment lines (Pyxis overwrites it with
  ``exec "$@"`` when it must not run the entrypoint);
- not Enroot's: ``/etc/profile.d/00-imagekit-environment.sh``
  (:mod:`imagekit.util.login_env`), so that the image's Env survives Enroot's login
  shell on bases whose ``/etc/profile`` resets ``PATH`` (Debian), with what the
  image's own profile.d scripts add kept. imagekit's own images already carry
  it; any other image gets it here, and the old last-place script of an image
  built by an older imagekit (``zz-imagekit-environment.sh``) is left out;
- mksquashfs options ``-all-root`` and ``$ENROOT_SQUASH_OPTIONS`` (default
  ``-comp lzo -noD``); with ``SOURCE_DATE_EPOCH`` set, ``-mkfs-time`` and
  ``-all-time`` are that value. Extended attributes are not kept (Enroot's
  ``tar -x`` does not extract them).

The image's metadata is someone else's text, and ``/etc/rc`` runs at every
start, even under ``srun --no-container-entrypoint``. Where Enroot pastes a
value raw, these files quote it (:mod:`imagekit.util.quoting`); what a file cannot
carry (a newline in an Env entry, a Volume path with whitespace, a NUL, a label
that would not read back from its ``# KEY VALUE`` line, a first word starting with
``-``) is refused before anything is written.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from imagekit import image_facts
from imagekit.util import login_env, quoting
from imagekit.export import squash
from imagekit.export.image_source import Source, open_source
from imagekit.export.layers import made_by_docker, steady_times
from imagekit.export.output import (ConvertRequest, Digest, ExportResult, Progress, atomic_output, check_free_space,
                                    expected_bytes, prepare_target)
from imagekit.export.tarstream import (DIRECTORY, HARDLINK, SYMLINK, DroppedLinkTarget, Member, Rewrite,
                                       dir_entry, file_entry, missing_dirs, normalise)
from imagekit.util.signals import interrupt_on_sigterm

RC_LOCAL = ("# This file is sourced by /etc/rc when the container starts.\n"
            "# It can be used to manipulate the entrypoint or the command of the container.\n")
CONFIG_FILES = ("etc/environment", "etc/fstab", "etc/rc", "etc/rc.local", login_env.PATH)
# Left out of the root filesystem, and not written again.
DROPPED_FILES = login_env.LEGACY_PATHS
# Enroot 4.x (common::fixperms: find -maxdepth 15); Enroot 3.x used 5.
FIXPERMS_DEPTH = 15


def check_config(config: dict[str, Any], image: str = "image") -> None:
    """Refuse what Enroot's files cannot carry (see the helpers in :mod:`imagekit.util.quoting`)."""
    where = f"image {image}"
    quoting.env_sizes(list(config.get("Env") or []), where)
    for i, entry in enumerate(config.get("Env") or []):
        name, sep, value = entry.partition("=")
        quoting.env_name(name, where, f"Env[{i}] name")
        # /etc/environment holds one NAME=VALUE a line: a newline would start another variable.
        quoting.no_control(value, where, f"Env[{i}] ({name}) value",
                           "Enroot's /etc/environment has one variable a line; rebuild without it")
    for volume in (config.get("Volumes") or {}):
        fstab_path(volume, where)
    clean_path(config.get("WorkingDir") or "/", where, "WorkingDir")
    for field in ("Entrypoint", "Cmd"):
        quoting.sh_words(list(config.get(field) or []), where, field)
    first_word(config, where)
    for key, value in (config.get("Labels") or {}).items():
        image_facts.check_rc_label(key, value, where)


def first_word(config: dict[str, Any], where: str = "image") -> None:
    """Refuse a first executed word (Entrypoint[0], else Cmd[0]) that starts with '-'. /etc/rc runs
    ``exec WORD ...``: bash's and busybox's exec read such a word as their own option (``-a NAME``
    sets argv0; bash's ``-c`` empties the environment) and ``exec -- WORD`` is no way out, since
    dash's exec takes no options and runs a program named ``--`` (dash 0.5.12, bash 5.2 and busybox
    1.35 checked). Docker would look the word up on PATH as a program's name; no form of /etc/rc
    does that under every sh, so nothing is written."""
    entrypoint = list(config.get("Entrypoint") or [])
    field, words = ("Entrypoint", entrypoint) if entrypoint else ("Cmd", list(config.get("Cmd") or []))
    if words and words[0].startswith("-"):
        raise quoting.UnsafeValue(where, f"{field}[0]", words[0], "starts with '-', which /etc/rc's `exec` "
                                  "would read as its own option under bash and busybox sh",
                                  "name the program by its path (e.g. ./-x or /usr/bin/-x), or put it after "
                                  "a program in Entrypoint; rebuild the image")


def fstab_path(path: str, where: str = "image") -> str:
    """A Volume as an fstab field. Enroot's mount parser is musl's getmntent (src/compat.h, built
    static against musl): fields split at whitespace and no ``\\040`` escape is decoded, and
    ``${VAR}`` is expanded from the host's environment first; ``..`` would bind a directory
    outside the root filesystem. None of these can be written safely, so they are refused."""
    clean_path(path, where, "Volume")
    if any(c.isspace() for c in path) or "\\" in path or "$" in path or "#" in path:
        raise quoting.UnsafeValue(where, "Volume", path, "cannot be written to Enroot's /etc/fstab",
                                  "a Volume must be an absolute path without whitespace, '\\', '$', '#', "
                                  "'.' or '..' components; rebuild the image without it")
    return path


def clean_path(path: str, where: str, field: str) -> str:
    """An absolute path without control characters or ``.``/``..`` components (Docker writes
    WORKDIR and VOLUME so; anything else was made by hand)."""
    quoting.no_control(path, where, field)
    if not path.startswith("/") or any(p in (".", "..") for p in path.split("/")[1:]):
        raise quoting.UnsafeValue(where, field, path, "is not a clean absolute path",
                                  "write it as /a/b, without '.' or '..' components")
    return path


def environment_file(config: dict[str, Any]) -> str:
    return "".join(f"{entry}\n" for entry in (config.get("Env") or []))


def fstab_file(config: dict[str, Any]) -> str:
    volumes = sorted((config.get("Volumes") or {}).keys())
    return "".join(f"${{ENROOT_ROOTFS}}{v} {v} none x-create=dir,bind,rw,nosuid,nodev\n"
                   for v in volumes)


def rc_file(config: dict[str, Any]) -> str:
    # Enroot writes labels as `# KEY VALUE` comments (src/docker.sh), turning a newline in a value into
    # a space; imagekit reads them back (image_facts.rc_labels), so one that would not read back as
    # itself is refused instead (check_config).
    head = image_facts.rc_label_lines(config.get("Labels") or {})
    workdir = config.get("WorkingDir") or "/"
    entrypoint = list(config.get("Entrypoint") or [])
    cmd = list(config.get("Cmd") or [])
    if not entrypoint and not cmd:
        cmd = ["/bin/sh"]
    # Enroot quotes with bash's ${word@Q}, which falls back to $'...' (not POSIX) for control
    # characters, and splits words at newlines; single quotes keep every word whole under any sh.
    ep = quoting.sh_words(entrypoint)
    cm = quoting.sh_words(cmd)
    # WORKDIR in double quotes as Enroot writes it, but escaped (Enroot pastes it raw).
    wd = quoting.sh_double(workdir)
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


def config_files(config: dict[str, Any], image: str = "image") -> dict[str, str]:
    """The four files Enroot writes into the root filesystem and the login-environment script,
    by path (no leading /)."""
    check_config(config, image)
    return {
        "etc/environment": environment_file(config),
        "etc/fstab": fstab_file(config),
        "etc/rc": rc_file(config),
        "etc/rc.local": RC_LOCAL,
        login_env.PATH: login_env.script(),
    }


def keep(member: Member) -> bool:
    """Enroot's extraction filter, the files it regenerates, and what Docker's init layer made
    (the image's layers, as ``enroot import`` of it from a registry holds them)."""
    name = member.name
    if name == ".dockerenv" or name.startswith("dev/") or made_by_docker(member):
        return False
    return name not in CONFIG_FILES and name not in DROPPED_FILES


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


def volume_through_symlink(config: dict[str, Any], symlinks: set[str], image: str = "image") -> None:
    """Refuse a Volume whose path, or a parent of it, is a symlink in the image. Enroot's fstab line
    binds ``${ENROOT_ROOTFS}/VOLUME``: enroot-mount resolves only the target inside the root and hands
    the source to mount(2), which follows the image's symlink on the host, so an image could bind any
    host path into its container. (WorkingDir is only used inside the container, where a symlink
    resolves within the root.)"""
    for volume in sorted((config.get("Volumes") or {}).keys()):
        parts = normalise(volume).split("/")
        for i in range(1, len(parts) + 1):
            through = "/".join(parts[:i])
            if through in symlinks:
                raise quoting.UnsafeValue(f"image {image}", "Volume", volume,
                                          f"goes through /{through}, a symlink in the image",
                                          "Enroot would bind the host path the symlink names into the container; "
                                          "rebuild the image with a real directory there or without the VOLUME")


def extra_entries(config: dict[str, Any], mtime: int, image: str = "image", symlinks: set[str] | None = None):
    """Callback for :func:`filter_tar`: WORKDIR and /etc if missing, then the config files.
    ``symlinks``: the image's symlinks, as the filter met them (:func:`volume_through_symlink`)."""
    files = config_files(config, image)
    workdir = config.get("WorkingDir") or "/"

    def build(seen: set[str]):
        volume_through_symlink(config, symlinks or set(), image)
        out = []
        needed: list[str] = []
        for d in (missing_dirs(str(Path(login_env.PATH).parent), seen) + missing_dirs(workdir, seen)):
            if d not in needed:
                needed.append(d)
        out += [dir_entry(d, mtime=mtime) for d in needed]
        out += [file_entry(path, quoting.encode(text), mtime=mtime) for path, text in files.items()]
        return out

    return build


def convert(source: "str | Source", target: Path, request: ConvertRequest, *,
            progress: Callable[[int, bool], None] | None = None) -> ExportResult:
    """The enroot format's converter (formats.FORMATS): ``source`` as an Enroot/Pyxis squashfs at
    ``target``, atomically, with the preset ``request.preset`` names (a name in :data:`squash.PRESETS`)."""
    return squashfs(source, target, request, progress=progress)


def squashfs(image: "str | Source", output: Path, request: ConvertRequest, *,
             preset: squash.Preset | None = None,
             progress: Callable[[int, bool], None] | None = None) -> ExportResult:
    """Write ``image`` as an Enroot/Pyxis squashfs at ``output`` (atomically), as ``request`` says.

    ``preset``: an unnamed :class:`squash.Preset` in place of ``request.preset`` (the compression
    bench tries candidates no name has). ``image``: a local engine image, or a
    :class:`~imagekit.export.image_source.Source` (a registry, an OCI layout, …)."""
    source = image if isinstance(image, Source) else open_source(image)
    image = source.text

    if preset is not None:
        chosen, label = preset, preset.label()
    else:
        label = request.preset
        chosen = squash.preset(label)
    target = prepare_target(output, request.force)
    info = source.inspect()
    if request.check_space:
        # The uncompressed image size bounds the output (the enroot preset stores data raw).
        check_free_space(target.parent, int(info.get("Size") or 0), f"{image} as squashfs")
    epoch, fixed = squash.source_date_epoch(), squash.image_time(info)
    spec = squash.SquashSpec(preset=chosen, extra_args=tuple(request.squash_opts), tool=request.tool, all_root=True,
                             xattrs=False, epoch=epoch, mkfs_time=fixed)
    config = info.get("Config") or {}
    check_config(config, image)
    mtime = fixed if fixed is not None else int(time.time())
    meter = Progress(progress, expected=expected_bytes(source, info))
    with interrupt_on_sigterm(), atomic_output(target) as tmp:
        symlinks: set[str] = set()

        def keep_noting_symlinks(member: Member) -> bool:
            kept = keep(member)
            if kept and member.type == SYMLINK:
                symlinks.add(member.name)
            return kept

        try:
            steady = steady_times(fixed)

            def adjust(member: Member) -> None:
                fixperms(member)
                if steady is not None:
                    steady(member)

            rewrite = Rewrite(keep_noting_symlinks, adjust, extra_entries(config, mtime, image, symlinks))
            used = squash.stream_to_squashfs(source, tmp, spec, rewrite, on_bytes=meter.add, on_end=meter.ended)
        except DroppedLinkTarget as exc:
            # The files Enroot regenerates keep their other names (filter_tar links them to the new
            # file); what it does not extract at all (dev/*, /.dockerenv) makes its own import fail.
            raise quoting.UnsafeValue(f"image {image}", "file", f"/{exc.name}",
                                      f"is a hard link to /{exc.target}, which Enroot leaves out of the root "
                                      "filesystem (no dev/* and no /.dockerenv): `enroot import` fails on it too "
                                      "(tar: Cannot hard link)", exc.hint) from None
        meter.done()
        digest = Digest(tmp)     # read beside the fsync and the rename
    return ExportResult(path=str(target), format="enroot", image=image,
                        bytes=target.stat().st_size, sha256=digest.result(), seconds=0.0,
                        tool=used, compression=label)
