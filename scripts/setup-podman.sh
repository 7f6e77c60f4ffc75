#!/usr/bin/env bash
# Rootless Podman for an unprivileged user (the tests' `imagekit-user`), once per machine:
# Debian's Podman 4.3 (Buildah 1.28 inside), newuidmap/newgidmap, a subordinate uid and gid range
# for the user, a runtime directory, and the user's storage.conf; mmdebstrap, which makes the
# base image as that user (`imagekit base debian:bookworm --engine podman`, its unshare mode, in
# a user namespace through the same subordinate ids). Idempotent: what is there is kept.
#
#   bash scripts/setup-podman.sh                      # for imagekit-user
#   IMAGEKIT_TEST_USER=alice bash scripts/setup-podman.sh
#   IMAGEKIT_PODMAN_DRIVER=vfs bash scripts/setup-podman.sh       # force a storage driver
#
# The storage driver (IMAGEKIT_PODMAN_DRIVER, default auto): the kernel's own overlayfs where it lets
# an unprivileged user mount it (Linux 5.13 and later; probed here on a scratch store), else vfs.
# fuse-overlayfs is never used: it needs a /dev/fuse the user may open, which CI runners and
# containers often lack. vfs needs nothing but copies each layer in full (slower and bigger, see
# docs/build.md, "Rootless Podman"). Needs root (or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

TEST_USER=${IMAGEKIT_TEST_USER:-imagekit-user}
DRIVER=${IMAGEKIT_PODMAN_DRIVER:-auto}
PACKAGES=(podman uidmap slirp4netns mmdebstrap)

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
log() { echo "setup-podman: $*"; }
fail() { echo "setup-podman: $*" >&2; exit 1; }

# No recommends (apt-install.sh): buildah, fuse-overlayfs and dbus-user-session are not needed (and fuse
# cannot work here); nor mmdebstrap's fakechroot, fakeroot, qemu helpers (imagekit uses its unshare mode).
bash scripts/apt-install.sh setup-podman "${PACKAGES[@]}" || fail "apt-get could not install: ${PACKAGES[*]}"

if ! id "$TEST_USER" >/dev/null 2>&1; then
    log "adding the unprivileged test user $TEST_USER"
    as_root useradd --create-home --shell /bin/bash "$TEST_USER"
fi
uid=$(id -u "$TEST_USER")
home=$(getent passwd "$TEST_USER" | cut -d: -f6)

# Subordinate ids: useradd adds them only when /etc/subuid already exists. 65536 of each (a Debian
# image's nobody is 65534), in a range no other entry uses.
has_range() { awk -F: -v u="$TEST_USER" -v i="$uid" '($1 == u || $1 == i) && $3 >= 65536 {f = 1} END {exit !f}' "$1" 2>/dev/null; }
if ! has_range /etc/subuid || ! has_range /etc/subgid; then
    start=$(cat /etc/subuid /etc/subgid 2>/dev/null | awk -F: 'BEGIN {e = 100000} $2 + $3 > e {e = $2 + $3} END {print e}')
    log "giving $TEST_USER the subordinate uids and gids $start-$((start + 65535))"
    as_root touch /etc/subuid /etc/subgid
    has_range /etc/subuid || as_root usermod --add-subuids "$start-$((start + 65535))" "$TEST_USER"
    has_range /etc/subgid || as_root usermod --add-subgids "$start-$((start + 65535))" "$TEST_USER"
    migrate=1
fi

# No logind here: the runtime directory Podman looks for first (/run/user/UID), owned by the user.
as_root install -d -m 0700 -o "$TEST_USER" -g "$(id -g "$TEST_USER")" "/run/user/$uid"

as_podman() { as_root runuser -u "$TEST_USER" -- env HOME="$home" XDG_RUNTIME_DIR="/run/user/$uid" podman "$@"; }
if [ "$DRIVER" = auto ]; then
    # Does native overlay work for the user? Ask Podman on a scratch store it then forgets.
    scratch=$(as_root runuser -u "$TEST_USER" -- mktemp -d /tmp/imagekit-podman-probe.XXXXXX)
    if as_podman --root "$scratch/root" --runroot "$scratch/run" --storage-driver overlay \
            info --format '{{.Store.GraphDriverName}}' >/dev/null 2>&1; then
        DRIVER=overlay
    else
        DRIVER=vfs
    fi
    as_podman unshare rm -rf "$scratch" >/dev/null 2>&1 || as_root rm -rf "$scratch"
fi

conf="$home/.config/containers/storage.conf"
want=$(printf '# Written by imagekit'"'"'s scripts/setup-podman.sh.\n[storage]\ndriver = "%s"\n' "$DRIVER")
if [ "$(as_root cat "$conf" 2>/dev/null || true)" != "$want" ]; then
    log "storage driver $DRIVER for $TEST_USER ($conf)"
    as_root runuser -u "$TEST_USER" -- mkdir -p "$(dirname "$conf")"
    printf '%s\n' "$want" | as_root runuser -u "$TEST_USER" -- tee "$conf" >/dev/null
    # A store made with another driver cannot be read with this one: start it afresh.
    as_podman system reset --force >/dev/null 2>&1 || true
    migrate=1
fi

if [ -n "${migrate:-}" ]; then
    as_podman system migrate >/dev/null 2>&1 || true
fi
# mmdebstrap's unshare mode as the user: a user namespace mapped through newuidmap/newgidmap and the
# subordinate ids, the same thing rootless Podman needs; asked of mmdebstrap itself.
as_root runuser -u "$TEST_USER" -- env HOME="$home" mmdebstrap --unshare-helper true ||
    fail "mmdebstrap's unshare mode does not work for $TEST_USER (user namespaces, newuidmap, /etc/subuid)"

# (stderr apart: rootless Podman warns that "/" is not a shared mount, harmless for builds)
driver=$(as_podman info --format '{{.Store.GraphDriverName}}' 2>/dev/null) ||
    fail "podman info as $TEST_USER failed: $(as_podman info 2>&1 | tail -n 3)"
log "ready: $(podman --version), rootless as $TEST_USER (uid $uid), storage driver $driver"
