#!/usr/bin/env bash
# arm64 builds and containers on an x86 machine (and x86 ones on arm64): QEMU user mode through the
# kernel's binfmt_misc. Debian's qemu-user-static registers its interpreters (with the F flag, so
# that they work inside containers) from its postinst when binfmt_misc is mounted; on a machine or
# container without systemd it may not be, so this mounts it and enables them. It installs the
# packages where missing (qemu-user-static binfmt-support arch-test; arch-test: mmdebstrap's check).
# Idempotent; needs root (or sudo). The main job does not need it; scripts/setup-test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/apt-install.sh emulation qemu-user-static binfmt-support arch-test

BINFMT=/proc/sys/fs/binfmt_misc
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

case "$(uname -m)" in
    x86_64) want=qemu-aarch64 ;;
    aarch64) want=qemu-x86_64 ;;
    *) echo "emulation: no other architecture to run on $(uname -m)"; exit 0 ;;
esac

if [ ! -e "$BINFMT/status" ]; then
    as_root mount -t binfmt_misc binfmt_misc "$BINFMT" || {
        echo "emulation: cannot mount binfmt_misc at $BINFMT (a container without the privilege?)" >&2
        exit 1
    }
fi
if [ ! -e "$BINFMT/$want" ]; then
    as_root update-binfmts --enable "$want" >/dev/null 2>&1 || as_root update-binfmts --import "$want"
fi
# With the F flag the kernel keeps the interpreter it opened when the entry was registered: a QEMU
# upgraded or downgraded since then is not used until the entry is made again. The stamp names the
# file registered last; a different one (or none) re-registers.
STAMP=/var/lib/imagekit/binfmt-$want
interp=$(sed -n 's/^interpreter //p' "$BINFMT/$want")
now=$(stat -L -c '%d:%i:%Y' "$interp" 2>/dev/null || echo missing)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$now" ]; then
    as_root update-binfmts --disable "$want" >/dev/null && as_root update-binfmts --enable "$want" >/dev/null
    as_root mkdir -p "$(dirname "$STAMP")"
    echo "$now" | as_root tee "$STAMP" >/dev/null
    echo "emulation: $want registered again ($interp changed since its last registration)"
fi
if ! head -n1 "$BINFMT/$want" | grep -qx enabled; then
    as_root update-binfmts --enable "$want"
fi
if ! grep -q '^flags:.*F' "$BINFMT/$want"; then
    echo "emulation: $BINFMT/$want has no F (fix binary) flag: containers cannot use it" >&2
    exit 1
fi
echo "emulation: $want registered ($(grep '^interpreter' "$BINFMT/$want"))"
