"""The Docker engine: what imagekit asks of Docker, and what it leaves to the CLI.

``ENGINE`` is this module as an :class:`imagekit.engines.Engine` (what build, check, base and the
pipeline ask of whichever engine the user picked). The functions below are also the Docker-only
gateway that export, launch and report use directly:

- ``client()``: the Engine API connection (``docker`` package). The first one in a
  process sweeps what killed imagekit processes left (``leases.sweep_engine``).
- ``image_id(ref)``: only the image's ID, over the engine's unix socket without loading
  the ``docker`` package (the export store's hit path must stay fast).
- ``inspect(ref)``: an image's id, labels, size, config and history, with the one
  "image not found" error (``ImageMissing``). ``image_exists``, ``image_labels`` and
  ``tag`` use the same calls. report, check, export, build and inside-out look
  images up this way.
- ``throwaway(image, ...)``: a container that carries the owner label (so the next
  run sweeps it when this one is killed) and is removed however the ``with`` body
  ends. check execs its checks in one, export streams one out, and preflight's probe
  is ``run_once(image, argv)``, one command in one.
- ``remove_labelled(label, value)``: removes the containers and networks a command
  labelled (inside-out and mpirun jobs, ``imagekit launch cleanup``); with ``timeout=``
  it ends in bounded time and names what is left (``Unfinished``), for a launcher's
  Ctrl-C. ``bounded_client(seconds)`` is a client whose calls give up after that long.
- ``docker_cli()``: the CLI's path. Debian's ``/usr/bin/docker`` has BuildKit built
  in; ``/usr/local/bin/docker`` on some machines lacks the buildx plugin and refuses
  BuildKit builds, so the CLI is resolved explicitly.
- ``build_argv(...)``: the BuildKit ``docker build`` command line; :mod:`imagekit.build` runs it
  and reads its ``--progress=plain`` lines.

Callers still build their own ``docker`` argv (with the path from ``docker_cli()``)
where output streams through a pipe or a script runs it: ``docker import`` (base_image),
``docker export`` (export.squash), ``docker tag`` and ``docker push`` (export.push),
``docker exec`` in the workers (launch.inside_out) and the ``docker run`` lines of mpirun's
rank scripts. ``launch.inside_out`` also starts its network and workers and watches them itself,
with a ``bounded_client``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterator, Sequence

from imagekit.util import known_errors, leases
from imagekit.engines import docker_socket
from imagekit.engines.image import LOCAL_STORE, BuildCommand, Image, ImageMissing, ModuleEngine
from imagekit.util.errors import EngineError

if TYPE_CHECKING:
    import docker

SETUP_HINT = known_errors.ENGINE_DOWN.fix
# What an idle throwaway runs: a shell that waits until the container is removed.
IDLE = ("/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done")
# Hardware a check may need, and what offering it to a container means.
DEVICES = {"gpu": ("--gpus", "all"), "fabric": ("--device", "/dev/infiniband", "--ulimit", "memlock=-1")}


@functools.lru_cache(maxsize=1)
def client():
    """A connected ``docker.DockerClient``; raises EngineError with the fix if none answers."""
    import docker  # heavy: imported only when an engine is needed

    try:
        c = docker.from_env(timeout=600)
        c.ping()
    except Exception as exc:  # docker raises several unrelated types here
        why = _why(exc)
        if why == PERMISSION_DENIED:
            raise known_errors.ENGINE_NO_GROUP.error(host=_host()) from None
        raise known_errors.ENGINE_DOWN.error(host=_host(), why=why) from None

    try:
        leases.sweep_engine(c)  # containers and networks of imagekit runs that were killed
    except Exception:  # noqa: BLE001 - sweeping is best effort; the command goes on
        pass
    return c


def docker_cli() -> str:
    """Path of a docker CLI that can run BuildKit builds (Debian's, with BuildKit built in)."""
    override = os.environ.get("IMAGEKIT_DOCKER")
    for candidate in ([override] if override else []) + ["/usr/bin/docker"]:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("docker")
    if found is None:
        raise EngineError("no docker client found", SETUP_HINT)
    return found


def available() -> bool:
    """True when a Docker engine answers (without raising): callers that can do without one."""
    try:
        client()
        return True
    except EngineError:
        return False


# --- images -----------------------------------------------------------------------------------

def inspect(ref: str) -> Image:
    """The image ``ref``; ImageMissing when the local engine does not have it."""
    import docker.errors

    try:
        attrs = client().api.inspect_image(ref)
    except docker.errors.ImageNotFound:
        raise ImageMissing(ref) from None
    except docker.errors.APIError as exc:
        raise EngineError(f"the engine refused to inspect {ref!r}: {exc.explanation or exc}") from None
    config = attrs.get("Config") or {}
    return Image(ref=ref, id=attrs["Id"], labels=dict(config.get("Labels") or {}),
                 size=int(attrs.get("Size") or 0), config=config, attrs=attrs, layers=_history)


def _history(image_id: str) -> list[dict[str, Any]]:
    return client().api.history(image_id)


def image_id(ref: str) -> str:
    """The image's ID (``sha256:…``, its config digest); ImageMissing when absent."""
    return image_attrs(ref)["Id"]


def image_attrs(ref: str) -> dict[str, Any]:
    """The image's inspect document (Id, Architecture, Os, ...); ImageMissing when absent.

    Asks the engine's unix socket directly with the standard library (a few ms,
    :mod:`imagekit.engines.docker_socket`), because importing the ``docker`` package alone costs more
    than an export store hit may take; any other engine address (tcp, ssh, TLS) goes through
    :func:`inspect`.
    """
    sock = docker_socket.socket_path()
    if sock is not None:
        try:
            status, body = docker_socket.call(sock, "GET", docker_socket.path("images", ref, "json"), timeout=30)
        except (OSError, EngineError):
            status = 0   # no socket there, or not HTTP: the docker package gives the one clear error
        if status == 404:
            raise ImageMissing(ref)
        if status == 200:
            return json.loads(body)
    return inspect(ref).attrs


def image_exists(ref: str) -> bool:
    try:
        inspect(ref)
        return True
    except ImageMissing:
        return False


def image_labels(ref: str) -> dict[str, str]:
    """The image's labels; ImageMissing naming the image when it is not there."""
    return inspect(ref).labels


def pull(ref: str, log: Callable[[str], None] | None = None) -> str:
    """``docker pull ref`` (the engine's own registry settings and credentials); returns the image ID."""
    docker = docker_cli()
    proc = subprocess.run([docker, "pull", "--quiet", ref], capture_output=True, text=True)
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EngineError(f"docker pull {ref} failed: {detail}",
                          "check the reference and the engine's access to the registry")
    if log is not None:
        log(f"pulled {ref}")
    return inspect(ref).id


def tag(image: str, name: str) -> None:
    """Tag ``image`` (an id or a name) as ``name`` (``repo[:tag]``, ``:latest`` when no tag)."""
    repo, _, version = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "latest")
    client().api.tag(image, repo, version)


