"""The Podman engine (rootless, or rootful as root): what imagekit asks of ``podman``.

imagekit runs ``podman`` as the user it runs as, so ``imagekit build --engine podman`` by
an unprivileged user builds into that user's own image store (``~/.local/share/containers``),
with no daemon and no privilege. ``ENGINE`` is this module as an :class:`imagekit.engines.Engine`;
everything imagekit asks of Podman goes through here:

- ``cli()``: the ``podman`` binary (``IMAGEKIT_PODMAN`` overrides ``PATH``), after the check that
  nobody but root and the user can change Podman's configuration and store
  (:mod:`imagekit.engines.podman_trust`).
- ``preflight()``: before any build starts, the one clear error for what rootless Podman
  needs from the host: ``newuidmap``/``newgidmap`` and a subordinate uid and gid range for
  the user (``/etc/subuid``, ``/etc/subgid``), naming the ``usermod`` line that adds them.
- ``build_argv(...)``: the ``podman build`` command line (Buildah 1.28 inside Podman 4.3);
  :mod:`imagekit.build` runs it and parses its ``STEP n/m:`` lines.
- ``inspect(ref)`` (an :class:`imagekit.engines.image.Image`, the same shape as Docker's),
  ``image_exists``, ``image_id``, ``tag``, ``remove``.
- ``throwaway(image, ...)``: a container of the image, removed however the ``with`` body
  ends (``imagekit check`` runs its testinfra checks in one, with testinfra's ``podman://``);
  ``run_once(image, argv)``: one command in one.
- ``save_oci_archive(ref, path)``: ``podman save --format oci-archive``; the export reads it
  as an ``oci-archive:`` source (:class:`imagekit.export.image_source.PodmanSource`).

What differs from BuildKit is in docs/build.md ("Rootless Podman").
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pwd
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Iterator, Sequence

from imagekit.engines import podman_trust
from imagekit.util import leases, private_names
from imagekit.engines.image import BuildCommand, Image, ImageMissing, ModuleEngine
from imagekit.util.errors import EngineError, UsageError

SETUP_HINT = ("install Podman: `apt-get install podman uidmap slirp4netns` (Debian 12: Podman 4.3), "
              "or `bash scripts/setup-podman.sh`")
NOT_FOUND_HINT = "build it with `imagekit build --engine podman STACK`, or `podman load` it"
# A Debian image's own users reach up to nobody (65534): fewer subordinate ids fail its apt-get.
MIN_SUBIDS = 65536
SUBUID, SUBGID = Path("/etc/subuid"), Path("/etc/subgid")
IDLE = ("/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done")
STORE = "Podman's image store"
# skopeo's name for the user's store: how the exporter is told to read an image from it.
TRANSPORT = "containers-storage:"
# Podman 4.3 has no --gpus: GPUs come through CDI (nvidia-ctk cdi generate); memlock stays the user's.
DEVICES = {"gpu": ("--device", "nvidia.com/gpu=all"), "fabric": ("--device", "/dev/infiniband")}


def cli() -> str:
    """Path of the ``podman`` binary, once its configuration and store are known to be nobody's but
    root's and this user's (:mod:`imagekit.engines.podman_trust`, once per process): every podman
    command imagekit runs starts here. EngineError with the fix when there is no podman."""
    found = binary()
    podman_trust.ensure(found)
    return found


def binary() -> str:
    """Path of the ``podman`` binary (``IMAGEKIT_PODMAN``, else ``PATH``), unchecked; EngineError when none."""
    override = os.environ.get("IMAGEKIT_PODMAN")
    found = override if override and os.access(override, os.X_OK) else shutil.which("podman")
    if not found:
        raise EngineError("no podman found on PATH", SETUP_HINT)
    return found


def rootless() -> bool:
    return os.geteuid() != 0


def _who() -> str:
    try:
        name = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        name = str(os.geteuid())
    return f"rootless, user {name}" if rootless() else "rootful"


def subid_ranges(user: str, uid: int, path: Path) -> list[tuple[int, int]]:
    """The (start, count) ranges ``path`` (/etc/subuid or /etc/subgid) gives ``user`` (by name or uid)."""
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        fields = line.strip().split(":")
        if len(fields) == 3 and fields[0] in (user, str(uid)) and fields[1].isdigit() and fields[2].isdigit():
            out.append((int(fields[1]), int(fields[2])))
    return out


def free_range(count: int = MIN_SUBIDS) -> tuple[int, int]:
    """A subordinate id range no entry of /etc/subuid or /etc/subgid uses yet (for the hint)."""
    end = 100000
    for path in (SUBUID, SUBGID):
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                fields = line.strip().split(":")
                if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                    end = max(end, int(fields[1]) + int(fields[2]))
    return end, end + count - 1


def preflight() -> str:
    """Check what Podman needs before a build starts; returns the podman path.

    Rootless: ``newuidmap``/``newgidmap`` (Debian's ``uidmap``) and at least 65536 subordinate
    uids and gids for the user. Without them Podman fails half-way into the first ``RUN`` (or
    silently maps every file to one id); here it is one error naming the fix. Then the check of
    Podman's configuration and store (:func:`cli`).
    """
    binary()                  # no podman at all: that error first
    if not rootless():
        return cli()
    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        raise EngineError(f"rootless Podman: uid {uid} has no user name (no /etc/passwd entry)",
                          "run imagekit as a user listed in /etc/passwd") from None
    missing_tools = [t for t in ("newuidmap", "newgidmap") if not shutil.which(t)
                     and not Path("/usr/bin", t).exists()]
    if missing_tools:
        raise EngineError(f"rootless Podman needs {' and '.join(missing_tools)}, which are not installed",
                          "as root: apt-get install uidmap")
    short = []
    for path_, kind in ((SUBUID, "uid"), (SUBGID, "gid")):
        have = sum(count for _, count in subid_ranges(user, uid, path_))
        if have < MIN_SUBIDS:
            short.append(f"{path_} gives {user} {have or 'no'} subordinate {kind}s")
    if short:
        lo, hi = free_range()
        raise EngineError(
            f"rootless Podman cannot build as {user}: {'; '.join(short)} (it needs at least {MIN_SUBIDS})",
            f"as root: usermod --add-subuids {lo}-{hi} --add-subgids {lo}-{hi} {user}; "
            f"then as {user}: podman system migrate")
    return cli()      # what the host lacks first, then whose configuration and store these are


def run(args: Sequence[str], *, check: bool = True, what: str | None = None,
        **kw) -> subprocess.CompletedProcess:
    """``podman ARGS``, output captured; EngineError naming ``what`` (or the command) when it fails."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    proc = subprocess.run([cli(), *args], **kw)
    if check and proc.returncode != 0:
        err = proc.stderr if isinstance(proc.stderr, str) else (proc.stderr or b"").decode(errors="replace")
        detail = (err.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise EngineError(f"{what or 'podman ' + ' '.join(args[:2])} failed: {detail}")
    return proc


# --- building ---------------------------------------------------------------------------------

def dockerfile(text: str) -> str:
    """The rendered Dockerfile as Buildah 1.28 can run it.

    Buildah 1.28 takes a ``sharing=locked`` cache mount's lock and keeps it until the whole
    build ends, so the next ``RUN`` with the same cache (every apt step after the first) waits
    forever. Its cache mounts are given without ``sharing=locked`` (Buildah's default, shared):
    one build's steps run one after another; apt's own lock files keep two concurrent builds of
    one user from writing the cache at once (the second one's apt-get fails instead of waiting).
    The recipe label stays the hash of the recipe as rendered.
    """
    return text.replace(",sharing=locked", "")


def build_env() -> dict[str, str]:
    """The environment of ``podman build``: a TMPDIR of the user's own unless one is set.

    Buildah 1.28 keeps its cache mounts under ``$TMPDIR/buildah-cache`` (``/var/tmp`` when unset),
    one directory for every user of the machine: the first user's owns it and a second user's
    cache mounts fail. A private directory of each user's (:func:`private_tmp`) keeps them apart.
    """
    env = dict(os.environ)
    if rootless() and not env.get("TMPDIR"):
        env["TMPDIR"] = str(private_tmp())
    return env


def private_tmp(parent: Path = Path("/var/tmp")) -> Path:
    """``/var/tmp/imagekit-podman-UID``, made 0700 and used only when it is a real directory (opened
    with O_NOFOLLOW) that this user owns; its mode is set back to 0700 through the descriptor. In a
    sticky /var/tmp anyone can take that name first (a link to a directory of theirs would put the
    user's build cache where they can poison it), so a name that is not the user's own directory is
    skipped for one nobody else can guess (``…-UID-TOKEN``, :mod:`imagekit.util.private_names`), then
    (a user without a home) ``.2`` to ``.8``."""
    uid = os.geteuid()
    base = parent / f"imagekit-podman-{uid}"
    later = (base.with_name(base.name + f".{n}") for n in range(2, 9))
    for path in itertools.chain(private_names.names(parent, base.name), later):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue            # a link, or not a directory: someone else's name
        try:
            st = os.fstat(fd)
            if st.st_uid != uid:
                continue
            if st.st_mode & 0o7777 != 0o700:
                os.fchmod(fd, 0o700)
            return path
        finally:
            os.close(fd)
    raise EngineError(f"no private directory for the build cache: {base} and {base}.2 to .8 are not "
                      "directories of this user's (and there is no home to keep a name nobody can guess)",
                      "set TMPDIR to a directory of your own")


def build_argv(build: BuildCommand) -> list[str]:
    """``podman build`` with what BuildKit's build gets, in Buildah's words.

    - ``--pull=never``: base images are local (``imagekit base``); nothing is pulled.
    - ``--network=host`` for RUN steps: rootless Podman's own network (slirp4netns) needs a
      ``/dev/net/tun`` the user may open, which containers and CI runners often lack; the
      steps only fetch packages (apt, pip), as they do under BuildKit.
    - ``--layers``: every step is cached in the store (Podman's default, said here).
    - ``--secret id=…,src=…``: ``RUN --mount=type=secret`` as BuildKit (tmpfs, not committed).
    - ``--format oci``: labels and config as OCI; ``--iidfile``: the image is tagged later.

    BuildKit's registry cache (``cache_from``, ``inline_cache``) has no Podman counterpart: its
    layer cache is the local store (``registry_cache`` False: the build request refuses it first).
    """
    if build.cache_from or build.inline_cache:
        raise UsageError("podman build takes no registry cache (build.cache_from, build.inline_cache)")
    cmd = [cli(), "build", "--pull=never", "--network=host", "--layers", "--format", "oci",
           "--target", build.target, "--platform", build.platform, "--iidfile", build.iidfile, "-f", build.dockerfile]
    cmd += [a for k, v in sorted(build.labels.items()) for a in ("--label", f"{k}={v}")]
    if build.no_cache:
        cmd.append("--no-cache")
    for sid, src in build.secrets.items():
        cmd += ["--secret", f"id={sid},src={src}"]
    cmd.append(build.context)
    return cmd


# --- images -----------------------------------------------------------------------------------

def inspect(ref: str) -> Image:
    """The image ``ref`` as an :class:`imagekit.engines.image.Image` (Docker's shape); ImageMissing if absent."""
    proc = run(["image", "inspect", "--format", "json", ref], check=False)
    if proc.returncode != 0:
        if "image not known" in proc.stderr or "no such image" in proc.stderr.lower() or "not found" in proc.stderr:
            raise ImageMissing(ref, f"{STORE} ({_who()})", NOT_FOUND_HINT)
        raise EngineError(f"podman refused to inspect {ref!r}: {proc.stderr.strip()[-300:]}", SETUP_HINT)
    attrs = json.loads(proc.stdout)[0]
    image_id = attrs["Id"] if attrs["Id"].startswith("sha256:") else f"sha256:{attrs['Id']}"
    config = attrs.get("Config") or {}
    # Podman reports labels both in Config.Labels and at the top; the config's are the image's.
    labels = dict(config.get("Labels") or attrs.get("Labels") or {})
    return Image(ref=ref, id=image_id, labels=labels, size=int(attrs.get("Size") or 0),
                 config=config, attrs={**attrs, "Id": image_id})


def image_id(ref: str) -> str:
    return inspect(ref).id


def image_exists(ref: str) -> bool:
    return run(["image", "exists", ref], check=False).returncode == 0


def tag(image: str, name: str) -> None:
    run(["tag", image, name], what=f"podman tag {name}")


def remove(*refs: str) -> None:
    """Untag/remove images; ones that are not there are skipped."""
    if refs:
        run(["rmi", "-f", *refs], check=False)


# --- containers ---------------------------------------------------------------------------------

@contextlib.contextmanager
def throwaway(image: str, command: Sequence[str] = (), *, entrypoint: str | None = None,
              options: Sequence[str] = (), idle: bool = False, purpose: str = "tmp") -> Iterator[str]:
    """A container of ``image``, removed (with its anonymous volumes) however the ``with`` body ends.

    Yields the container's name; it carries the owner label, as Docker's do. ``options`` are
    ``podman create`` options. The container is only created (for ``podman start -a``);
    ``idle=True`` starts it with a shell that waits (``IDLE``), for ``podman exec``.
    """
    name = f"imagekit-{purpose}-{uuid.uuid4().hex[:12]}"
    if idle:
        entrypoint, command = IDLE[0], IDLE[1:]
    run(["create", "--name", name, *leases.label_args(),
         *(["--entrypoint", entrypoint] if entrypoint is not None else []), *options, image, *command],
        what=f"creating a container of {image}")
    try:
        if idle:
            run(["start", name], what=f"starting a container of {image}")
        yield name
    finally:
        run(["rm", "-f", "-v", "-t", "0", name], check=False)


def run_once(image: str, argv: Sequence[str], *, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` (its first word replaces the image's ENTRYPOINT) in a throwaway container of
    ``image``, with no network (rootless Podman's own needs a ``/dev/net/tun`` the user may not
    open, and reading the image's files needs none); its exit code and output. EngineError when it
    cannot start or outlives ``timeout``."""
    with throwaway(image, argv[1:], entrypoint=argv[0], options=["--network", "none"], purpose="run") as name:
        try:
            return subprocess.run([cli(), "start", "-a", name], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise EngineError(f"{argv[0]} in a container of {image} ran longer than {timeout} s") from None


# --- export ---------------------------------------------------------------------------------------

def save_oci_archive(ref: str, path: str | os.PathLike) -> None:
    """``podman save --format oci-archive`` of ``ref`` into ``path`` (its config digest is the image ID)."""
    run(["save", "--format", "oci-archive", "-o", str(path), ref], what=f"podman save {ref}")


# --- the engine ---------------------------------------------------------------------------------

class Podman(ModuleEngine):
    """Podman as an :class:`imagekit.engines.Engine`: this module's functions (ModuleEngine), and what
    is Podman's own."""

    module = __name__
    name = "podman"
    title = "Podman"
    store = STORE
    testinfra_backend = "podman"        # testinfra's podman:// backend, through the podman CLI
    build_log = "buildah"               # STEP n/m: lines
    registry_cache = False              # its layer cache is the local store
    foreign_bases = False               # imagekit base --arch: made with Docker, then copied
    devices = DEVICES

    def cli(self) -> str:
        return cli()

    def preflight(self) -> None:
        """What rootless Podman needs from the host (newuidmap, subordinate ids): one error, before
        anything is rendered or bootstrapped."""
        preflight()

    def available(self) -> bool:
        """Podman has no daemon to be down: a missing ``podman`` is named by the first command, and
        ``--engine podman`` never falls back to reading a registry instead."""
        return True

    def version(self) -> str:
        return "podman"

    def dockerfile(self, text: str) -> str:
        return dockerfile(text)

    def export_source(self, name: str, image_id: str, *, pinned: bool = False) -> str:
        """The user's store, by name: the exporter saves it with ``podman save`` and holds the config
        digest it gets to the ID ``podman image inspect`` gave (so a moved tag fails, not misnames)."""
        return f"{TRANSPORT}{name}"

    def command(self, words: str) -> str:
        return f"{words} --engine {self.name}"

    def copy_hint(self, ref: str) -> str | None:
        return f"docker save {ref} | podman load"


ENGINE = Podman()
