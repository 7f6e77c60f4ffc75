"""Offline base images: bootstrap a minimal root filesystem and import it.

This is how an air-gapped site (and CI here) gets a base image without a
registry: ``mmdebstrap --variant=minbase`` when it is installed (it streams a
tarball straight into the import, no unpacked copy), else ``debootstrap
--variant=minbase``, from a distro mirror, then ``docker import`` with a CMD
(Enroot and Pyxis refuse an image without one), a PATH, and labels recording
where the filesystem came from. Both give the same package set (mmdebstrap with
its merged-/usr hook, as debootstrap does it), the keep-debs apt setting and no
apt lists.

``arch`` (``aarch64``/``arm64``) bootstraps another architecture's root filesystem from the same
archive: debootstrap and mmdebstrap run its maintainer scripts through Debian's
``qemu-user-static`` (binfmt_misc, :mod:`imagekit.util.emulation` checks it first), and the import
records the architecture in the image config, so that ``docker build --platform linux/arm64``
takes it. Its tag carries the architecture (``imagekit/debian:bookworm-arm64``,
:func:`imagekit.util.platforms.local_tag`): it never replaces the amd64 image of the same suite.

``engine_name="podman"`` imports the same stream with ``podman import`` into the calling
user's Podman store. As a user, that needs mmdebstrap: its unshare mode bootstraps in a user
namespace through newuidmap and the user's subordinate ids, as rootless Podman does;
debootstrap needs root. A user can also copy the Docker engine's image:
``docker save imagekit/debian:bookworm | podman load``.
"""

from __future__ import annotations

import collections
import datetime as _dt
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from imagekit import engines
from imagekit.util import docker_archive, emulation, platforms, quoting
from imagekit.util.errors import ImagekitError, UsageError
from imagekit.image_facts import reader, writer

# distro -> (suites known to debootstrap, the apt source file pattern to find a mirror)
KNOWN = {
    "debian": ("bullseye", "bookworm", "trixie"),
    "ubuntu": ("focal", "jammy", "noble"),
}
DEFAULT_REPO = "imagekit"
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Kept so that BuildKit cache mounts of /var/cache/apt hold the downloaded .debs.
APT_KEEP = 'Binary::apt::APT::Keep-Downloaded-Packages "true";\n'
APT_KEEP_FILE = "01imagekit-keep-debs"
BOOTSTRAPPERS = ("auto", "mmdebstrap", "debootstrap")
MERGED_USR_HOOKS = Path("/usr/share/mmdebstrap/hooks/maybe-merged-usr")


@dataclass(frozen=True)
class BaseSpec:
    distro: str
    suite: str
    mirror: str
    tag: str
    components: tuple[str, ...] = ("main",)
    arch: str = "x86_64"                      # the stack's spelling: x86_64, aarch64

    @property
    def debian_arch(self) -> str:
        return platforms.oci_name(self.arch)     # Debian's names are OCI's: amd64, arm64


def image_tag(name: str, arch: str = "x86_64") -> str:
    """``debian:bookworm`` -> ``imagekit/debian:bookworm`` (the local tag stacks refer to);
    for arm64 ``imagekit/debian:bookworm-arm64``."""
    distro, _, suite = name.partition(":")
    return platforms.local_tag(f"{DEFAULT_REPO}/{distro}:{suite}", arch)


def parse_arch(text: str | None) -> str:
    """``--arch``: amd64/x86_64 or arm64/aarch64 (default: this machine's) -> the stack's spelling."""
    if not text:
        host = platforms.stack_name(platforms.host_machine())
        return host if host in platforms.ARCHES else "x86_64"
    arch = platforms.stack_name(text)
    if arch not in platforms.ARCHES:
        raise UsageError(f"unknown architecture {text!r}",
                         "use one of: " + ", ".join(f"{a.oci} ({a.stack})" for a in platforms.ARCHES.values()))
    return arch


# The archive areas each distro has; non-free holds NVIDIA's CUDA toolkit on Debian.
COMPONENTS = {"debian": ("main", "contrib", "non-free", "non-free-firmware"),
              "ubuntu": ("main", "restricted", "universe", "multiverse")}