def remove(*refs: str) -> None:
    """Untag/remove images; ones that are not there are skipped."""
    for ref in refs:
        subprocess.run([docker_cli(), "rmi", "-f", ref], capture_output=True)


def version() -> str:
    """``docker VERSION`` for a build's provenance; ``docker`` when the engine does not say."""
    try:
        return f"docker {client().version().get('Version', '?')}"
    except (EngineError, OSError):
        return "docker"


# --- building -----------------------------------------------------------------------------------

def build_argv(build: BuildCommand) -> list[str]:
    """The BuildKit ``docker build``: ``--progress=plain`` (its lines are what build reads), the image
    ID to ``iidfile`` (tagged only after the build succeeded), ``--secret id=…,src=…`` for
    ``RUN --mount=type=secret``, and the registry cache (``cache_from``, ``inline_cache``)."""
    cmd = [docker_cli(), "build", "--progress=plain", "--target", build.target, "--platform", build.platform,
           "--iidfile", build.iidfile, "-f", build.dockerfile]
    cmd += [a for k, v in sorted(build.labels.items()) for a in ("--label", f"{k}={v}")]
    if build.no_cache:
        cmd.append("--no-cache")
    for ref in build.cache_from:  # e.g. the previous CI image, pushed with inline cache
        cmd += ["--cache-from", ref]
    if build.inline_cache:
        cmd += ["--build-arg", "BUILDKIT_INLINE_CACHE=1"]
    for sid, src in build.secrets.items():
        cmd += ["--secret", f"id={sid},src={src}"]
    cmd.append(build.context)
    return cmd


