#!/usr/bin/env bash
# The test suite, on a fresh machine: set up (engine included), then pytest.
# Integration tests need the engine; with CI set, a missing engine fails them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${VENV:-.venv}
export PATH="$(pwd)/$VENV/bin:$PATH"   # imagekit, hpccm and pytest from the set-up's venv
exec "$VENV/bin/python" -m pytest "$@"
