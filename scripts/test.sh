#!/usr/bin/env bash
# The test suite, on a fresh machine: set up (the main job's set-up, the tests' own packages, the
# engine and the cluster runtimes), then pytest. Integration tests need the engine; with CI set, a
# missing engine fails them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup-test.sh
# The real runtimes (Enroot, Pyxis, Apptainer) and the test user; once per machine. Without their
# sources the runtime tests skip here, and fail in CI.
if ! bash scripts/setup-cluster.sh; then
    if [ -n "${CI:-}" ]; then exit 1; fi
    echo "test: no cluster set-up: the tests under Enroot, Pyxis and Apptainer will be skipped" >&2
fi
# Rootless Podman for the test user (tests/engines/test_podman.py); once per machine.
if ! bash scripts/setup-podman.sh; then
    if [ -n "${CI:-}" ]; then exit 1; fi
    echo "test: no rootless Podman set-up: the Podman tests will be skipped" >&2
fi
VENV=${VENV:-.venv}
export PATH="$(pwd)/$VENV/bin:$PATH"   # imagekit, hpccm and pytest from the set-up's venv

# Tiers (scripts/heavy_tier.py). The heavy tier is the tests whose cold builds take many minutes (CUDA,
# PyTorch, Open MPI 4.1 for PMI-2, arm64 under emulation). `--heavy` runs it alone, as CI would, and
# records it in .ci/heavy-tier.json when every heavy test passed. IMAGEKIT_TIER picks what a plain run
# does: `all` (the default here), `fast` (no heavy tests), or `auto` (CI's default: the heavy tier
# too unless the record matches the tree).
if [ "${1:-}" = "--heavy" ]; then
    shift
    export CI=${CI:-true} IMAGEKIT_HEAVY_RECORD=1
    exec "$VENV/bin/python" -m pytest -m heavy "$@"
fi
tier=${IMAGEKIT_TIER:-$([ -n "${CI:-}" ] && echo auto || echo all)}
select=()
case "$tier" in
    all) ;;
    fast) select=(-m "not heavy"); echo "test: fast tier only (IMAGEKIT_TIER=fast): the heavy tier is left out" ;;
    auto) if "$VENV/bin/python" scripts/heavy_tier.py status; then select=(-m "not heavy"); fi ;;
    *) echo "test: IMAGEKIT_TIER must be all, fast or auto, not '$tier'" >&2; exit 2 ;;
esac
exec "$VENV/bin/python" -m pytest "${select[@]}" "$@"