def parse(name: str, mirror: str | None = None, tag: str | None = None,
          components: tuple[str, ...] = ("main",), arch: str | None = None) -> BaseSpec:
    distro, _, suite = name.partition(":")
    if distro not in KNOWN or not suite:
        valid = ", ".join(f"{d}:{s}" for d, ss in KNOWN.items() for s in ss)
        raise UsageError(f"unknown base {name!r}", f"use one of: {valid}")
    if suite not in KNOWN[distro]:
        raise UsageError(f"unknown {distro} suite {suite!r}", f"use one of: {', '.join(KNOWN[distro])}")
    mirror = mirror or os.environ.get(f"IMAGEKIT_{distro.upper()}_MIRROR") or host_mirror(distro)
    if not mirror:
        raise UsageError(f"no {distro} mirror configured",
                         f"pass --mirror URL or set IMAGEKIT_{distro.upper()}_MIRROR")
    # It becomes a field of an apt sources line and a label: one URL, no whitespace.
    if not re.fullmatch(r"(https?|file)://[^\s'\"\\$`]+", quoting.no_control(mirror, "base image", "mirror")):
        raise quoting.UnsafeValue("base image", "mirror", mirror, "is not a mirror URL",
                                  "write http://HOST/PATH or file:///PATH, without spaces or quotes")
    bad = [c for c in components if c not in COMPONENTS[distro]]
    if bad or "main" not in components:
        raise UsageError(f"invalid {distro} components {','.join(components)!r}",
                         f"use main plus any of: {', '.join(COMPONENTS[distro][1:])} "
                         "(e.g. main,contrib,non-free)")
    arch = parse_arch(arch)
    return BaseSpec(distro, suite, mirror.rstrip("/"), tag or image_tag(name, arch), tuple(components), arch)


