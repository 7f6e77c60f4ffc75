"""Offline base images: bootstrap a minimal root filesystem and import it.

This is how an air-gapped site (and CI here) gets a base image without a
registry: ``debootstrap --variant=minbase`` (or ``mmdebstrap`` when present,
which streams a tarball and needs no unpacked copy) from a distro mirror, then
``docker import`` with a CMD (Enroot and Pyxis refuse an image without one),
a PATH, and labels recording where the filesystem came from.

``engine_name="podman"`` imports the same stream with ``podman import`` into the calling
user's Podman store. As a user, that needs mmdebstrap (its unshare mode bootstraps without
root); debootstrap needs root. A user can also copy the Docker engine's image:
``docker save imagekit/debian:bookworm | podman load``.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from imagekit import engine, engines, podman, quoting
from imagekit.errors import ImagekitError, UsageError
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


@dataclass(frozen=True)
class BaseSpec:
    distro: str
    suite: str
    mirror: str
    tag: str
    components: tuple[str, ...] = ("main",)


def image_tag(name: str) -> str:
    """``debian:bookworm`` -> ``imagekit/debian:bookworm`` (the local tag stacks refer to)."""
    distro, _, suite = name.partition(":")
    return f"{DEFAULT_REPO}/{distro}:{suite}"


# The archive areas each distro has; non-free holds NVIDIA's CUDA toolkit on Debian.
COMPONENTS = {"debian": ("main", "contrib", "non-free", "non-free-firmware"),
              "ubuntu": ("main", "restricted", "universe", "multiverse")}


def parse(name: str, mirror: str | None = None, tag: str | None = None,
          components: tuple[str, ...] = ("main",)) -> BaseSpec:
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
    return BaseSpec(distro, suite, mirror.rstrip("/"), tag or image_tag(name), tuple(components))


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


def ensure(name: str, *, mirror: str | None = None, tag: str | None = None, force: bool = False,
           components: tuple[str, ...] = ("main",), log=print, engine_name: str = "docker") -> str:
    """Make the base image unless an image with that tag already exists; return its tag."""
    spec = parse(name, mirror, tag, components)
    if not force and engines.of(engine_name).image_exists(spec.tag):
        had = ",".join(reader.read(spec.tag, engine_name).base_components) or "main"
        if had == ",".join(spec.components):
            log(f"base image {spec.tag} exists; reusing it (--force to rebuild)")
            return spec.tag
        log(f"base image {spec.tag} has components {had}; rebuilding it with {','.join(spec.components)}")
    _bootstrap_and_import(spec, log, engine_name)
    return spec.tag


def _bootstrap_and_import(spec: BaseSpec, log, engine_name: str = "docker") -> None:
    created = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    changes = [
        'CMD ["/bin/bash"]',
        f"ENV PATH={PATH_ENV}",
        "ENV LANG=C.UTF-8",
        f"LABEL org.opencontainers.image.title={spec.distro}-{spec.suite}-minbase",
        f"LABEL org.opencontainers.image.created={created}",
    ]
    changes += [f"LABEL {key}={quoting.dockerfile_string(value, 'base image', key)}" for key, value in
                writer.base_labels(spec.distro, spec.suite, spec.mirror, list(spec.components)).items()]
    if engine_name == "podman":
        import_cmd = [podman.cli(), "import"]
    else:
        import_cmd = [engine.docker_cli(), "import"]
    for change in changes:
        import_cmd += ["--change", change]
    import_cmd += ["-", spec.tag]

    if shutil.which("mmdebstrap"):
        log(f"bootstrapping {spec.distro}:{spec.suite} from {spec.mirror} with mmdebstrap (streamed)")
        boot = subprocess.Popen(
            ["mmdebstrap", "--variant=minbase", "--quiet", f"--components={','.join(spec.components)}",
             f"--customize-hook=echo '{APT_KEEP.strip()}' > \"$1/etc/apt/apt.conf.d/01imagekit-keep-debs\"",
             "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/*",
             spec.suite, "-", spec.mirror], stdout=subprocess.PIPE)
        _run_import(import_cmd, boot, log)
        return

    if engine_name == "podman" and os.geteuid() != 0:
        raise ImagekitError("a rootless Podman base image needs mmdebstrap (debootstrap needs root)",
                            "apt-get install mmdebstrap, or copy Docker's image: "
                            f"`docker save {spec.tag} | podman load`")
    if not shutil.which("debootstrap"):
        raise ImagekitError("neither mmdebstrap nor debootstrap is installed",
                            "apt-get install debootstrap")
    workdir = Path(tempfile.mkdtemp(prefix="imagekit-base-"))
    try:
        rootfs = workdir / "rootfs"
        log(f"bootstrapping {spec.distro}:{spec.suite} from {spec.mirror} with debootstrap")
        proc = subprocess.run(["debootstrap", "--variant=minbase", f"--components={','.join(spec.components)}",
                               spec.suite, str(rootfs), spec.mirror],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            tail = "\n".join(proc.stdout.splitlines()[-15:])
            raise ImagekitError(f"debootstrap failed (exit {proc.returncode}):\n{tail}",
                                "check the mirror with --mirror URL")
        (rootfs / "etc/apt/apt.conf.d/01imagekit-keep-debs").write_text(APT_KEEP)
        for sub in ("var/lib/apt/lists", "var/cache/apt/archives"):
            for entry in (rootfs / sub).glob("*"):
                if entry.is_file():
                    entry.unlink()
        log(f"importing as {spec.tag}")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", "-", "."],
                               stdout=subprocess.PIPE)
        _run_import(import_cmd, tar, log)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run_import(import_cmd: list[str], producer: subprocess.Popen, log) -> None:
    try:
        imp = subprocess.run(import_cmd, stdin=producer.stdout, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    finally:
        producer.stdout.close()
        producer_rc = producer.wait()
    if producer_rc != 0 or imp.returncode != 0:
        raise ImagekitError(f"importing the base image failed: {imp.stderr.strip() or f'producer exit {producer_rc}'}")
    log(f"imported {import_cmd[-1]} ({imp.stdout.strip()[:19]})")
