#!/usr/bin/env bash
# The test set-up, on top of scripts/setup.sh (the main job's): what only the tests use. scripts/test.sh
# runs both, and .ci/run runs test.sh, so CI installs everything the tests need; the main job installs
# none of this. Idempotent: installs only what is missing. Needs root (or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

# Host tools, by what needs them:
#   squashfs-tools-ng         tar2sqfs, the squashfs tool tests' third tool
#   isal pigz                 inflate gzip layers of registry, OCI and docker-save sources (igzip first;
#                             pigz or gzip work too, slower)
#   docker-registry           the real local registry `imagekit push` is tested against
#   openmpi-bin python3-mpi4py  host side of outside-in launches (host mpirun + docker run per rank)
#   slurm-wlm munge libpmix2 libpmix-dev  a real single-node Slurm for the launch tests
#   (shellcheck)              every generated launch script is linted
#   openssh-client            inside-out launches (ssh-keygen for per-job keys)
#   gcc                       the check tests compile stub libraries (libnccl.so.2, ...) for stub images
#   openssl                   the registry tests sign the tokens of a Bearer-auth registry
PACKAGES=(squashfs-tools-ng isal pigz docker-registry openmpi-bin python3-mpi4py slurm-wlm munge libpmix2
          libpmix-dev shellcheck openssh-client gcc openssl)
bash scripts/apt-install.sh setup-test "${PACKAGES[@]}"

# arm64 base images, builds and containers on x86: QEMU and binfmt (it installs its own packages).
# Not fatal: without it only the arm64 builds and tests fail (each says what is missing).
bash scripts/setup-emulation.sh || echo "setup-test: no arm64 emulation here; arm64 builds will fail" >&2

VENV=${VENV:-.venv}
echo "setup-test: adding the test extra to $VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'
