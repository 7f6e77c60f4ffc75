#!/usr/bin/env bash
# The main job, offline, on a fresh machine: set up, make the Debian base image,
# build the default stack (debian-mpi), check it, and export it for Enroot/Pyxis
# and Apptainer/Singularity into out/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$(pwd)/${VENV:-.venv}/bin:$PATH"
imagekit base debian:bookworm
imagekit build debian-mpi --export enroot,sif -o out/
ls -l out/