def build_env() -> dict[str, str]:
    """The environment of ``docker build``: BuildKit, with its plain progress lines."""
    return {**os.environ, "DOCKER_BUILDKIT": "1", "BUILDKIT_PROGRESS": "plain"}


# --- throwaway containers -----------------------------------------------------------------------

@contextlib.contextmanager
def throwaway(image: str, command: Sequence[str] = (), *, entrypoint: str | None = None,
              options: Sequence[str] = (), idle: bool = False, purpose: str = "tmp") -> Iterator[str]:
    """A container of ``image``, removed (with its anonymous volumes) however the body ends.

    Yields the container's id. It carries the owner label (:mod:`imagekit.util.leases`), so
    when this process is killed the next imagekit command sweeps it. ``options`` are
    ``docker create`` options (``--network none``, ``--gpus all``). The container is only
    created, for ``docker export`` or ``docker start -a``; ``idle=True`` starts it with a
    shell that waits (``IDLE``), for ``docker exec``. An image with neither ENTRYPOINT
    nor CMD, given no command, gets ``/bin/sh`` as a placeholder.
    """
    client()  # a clear error when no engine answers; sweeps what dead owners left
    cli = docker_cli()
    if idle:
        entrypoint, command = IDLE[0], IDLE[1:]
    create = [cli, "create", "--name", f"imagekit-{purpose}-{uuid.uuid4().hex[:12]}", *leases.label_args(),
              *(["--entrypoint", entrypoint] if entrypoint is not None else []), *options, image]
    made = subprocess.run([*create, *command], capture_output=True, text=True)
    if made.returncode != 0 and not command and entrypoint is None \
            and "no command specified" in made.stderr.lower():
        # The command does not change what `docker export` sees; give a placeholder.
        made = subprocess.run([*create, "/bin/sh"], capture_output=True, text=True)
    if made.returncode != 0:
        raise EngineError(f"cannot create a container of {image}: {made.stderr.strip()}")
    container = made.stdout.strip()
    try:
        if idle:
            started = subprocess.run([cli, "start", container], capture_output=True, text=True)
            if started.returncode != 0:
                raise EngineError(f"cannot start a container of {image}: {started.stderr.strip()}")
        yield container
    finally:
        subprocess.run([cli, "rm", "-f", "-v", container], capture_output=True)


@contextlib.contextmanager
def exported(image: str, purpose: str = "export") -> Iterator[BinaryIO | None]:
    """``docker export`` of a throwaway container of ``image``, as one stream read straight from the
    engine's unix socket (:func:`docker_socket.stream`): no ``docker`` package, no CLI process and no
    copy through one. The container carries the owner label and is removed however the body ends,
    as :func:`throwaway`'s; what dead owners left is swept first. Yields None where the engine is
    not on a local socket (the caller runs the CLI, :func:`throwaway`)."""
    sock = docker_socket.socket_path()
    if sock is None:
        yield None
        return
    container = _create(sock, image, purpose)
    try:
        with docker_socket.stream(sock, docker_socket.path("containers", container, "export")) as body:
            yield body
    finally:
        with contextlib.suppress(OSError, EngineError):
            docker_socket.call(sock, "DELETE", docker_socket.path("containers", container, v=1, force=1))


