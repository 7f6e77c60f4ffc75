#!/usr/bin/env bash
# The test suite, on a fresh machine: set up (engine and cluster runtimes included), then pytest.
# Integration tests need the engine; with CI set, a missing engine fails them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The real runtimes (Enroot, Pyxis, Apptainer) and the test user; once per machine. Without their
# sources the runtime tests skip here, and fail in CI.
if ! bash scripts/setup-cluster.sh; then
    if [ -n "${CI:-}" ]; then exit 1; fi
    echo "test: no cluster set-up: the tests under Enroot, Pyxis and Apptainer will be skipped" >&2
fi
# Rootless Podman for the test user (tests/test_podman.py); once per machine.
if ! bash scripts/setup-podman.sh; then
    if [ -n "${CI:-}" ]; then exit 1; fi
    echo "test: no rootless Podman set-up: the Podman tests will be skipped" >&2
fi
VENV=${VENV:-.venv}
export PATH="$(pwd)/$VENV/bin:$PATH"   # imagekit, hpccm and pytest from the set-up's venv
exec "$VENV/bin/python" -m pytest "$@"
