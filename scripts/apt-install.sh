#!/usr/bin/env bash
# Install the Debian packages named that are not installed yet: one `apt-get update` and one
# `apt-get install` for all of them, nothing when every one is there. Needs root (or sudo).
# Usage: bash scripts/apt-install.sh WHY PACKAGE...   (WHY names the set-up in its one line)
set -euo pipefail
why=$1
shift
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
missing=()
for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "$why: installing ${missing[*]}"
    as_root apt-get update -qq
    # Debian's docker-registry starts a service on install where it can; it is not needed running.
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
fi
