#!/usr/bin/env bash
# Can every job's user run this interpreter and import imagekit's Pyxis importer with it? Pyxis runs
# the importer as the job's user: a venv whose python lives under /root (pyenv's, mode 0700) fails
# every non-root job with exit 126. Tried for real, as `nobody`, from /, by a shell that is already
# that user (setpriv's own exec still runs with root's rights). Quiet and 0 when it works; else one
# line saying why, and 1. Needs root (or sudo) to become another user.
#
#   bash scripts/check-shared-python.sh /opt/imagekit/venv/bin/python
set -euo pipefail
python=${1:?usage: check-shared-python.sh PYTHON}
case $python in /*) ;; *) python=$(pwd)/$python ;; esac
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
# shellcheck disable=SC2016 # "$1" is the inner shell's
if ! said=$(cd / && as_root setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all -- \
        /bin/sh -c 'exec "$1" -c "import imagekit.export.pyxis_importer"' check "$python" 2>&1 </dev/null); then
    said=$(printf '%s\n' "$said" | grep -v '^[[:space:]]*$' | tail -n 1 | sed 's/^check: [0-9]*: exec: //')
    echo "other users cannot run $python with imagekit's importer (${said:-no reason given}): Pyxis runs the importer as each job's user; make it with an interpreter they can run, e.g. PYTHON=/usr/bin/python3 VENV=/opt/imagekit/venv bash scripts/setup.sh"
    exit 1
fi
