"""HPCCM glue shared by components: package installs that cache well and keep secrets out.

For Docker output, package and pip downloads go through BuildKit cache mounts
(rebuilds do not re-download) and pip reads the CA bundle from a BuildKit
secret (never a layer). For Singularity output the same commands render
without mounts, and clean up after themselves instead.
"""

from __future__ import annotations

from pathlib import Path

import hpccm.config
from hpccm.common import container_type
from hpccm.primitives import comment, copy, environment, shell

from imagekit.util import quoting
from imagekit.util import login_env

# The BuildKit secret Docker recipes mount the CA bundle from; `imagekit build` passes the bundle under it.
CA_SECRET_ID = "ca-bundle"
PIP_CACHE = "--mount=type=cache,target=/root/.cache/pip"
CA_SECRET = f"--mount=type=secret,id={CA_SECRET_ID}"
# pip only reads the bundle when the build was given one (--ca-bundle).
PIP_CERT = f"if [ -s /run/secrets/{CA_SECRET_ID} ]; then export PIP_CERT=/run/secrets/{CA_SECRET_ID}; fi"


def docker() -> bool:
    return hpccm.config.g_ctype == container_type.DOCKER


# Library packages renamed in the 64-bit time_t transition (Debian 13, Ubuntu 24.04) or by a soname bump;
# stacks and components name the Debian 12 package, and this maps it for the base's distro.
PACKAGE_NAMES = {
    "debian13": {"libopenmpi3": "libopenmpi40", "libpmix2": "libpmix2t64", "librdmacm1": "librdmacm1t64",
                 "libcurl4": "libcurl4t64",
                 "libevent-core-2.1-7": "libevent-core-2.1-7t64",
                 "libevent-pthreads-2.1-7": "libevent-pthreads-2.1-7t64"},
    "ubuntu24": {"libopenmpi3": "libopenmpi3t64", "libpmix2": "libpmix2t64", "librdmacm1": "librdmacm1t64",
                 "libcurl4": "libcurl4t64",
                 "libevent-core-2.1-7": "libevent-core-2.1-7t64",
                 "libevent-pthreads-2.1-7": "libevent-pthreads-2.1-7t64"},
}


def distro_names(distro: str, packages: list[str]) -> list[str]:
    """``packages`` under the names the base's distro uses."""
    names = PACKAGE_NAMES.get(distro, {})
    return [names.get(p, p) for p in packages]


def apt_cache(stack) -> str:
    """The ``RUN`` mounts that cache apt's downloads and package lists for ``stack``'s base.

    One cache per distro release and architecture (the stack's own, not HPCCM's stand-in distro):
    under one default id, Debian and Ubuntu or x86_64 and arm64 builds would read each other's
    lists and .debs. Only ``/var/lib/apt/lists`` is cached, not all of ``/var/lib/apt``, so
    ``extended_states`` (which packages were installed only as dependencies) stays in the image
    and is not shared between images.
    """
    tag = f"{stack.base.distro}-{stack.base.arch}"
    return (f"--mount=type=cache,id=imagekit-apt-cache-{tag},target=/var/cache/apt,sharing=locked "
            f"--mount=type=cache,id=imagekit-apt-lists-{tag},target=/var/lib/apt/lists,sharing=locked")


def apt_run(stack, commands: list[str], note: str | None = None) -> list:
    """One RUN of apt ``commands`` for ``stack``: under the apt cache mounts for Docker; for
    Singularity (no mounts) it removes its .debs and package lists itself."""
    blocks = [comment(note)] if note else []
    if docker():
        blocks.append(shell(commands=commands, _arguments=apt_cache(stack)))
    else:
        blocks.append(shell(commands=[*commands, "apt-get clean", "rm -rf /var/lib/apt/lists/*"]))
    return blocks