def _create(sock: str, image: str, purpose: str) -> str:
    """A created (never started) container of ``image`` with the owner label, through the socket."""
    try:
        with contextlib.suppress(EngineError, ValueError):   # best effort, as client()'s sweep
            _sweep(sock)
        name = docker_socket.path("containers", "create", name=f"imagekit-{purpose}-{uuid.uuid4().hex[:12]}")
        spec: dict[str, Any] = {"Image": image, "Labels": leases.labels()}
        try:
            return docker_socket.json_call(sock, "POST", name, spec, ok=(201,))["Id"]
        except docker_socket.EngineRefused as exc:
            if exc.status != 400 or "no command specified" not in str(exc).lower():
                raise
            # The command does not change what `docker export` sees; give a placeholder.
            return docker_socket.json_call(sock, "POST", name, {**spec, "Cmd": ["/bin/sh"]}, ok=(201,))["Id"]
    except docker_socket.EngineRefused as exc:
        if exc.status == 404:
            raise ImageMissing(image) from None
        raise EngineError(f"cannot create a container of {image}: {exc}") from None
    except OSError as exc:
        raise EngineError(f"no Docker engine answers at {_host()}: {_why(exc)}", SETUP_HINT) from None


def _sweep(sock: str) -> None:
    """:func:`leases.sweep_engine` over the socket: containers and networks of dead owners go."""
    flt = json.dumps({"label": [leases.LABEL]})
    for kind, listing in (("containers", docker_socket.path("containers", "json", all=1, filters=flt)),
                          ("networks", docker_socket.path("networks", filters=flt))):
        for item in docker_socket.json_call(sock, "GET", listing) or []:
            if not leases.alive((item.get("Labels") or {}).get(leases.LABEL, "")):
                gone = docker_socket.path(kind, item["Id"], **({"force": 1} if kind == "containers" else {}))
                with contextlib.suppress(OSError, EngineError):   # gone already, or still in use
                    docker_socket.call(sock, "DELETE", gone)


