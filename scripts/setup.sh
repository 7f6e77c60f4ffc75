#!/usr/bin/env bash
# Set up a fresh Debian machine for imagekit: host tools, a Docker engine, imagekit itself.
# Idempotent: installs only what is missing. Needs root (or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

# Host tools, by what needs them:
#   docker.io                 the engine (Debian's 20.10, BuildKit built in)
#   debootstrap               `imagekit base` (offline base images)
#   squashfs-tools(-ng)       Enroot squashfs export (sqfstar / tar2sqfs), unsquashfs in tests
#   isal pigz                 inflate gzip layers of registry, OCI and docker-save sources (igzip first;
#                             pigz or gzip work too, slower)
#   docker-registry           the real local registry `imagekit push` is tested against
#   openmpi-bin python3-mpi4py  host side of outside-in launches (host mpirun + docker run per rank)
#   slurm-wlm munge libpmix2 libpmix-dev  a real single-node Slurm for the launch tests
#   shellcheck                every generated launch script is linted
#   openssh-client            inside-out launches (ssh-keygen for per-job keys)
#   gcc                       the check tests compile stub libraries (libnccl.so.2, ...) for stub images
#   openssl                   the registry tests sign the tokens of a Bearer-auth registry
#   qemu-user-static binfmt-support arch-test  arm64 base images, builds and containers on x86
#                             (setup-emulation.sh registers the interpreters; arch-test: mmdebstrap's check)
PACKAGES=(docker.io debootstrap squashfs-tools squashfs-tools-ng isal pigz docker-registry openmpi-bin
          python3-mpi4py slurm-wlm munge libpmix2 libpmix-dev shellcheck openssh-client gcc openssl
          qemu-user-static binfmt-support arch-test)

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    as_root apt-get update -qq
    # Debian's docker-registry starts a service on install where it can; it is not needed running.
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
fi

bash scripts/setup-engine.sh
# Not fatal: without it only the arm64 builds and tests fail (each says what is missing).
bash scripts/setup-emulation.sh || echo "setup: no arm64 emulation here; arm64 builds will fail" >&2

# imagekit lives in a virtual environment: Debian's and Ubuntu's own python3 is "externally
# managed" (PEP 668) and refuses a plain `pip install`. PYTHON picks the interpreter, VENV the place.
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
if ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    ver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    echo "setup: installing python${ver}-venv (for $PY)"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "python${ver}-venv" >/dev/null || \
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi
real_exe='import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))'
if [ -x "$VENV/bin/python" ] && [ "$("$VENV/bin/python" -c "$real_exe" 2>/dev/null)" != "$("$PY" -c "$real_exe")" ]; then
    echo "setup: $VENV was made by another python; remaking it with $PY"
    rm -rf "$VENV"
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# Always (re)install this checkout: another checkout's editable install would
# otherwise shadow it, and new test extras would be missing. Quick when satisfied.
echo "setup: installing imagekit from $(pwd) into $VENV (editable, with the test extra)"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'
where=$("$VENV/bin/python" -c 'import imagekit, os; print(os.path.dirname(os.path.dirname(os.path.abspath(imagekit.__file__))))')
if [ "$where" != "$(pwd)/src" ]; then
    echo "setup: imagekit resolves to $where, not $(pwd)/src" >&2
    exit 1
fi
case $VENV in /*) venv_abs=$VENV ;; *) venv_abs=$(pwd)/$VENV ;; esac
# The Pyxis importer runs as each job's user: say so in one line when they cannot run this venv.
if ! private=$(bash scripts/check-shared-python.sh "$venv_abs/bin/python"); then
    echo "setup: warning: $private" >&2
fi
echo "setup: ready ($("$VENV/bin/imagekit" --version); run it as $venv_abs/bin/imagekit, or put $venv_abs/bin on PATH)"
