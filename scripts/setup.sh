#!/usr/bin/env bash
# Set up a fresh Debian machine for imagekit's main job: host tools, a Docker engine, imagekit itself.
# Only what `imagekit base`, `build`, `check` and `export` use; scripts/setup-test.sh adds what the
# tests need besides (scripts/test.sh runs both). Idempotent: installs only what is missing. Needs
# root (or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

# Host tools, by what needs them:
#   docker.io                 the engine (Debian's 20.10, BuildKit built in)
#   debootstrap               `imagekit base` (offline base images)
#   squashfs-tools            Enroot squashfs and SIF export (mksquashfs -tar / sqfstar)
PACKAGES=(docker.io debootstrap squashfs-tools)
bash scripts/apt-install.sh setup "${PACKAGES[@]}"

bash scripts/setup-engine.sh

# imagekit lives in a virtual environment: Debian's and Ubuntu's own python3 is "externally
# managed" (PEP 668) and refuses a plain `pip install`. PYTHON picks the interpreter, VENV the place.
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
if ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    ver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    bash scripts/apt-install.sh "setup (venv for $PY)" "python${ver}-venv" || \
        bash scripts/apt-install.sh "setup (venv for $PY)" python3-venv
fi
real_exe='import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))'
if [ -x "$VENV/bin/python" ] && [ "$("$VENV/bin/python" -c "$real_exe" 2>/dev/null)" != "$("$PY" -c "$real_exe")" ]; then
    echo "setup: $VENV was made by another python; remaking it with $PY"
    rm -rf "$VENV"
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# Always (re)install this checkout: another checkout's editable install would otherwise shadow it.
# Quick when satisfied. The test extra is scripts/setup-test.sh's.
echo "setup: installing imagekit from $(pwd) into $VENV (editable)"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e .
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