def run_once(image: str, argv: Sequence[str], *, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` (its first word replaces the image's ENTRYPOINT) in a throwaway container of
    ``image``; its exit code and output. EngineError when it cannot start or outlives ``timeout``."""
    with throwaway(image, argv[1:], entrypoint=argv[0], purpose="run") as container:
        try:
            return subprocess.run([docker_cli(), "start", "-a", container], capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise EngineError(f"{argv[0]} in a container of {image} ran longer than {timeout} s") from None


# --- what a command created ---------------------------------------------------------------------

class Unfinished(EngineError):
    """The engine did not finish removing what a command labelled. ``pending``: what it listed and
    did not confirm removed ("container NAME", "network NAME"); ``unlisted``: the kinds
    ("containers", "networks") whose list never came back, so any of them may be left too."""

    def __init__(self, message: str, pending: list[str], unlisted: list[str]) -> None:
        super().__init__(message)
        self.pending, self.unlisted = pending, unlisted


def bounded_client(seconds: float) -> docker.DockerClient:
    """A ``docker.DockerClient`` whose every call gives up after ``seconds``; no ping, no sweep.

    ``client()`` lets a call take 600 s, which builds and pushes need; a cleanup that must end
    when the engine is overloaded needs its own limit. EngineError when no engine answers in time.
    """
    import docker

    try:
        return docker.from_env(timeout=seconds)   # asks the engine's API version: bounded too
    except Exception as exc:  # docker raises several unrelated types here
        raise EngineError(f"no Docker engine answers within {seconds:g} s ({_short(exc)})", SETUP_HINT) from None


def remove_labelled(label: str, value: str | None = None, *, timeout: float | None = None) -> int:
    """Remove every container, then every network, whose ``label`` is ``value`` (any value when
    None); returns how many went. Ones already gone, or still in use, are skipped.

    With ``timeout``, the whole removal takes at most about that many seconds (each engine call
    gets what is left). Unfinished, naming what may be left, when the engine does not answer in
    time or at all.
    """
    import docker.errors
    import requests.exceptions

    flt = {"label": label if value is None else f"{label}={value}"}
    deadline = None if timeout is None else time.monotonic() + timeout
    c = client() if timeout is None else None
    pending: list[str] = []
    unlisted = ["containers", "networks"]
    removed = 0

    def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{timeout:g} s spent")
            c.api.timeout = left    # read by docker for each request
        return fn(*args, **kwargs)

    try:
        if c is None:
            c = bounded_client(timeout)
        # sparse: the list itself, without inspecting each container, which fails for one removed meanwhile.
        containers = call(c.containers.list, all=True, filters=flt, sparse=True)
        unlisted.remove("containers")
        names = [f"container {(x.attrs.get('Names') or [x.id])[0].lstrip('/')}" for x in containers]
        pending += names
        for container, what in zip(containers, names):
            try:
                call(container.remove, force=True, v=True)
                removed += 1
            except docker.errors.APIError:  # already gone (--rm, a concurrent cleanup)
                pass
            pending.remove(what)
        networks = call(c.networks.list, filters=flt)
        unlisted.remove("networks")
        pending += [f"network {n.name}" for n in networks]
        for network in networks:
            try:
                call(network.remove)
                removed += 1
            except docker.errors.APIError:  # gone, or a container of someone else still uses it
                pass
            pending.remove(f"network {network.name}")
    except (EngineError, docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        # A timeout and a vanished engine alike: the caller says what is left and how it goes.
        timed_out = isinstance(exc, (requests.exceptions.Timeout, TimeoutError))
        why = f" within {timeout:g} s" if timed_out and timeout is not None else f" ({_short(exc)})"
        raise Unfinished(f"the engine did not finish removing what carries {flt['label']}{why}",
                         pending, unlisted) from None
    return removed


def _host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


# What _why says for a socket this user may not open (ENGINE_NO_GROUP's message says it in full).
PERMISSION_DENIED = "permission denied"


def _why(exc: BaseException) -> str:
    """The cause under the docker library's wrapping, as words: not a Python exception's repr."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or e in seen:
            continue
        seen.append(e)
        if isinstance(e, FileNotFoundError):
            return "there is no socket there (is the engine running?)"
        if isinstance(e, PermissionError):
            return PERMISSION_DENIED
        if isinstance(e, ConnectionRefusedError):
            return "connection refused (is the engine running?)"
        todo += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
        todo += [e.__cause__, e.__context__]
        reason = getattr(e, "reason", None)
        if isinstance(reason, BaseException):
            todo.append(reason)
    return _short(exc)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1][:200] if text else type(exc).__name__


# --- the engine ---------------------------------------------------------------------------------

class Docker(ModuleEngine):
    """The Docker engine as an :class:`imagekit.engines.Engine`: this module's functions (ModuleEngine),
    and what is Docker's own."""

    module = __name__
    name = "docker"
    title = "Docker"
    store = LOCAL_STORE
    testinfra_backend = "docker"        # testinfra's docker:// backend, through the docker CLI
    build_log = "buildkit"              # --progress=plain lines
    registry_cache = True               # --cache-from, --inline-cache
    foreign_bases = True                # imports a base of another architecture (docker load)
    devices = DEVICES

    def cli(self) -> str:
        return docker_cli()

    def preflight(self) -> None:
        """The one clear error when no engine answers; sweeps what killed runs left."""
        client()

    def available(self) -> bool:
        return available()

    def version(self) -> str:
        return version()

    def dockerfile(self, text: str) -> str:
        return text                     # BuildKit runs the rendered Dockerfile as it is

    def export_source(self, name: str, image_id: str, *, pinned: bool = False) -> str:
        """The exporter reads the engine's image by name, or by ID when ``pinned`` (what is signed is
        the image just built: a tag another build moves meanwhile would be misnamed)."""
        return image_id if pinned else name

    def command(self, words: str) -> str:
        return words                    # the default engine: no --engine

    def copy_hint(self, ref: str) -> str | None:
        return None                     # the store other engines copy from


ENGINE = Docker()