def apt_install(stack, packages: list[str], note: str | None = None) -> list:
    """One RUN that installs ``packages`` with apt, cached under BuildKit."""
    if not packages:
        return []
    pkgs = " ".join(sorted(set(packages)))
    return apt_run(stack, ["apt-get update -y && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                           f"--no-install-recommends {pkgs}"], note)


def build_tools(stack, extra: list[str] = (), note: str | None = None) -> list:
    """What a source build needs: a C toolchain, make, the archive tools, wget for an upstream URL
    (a mirror's files come through the build context instead), and ``extra`` (headers)."""
    fetch = [] if stack.mirror else ["ca-certificates", "wget"]
    return apt_install(stack, ["bzip2", "file", "g++", "gcc", "make", "tar", *fetch, *extra], note)


def apt_cache_setup() -> list:
    """Keep downloaded .debs so the apt cache mount holds them (images often delete them)."""
    if not docker():
        return []
    return [shell(commands=[
        "rm -f /etc/apt/apt.conf.d/docker-clean",
        "echo 'Binary::apt::APT::Keep-Downloaded-Packages \"true\";' > /etc/apt/apt.conf.d/01keep-debs",
    ])]


def runtime_slim() -> list:
    """Keep docs, man pages and translations out of the runtime stage (copyright files stay).

    Only for Debian-family bases, where dpkg honours path-exclude for every later install.
    """
    rules = ["path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
             "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*",
             "path-exclude=/usr/share/locale/*", "path-include=/usr/share/locale/locale.alias",
             "path-exclude=/usr/share/lintian/*"]
    return [shell(commands=["mkdir -p /etc/dpkg/dpkg.cfg.d",
                            "printf '%s\\n' " + " ".join(f"'{r}'" for r in rules)
                            + " > /etc/dpkg/dpkg.cfg.d/01imagekit-slim"])]


def write_file(path: str, text: str, mode: int = 0o644) -> list[str]:
    """Shell commands that write ``text`` to ``path`` in the image: the recipe carries the file
    (one quoted argument a line), so a build needs no context directory for it."""
    lines = " ".join(quoting.sh_arg(line) for line in text.splitlines())
    return [f"mkdir -p {quoting.sh_arg(path.rsplit('/', 1)[0] or '/')}",
            f"printf '%s\\n' {lines} > {quoting.sh_arg(path)}",
            f"chmod {mode:o} {quoting.sh_arg(path)}"]


def login_environment() -> list:
    """The profile script that keeps the image's ENV under Enroot's and Pyxis's login shell
    (see :mod:`imagekit.util.login_env`); the last step of a stage, so changing it rebuilds one layer."""
    # An image built by an older imagekit carries the script at its old, last place: removed, so
    # that it stops undoing what the image's own profile.d scripts do.
    legacy = [f"rm -f {' '.join(quoting.sh_arg('/' + p) for p in login_env.LEGACY_PATHS)}"]
    return [comment("The image's environment in login shells (Enroot, Pyxis): imagekit.util.login_env", reformat=False),
            shell(commands=legacy + write_file("/" + login_env.PATH, login_env.script()))]


MPI_PROBE = "/usr/local/bin/imagekit-mpi-ring"
MPI_PROBE_SOURCE = Path(__file__).resolve().parents[1] / "data" / "mpi-ring.c"


def mpi_probe(mpicc: str) -> list:
    """Build ``imagekit-mpi-ring`` (a GPU-less MPI wiring probe, data/mpi-ring.c) with the stack's MPI."""
    src = "/var/tmp/imagekit-mpi-ring.c"
    return [comment(f"{MPI_PROBE}: checks a launch's MPI wiring without a GPU", reformat=False),
            shell(commands=[*write_file(src, MPI_PROBE_SOURCE.read_text())[1:2],
                            f"{mpicc} -O2 -o {MPI_PROBE} {src}", f"rm -f {src}"])]


CUDA_MPI_PROBE = "/usr/local/bin/imagekit-cuda-mpi-ring"
CUDA_MPI_PROBE_SOURCE = Path(__file__).resolve().parents[1] / "data" / "cuda-mpi-ring.c"


def cuda_mpi_probe(mpicc: str, cuda_home: str) -> list:
    """Build ``imagekit-cuda-mpi-ring`` (data/cuda-mpi-ring.c): MPI moving device memory, against the
    stack's MPI and the CUDA runtime (libcudart, which the runtime stage keeps)."""
    src = "/var/tmp/imagekit-cuda-mpi-ring.c"
    return [comment(f"{CUDA_MPI_PROBE}: checks that MPI moves GPU memory (CUDA-aware MPI)", reformat=False),
            shell(commands=[*write_file(src, CUDA_MPI_PROBE_SOURCE.read_text())[1:2],
                            f"{mpicc} -O2 -I{cuda_home}/include -o {CUDA_MPI_PROBE} {src} "
                            f"-L{cuda_home}/lib64 -lcudart", f"rm -f {src}"])]


def pip_run(commands: list[str], note: str | None = None, env: dict[str, str] | None = None) -> list:
    """A RUN whose pip calls use the pip cache mount and the CA-bundle secret."""
    blocks = [comment(note)] if note else []
    exports = [f"export {k}={quoting.sh_arg(v)}" for k, v in sorted((env or {}).items())]
    if docker():
        blocks.append(shell(commands=[PIP_CERT, *exports, *commands], _arguments=f"{PIP_CACHE} {CA_SECRET}"))
    else:
        blocks.append(shell(commands=[*exports, *commands, "rm -rf /root/.cache/pip"]))
    return blocks


def shell_step(commands: list[str]) -> list:
    return [shell(commands=commands)]


def copy_from_devel(*paths: str) -> list:
    return [copy(_from="devel", src=p, dest=p) for p in paths]


def ldconfig_dir(name: str, libdir: str) -> list:
    """Register ``libdir`` with the dynamic loader (no LD_LIBRARY_PATH: Enroot/Pyxis keep ld.so.cache)."""
    return [shell(commands=[f"echo {libdir} > /etc/ld.so.conf.d/{name}.conf", "ldconfig"])]


def env(variables: dict[str, str]) -> list:
    return [environment(variables=dict(sorted(variables.items())))] if variables else []