def host_mirror(distro: str, apt_dir: Path = Path("/etc/apt")) -> str | None:
    """The host's own apt mirror for ``distro`` (so no mirror host is hard-coded)."""
    texts = []
    for path in [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*"))]:
        if path.is_file() and path.suffix in ("", ".list", ".sources"):
            try:
                texts.append(path.read_text())
            except OSError:
                continue
    pattern = re.compile(rf"(?:URIs:\s*|^deb\s+(?:\[[^\]]*\]\s+)?)(\S+/{distro})\s", re.M)
    for text in texts:
        for match in pattern.finditer(text + "\n"):
            return match.group(1)
    return None


@dataclass(frozen=True)
class BaseRequest:
    """What ``imagekit base`` is asked for: ``name`` (``debian:bookworm``), the apt ``mirror`` (default:
    the host's), the image ``tag``, apt ``components``, the engine, the bootstrapper (``mmdebstrap``,
    ``debootstrap``, or ``auto``: mmdebstrap when installed) and ``arch`` (x86_64/amd64 or
    aarch64/arm64; default this machine's: another needs binfmt emulation, checked before anything
    runs). ``force`` makes it again even when an image with that tag exists."""

    name: str
    mirror: str | None = None
    tag: str | None = None
    force: bool = False
    components: tuple[str, ...] = ("main",)
    engine_name: str = "docker"
    bootstrapper: str = "auto"
    arch: str | None = None


def ensure(request: BaseRequest, *, log: Callable[[str], None] = print) -> str:
    """Make the base image unless an image with that tag already exists; return its tag."""
    name, bootstrapper, engine_name = request.name, request.bootstrapper, request.engine_name
    if bootstrapper not in BOOTSTRAPPERS:
        raise UsageError(f"unknown bootstrapper {bootstrapper!r}", f"use one of: {', '.join(BOOTSTRAPPERS)}")
    spec = parse(name, request.mirror, request.tag, request.components, request.arch)
    images = engines.of(engine_name)
    if not request.force and images.image_exists(spec.tag):
        had = ",".join(reader.read(spec.tag, engine_name).base_components) or "main"
        had_arch = platforms.stack_name(images.inspect(spec.tag).attrs.get("Architecture") or "amd64")
        if had == ",".join(spec.components) and had_arch == spec.arch:
            log(f"base image {spec.tag} exists; reusing it (--force to rebuild)")
            return spec.tag
        if had_arch != spec.arch:
            log(f"base image {spec.tag} is {had_arch}; rebuilding it for {spec.arch}")
        else:
            log(f"base image {spec.tag} has components {had}; rebuilding it with {','.join(spec.components)}")
    if not images.foreign_bases and spec.arch != "x86_64":
        copy = images.copy_hint(spec.tag)
        raise UsageError(f"an {spec.arch} base image is made with the Docker engine only",
                         f"make it there and copy it: imagekit base {name} --arch {spec.debian_arch}"
                         + (f"; {copy}" if copy else ""))
    emulation.require(spec.arch, f"bootstrapping {name} for {spec.debian_arch}")
    chosen = _pick(bootstrapper, images, spec.tag)
    if chosen == "mmdebstrap" and spec.arch != platforms.stack_name(platforms.host_machine()) \
            and not shutil.which("arch-test"):
        # mmdebstrap checks a foreign architecture with arch-test, and refuses without it.
        raise ImagekitError(f"mmdebstrap needs arch-test to bootstrap {spec.debian_arch}",
                            "apt-get install arch-test (scripts/setup-emulation.sh does), or --bootstrap debootstrap")
    _bootstrap_and_import(spec, log, images, chosen)
    return spec.tag


def _pick(bootstrapper: str, images: engines.Engine, tag: str) -> str:
    """The bootstrapper to run, or the one error saying what to install, before anything runs."""
    has_mm = shutil.which("mmdebstrap") is not None
    if bootstrapper == "auto":
        bootstrapper = "mmdebstrap" if has_mm else "debootstrap"
    if bootstrapper == "debootstrap" and os.geteuid() != 0:
        copy = images.copy_hint(tag)
        if copy:    # an engine of the user's own (rootless), which can take Docker's image instead
            raise ImagekitError(f"a rootless {images.title} base image needs mmdebstrap (debootstrap needs root)",
                                f"apt-get install mmdebstrap, or copy Docker's image: `{copy}`")
        raise ImagekitError("a base image made as a user needs mmdebstrap (debootstrap needs root)",
                            "apt-get install mmdebstrap, or run `imagekit base` as root")
    if bootstrapper == "mmdebstrap" and not has_mm:
        raise ImagekitError("mmdebstrap is not installed", "apt-get install mmdebstrap")
    if bootstrapper == "debootstrap" and not shutil.which("debootstrap"):
        raise ImagekitError("neither mmdebstrap nor debootstrap is installed", "apt-get install debootstrap")
    # The engine's own check before anything runs. Podman's is mmdebstrap's too: its unshare mode
    # maps the image's ids through the user's subordinate ranges, as Podman does (newuidmap,
    # /etc/subuid, with the fix). Docker's has answered already (the image_exists above).
    images.preflight()
    return bootstrapper


def mmdebstrap_argv(spec: BaseSpec) -> list[str]:
    """The mmdebstrap command that streams ``spec``'s root filesystem as a tar to stdout.

    As a user, ``--mode=unshare`` (a user namespace through newuidmap and the subordinate ids:
    files owned by root in the tar, no privilege); named, so that a host without subordinate ids
    fails with unshare's error rather than falling back to fakechroot's wrong permissions. As
    root, ``auto`` (its root mode, chroot as debootstrap does).
    """
    argv = ["mmdebstrap", "--variant=minbase", f"--mode={'unshare' if os.geteuid() != 0 else 'auto'}",
            f"--components={','.join(spec.components)}", f"--architectures={spec.debian_arch}"]
    # debootstrap makes /usr merged with symlinks and installs usr-is-merged; without this hook
    # mmdebstrap satisfies init-system-helpers' "usrmerge | usr-is-merged" with usrmerge, which
    # drags perl into the image. The hook does what debootstrap does where the suite has
    # usr-is-merged (Debian 12 and later) and nothing elsewhere; on Debian 13, where nothing
    # needs usr-is-merged any more, it stays installed (one package more than debootstrap's).
    if MERGED_USR_HOOKS.is_dir():
        argv.append(f"--hook-dir={MERGED_USR_HOOKS}")
    # The hook runs before mmdebstrap's own cleanup, which empties /var/lib/apt/lists and
    # /var/cache/apt/archives (as the debootstrap path below does by hand).
    argv.append(f"--customize-hook=echo '{APT_KEEP.strip()}' > \"$1/etc/apt/apt.conf.d/{APT_KEEP_FILE}\"")
    return [*argv, spec.suite, "-", spec.mirror]


def _bootstrap_and_import(spec: BaseSpec, log, images: engines.Engine = engines.of("docker"),
                          bootstrapper: str = "mmdebstrap") -> None:
    created = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    labels = {"org.opencontainers.image.title": f"{spec.distro}-{spec.suite}-minbase",
              "org.opencontainers.image.created": created,
              **writer.base_labels(spec.distro, spec.suite, spec.mirror, list(spec.components))}
    changes = [
        'CMD ["/bin/bash"]',
        f"ENV PATH={PATH_ENV}",
        "ENV LANG=C.UTF-8",
    ]
    changes += [f"LABEL {key}={quoting.dockerfile_string(value, 'base image', key)}" for key, value in labels.items()]
    cli = images.cli()
    # Imported untagged, tagged once the producer has succeeded: a bootstrap that fails half-way
    # leaves no tag that the next `ensure` would reuse.
    import_cmd = [cli, "import"]
    for change in changes:
        import_cmd += ["--change", change]
    import_cmd.append("-")
    # `import` records the engine's own architecture: another one is loaded as a docker-archive
    # whose config says it (imagekit.util.docker_archive), the rootfs spooled to a file on the way.
    foreign = spec.arch != platforms.stack_name(platforms.host_machine())

    def finish(producer: subprocess.Popen, what: str, workdir: Path) -> None:
        if foreign:
            _run_load(cli, producer, what, spec, created, labels, workdir / "layer.tar", log)
        else:
            _run_import(cli, import_cmd, producer, what, spec.tag, log)

    workdir = Path(tempfile.mkdtemp(prefix="imagekit-base-"))
    try:
        if bootstrapper == "mmdebstrap":
            mode = "rootless, unshare mode" if os.geteuid() != 0 else "as root"
            log(f"bootstrapping {spec.distro}:{spec.suite} ({spec.debian_arch}) from {spec.mirror} with "
                f"mmdebstrap ({mode}, streamed into {images.name} {'load' if foreign else 'import'})")
            boot = subprocess.Popen(mmdebstrap_argv(spec), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            finish(boot, "mmdebstrap", workdir)
            return
        rootfs = workdir / "rootfs"
        log(f"bootstrapping {spec.distro}:{spec.suite} ({spec.debian_arch}) from {spec.mirror} with debootstrap"
            + (" (its maintainer scripts through qemu-user-static)" if foreign else ""))
        proc = subprocess.run(["debootstrap", "--variant=minbase", f"--components={','.join(spec.components)}",
                               f"--arch={spec.debian_arch}", spec.suite, str(rootfs), spec.mirror],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            tail = "\n".join(proc.stdout.splitlines()[-15:])
            raise ImagekitError(f"debootstrap failed (exit {proc.returncode}):\n{tail}",
                                "check the mirror with --mirror URL")
        (rootfs / "etc/apt/apt.conf.d" / APT_KEEP_FILE).write_text(APT_KEEP)
        for sub in ("var/lib/apt/lists", "var/cache/apt/archives"):
            for entry in (rootfs / sub).glob("*"):
                if entry.is_file():
                    entry.unlink()
        log(f"importing as {spec.tag}")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", "-", "."],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        finish(tar, "tar", workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _relay(producer: subprocess.Popen, what: str, log) -> tuple[threading.Thread, collections.deque]:
    """Pass the producer's status lines (mmdebstrap's ``I:``/``W:``/``E:``) to ``log`` as they
    come, so a minute of bootstrapping shows its progress; the rest is kept for the error."""
    tail: collections.deque[str] = collections.deque(maxlen=15)

    def relay() -> None:
        for raw in producer.stderr:
            line = raw.decode(errors="replace").rstrip()
            tail.append(line)
            if line[:3] in ("I: ", "W: ", "E: "):
                log(f"  {what}: {line[3:]}")

    thread = threading.Thread(target=relay, daemon=True)
    thread.start()
    return thread, tail


def _run_load(cli: str, producer: subprocess.Popen, what: str, spec: BaseSpec, created: str,
              labels: dict[str, str], layer: Path, log) -> None:
    """Spool ``producer``'s root filesystem tar to ``layer``, then ``docker load`` it as a
    one-layer image whose config names ``spec.arch``; tag it only when everything succeeded."""
    thread, tail = _relay(producer, what, log)
    try:
        with open(layer, "wb") as fh:
            shutil.copyfileobj(producer.stdout, fh, 1 << 20)
    finally:
        producer.stdout.close()
        producer_rc = producer.wait()
        thread.join()
    if producer_rc != 0:
        raise ImagekitError(f"{what} failed (exit {producer_rc}); no image was tagged:\n"
                            + ("\n".join(tail) or "no output"), "check the mirror with --mirror URL")
    log(f"loading the {spec.debian_arch} root filesystem ({layer.stat().st_size / 1e6:.0f} MB) as {spec.tag}")
    cfg = docker_archive.ImageConfig(
        architecture=spec.debian_arch, diff_id=docker_archive.sha256_file(layer), created=created,
        cmd=["/bin/bash"], env=[f"PATH={PATH_ENV}", "LANG=C.UTF-8"], labels=labels,
        history=f"imagekit base {spec.distro}:{spec.suite} --arch {spec.debian_arch}").document()
    load = subprocess.Popen([cli, "load"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        image_id = docker_archive.write(load.stdin, layer, cfg)
    except BrokenPipeError:       # load gave up: its stderr says why
        image_id = ""
    out, err = load.communicate()   # closes stdin: the end of the archive
    loaded = out.decode(errors="replace")
    if load.returncode != 0 or image_id.split(":", 1)[-1] not in loaded:
        raise ImagekitError(f"loading the {spec.debian_arch} base image failed: "
                            f"{err.decode(errors='replace').strip() or loaded.strip() or 'no image id'}")
    _tag(cli, image_id, spec.tag, log)


def _run_import(cli: str, import_cmd: list[str], producer: subprocess.Popen, what: str, tag: str, log) -> None:
    """Stream ``producer``'s stdout into ``import_cmd``; tag the image only when both succeed."""
    reader_thread, tail = _relay(producer, what, log)
    try:
        imp = subprocess.run(import_cmd, stdin=producer.stdout, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    finally:
        producer.stdout.close()
        producer_rc = producer.wait()
        reader_thread.join()
    image_id = imp.stdout.strip().splitlines()[-1] if imp.returncode == 0 and imp.stdout.strip() else ""
    if producer_rc != 0 or imp.returncode != 0 or not image_id:
        if image_id:
            subprocess.run([cli, "rmi", "-f", image_id], capture_output=True)
        if producer_rc != 0:
            detail = "\n".join(tail) or "no output"
            raise ImagekitError(f"{what} failed (exit {producer_rc}); no image was tagged:\n{detail}",
                                "check the mirror with --mirror URL")
        raise ImagekitError(f"importing the base image failed: {imp.stderr.strip() or 'no image id'}")
    _tag(cli, image_id, tag, log)


def _tag(cli: str, image_id: str, tag: str, log) -> None:
    tagged = subprocess.run([cli, "tag", image_id, tag], capture_output=True, text=True)
    if tagged.returncode != 0:
        subprocess.run([cli, "rmi", "-f", image_id], capture_output=True)
        raise ImagekitError(f"tagging the imported base image as {tag} failed: {tagged.stderr.strip()}")
    log(f"imported {tag} ({image_id.removeprefix('sha256:')[:12]})")
