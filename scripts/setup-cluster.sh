#!/usr/bin/env bash
# The runtimes a cluster starts imagekit's images with, built from a site mirror of their sources,
# once per machine: Enroot 4.1.2, Pyxis 0.24.0 (against Debian's Slurm 22.05) and Apptainer 1.4.0.
# Also: the Debian packages they need at run time, Enroot's site configuration, and an unprivileged
# user for the tests (`imagekit-user`). Idempotent: what is installed at the right version is kept.
# Starting the daemons (munge, slurmctld, slurmd with Pyxis) is scripts/cluster.py's job.
#
#   bash scripts/setup-cluster.sh                 # sources from ../shared/mirror
#   IMAGEKIT_RUNTIME_SOURCES=/site/src bash scripts/setup-cluster.sh
#
# Needs root (or sudo). Nothing is downloaded but Debian packages; Go 1.22 (Apptainer) comes from
# bookworm-backports on the host's own Debian mirror.
set -euo pipefail
cd "$(dirname "$0")/.."

SOURCES=${IMAGEKIT_RUNTIME_SOURCES:-$(cd .. && pwd)/shared/mirror}
ENROOT=enroot-4.1.2.tar.gz
PYXIS=pyxis-0.24.0.tar.gz
APPTAINER=apptainer-1.4.0-vendored.tar.xz
TEST_USER=${IMAGEKIT_TEST_USER:-imagekit-user}
PREFIX=/usr/local
STAMPS=$PREFIX/share/imagekit-cluster

fail() { echo "setup-cluster: $*" >&2; exit 1; }
# Run a build step with its output in $work/NAME.log, shown (last lines) only when it fails.
quiet() {
    local name=$1; shift
    if ! "$@" >"$work/$name.log" 2>&1; then
        tail -n 25 "$work/$name.log" >&2
        fail "building $name failed (the lines above are the end of its log)"
    fi
}
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
log() { echo "setup-cluster: $*"; }

for f in "$ENROOT" "$PYXIS" "$APPTAINER"; do
    [ -f "$SOURCES/$f" ] || fail "missing $SOURCES/$f: point IMAGEKIT_RUNTIME_SOURCES at a directory holding" \
                                 "$ENROOT, $PYXIS and $APPTAINER (the site mirror, ../shared/mirror in CI)"
done

# Run-time packages by what needs them; build-time ones after.
#   squashfs-tools fuse-overlayfs squashfuse pigz jq parallel curl gawk zstd   Enroot (docs/requirements)
#   slurm-wlm munge libpmix2 libpmix-dev                                     Slurm with the pmix plugin
#   uidmap fuse3 fuse2fs squashfuse cryptsetup-bin                           Apptainer
#   gnupg                                                                    the tests' Apptainer sign key
#   bats                                                                     Pyxis's own test suite, run by the tests
#   iproute2 e2fsprogs                                                       the multi-node test cluster
RUNTIME=(squashfs-tools fuse-overlayfs squashfuse pigz jq parallel curl gawk zstd libcap2-bin
         slurm-wlm munge libpmix2 libpmix-dev uidmap fuse3 fuse2fs cryptsetup-bin gnupg bats iproute2 e2fsprogs)
BUILD=(gcc make libtool automake autoconf libmd-dev libslurm-dev pkg-config libseccomp-dev libfuse3-dev
       libsubid-dev zlib1g-dev libsqlite3-dev)
GO=/usr/lib/go-1.22/bin/go

missing=()
for pkg in "${RUNTIME[@]}" "${BUILD[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ! -x "$GO" ]; then
    # Go 1.22 is in bookworm-backports only; add that suite on the host's own Debian mirror.
    if ! apt-cache policy golang-1.22-go 2>/dev/null | grep -q 'Candidate:.*[0-9]'; then
        uri=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
        [ -n "$uri" ] || uri=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
        [ -n "$uri" ] || fail "no Debian mirror found in /etc/apt to add bookworm-backports from (Go 1.22 for Apptainer)"
        log "adding bookworm-backports from $uri (Go 1.22 for Apptainer)"
        printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: %s\n' \
            "$uri" /usr/share/keyrings/debian-archive-keyring.gpg |
            as_root tee /etc/apt/sources.list.d/imagekit-backports.sources >/dev/null
    fi
    missing+=(golang-1.22-go)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null || fail "apt-get could not install: ${missing[*]}"
fi

work=$(mktemp -d /var/tmp/imagekit-cluster-build.XXXXXX)
trap 'as_root rm -rf "$work"' EXIT
as_root mkdir -p "$STAMPS"

# A runtime is rebuilt when its source file changed (its sha256 is the stamp), not on every set-up.
built() { [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$(sha256sum "$SOURCES/$1" | cut -d' ' -f1)" ]; }
stamp() { sha256sum "$SOURCES/$1" | cut -d' ' -f1 | as_root tee "$STAMPS/$1" >/dev/null; }

if ! built "$ENROOT" || ! command -v enroot >/dev/null; then
    log "building Enroot from $ENROOT"
    tar -xzf "$SOURCES/$ENROOT" -C "$work"
    src=$(echo "$work"/enroot-*)
    quiet enroot make -C "$src" prefix=$PREFIX sysconfdir=/etc
    quiet enroot-install as_root make -C "$src" install prefix=$PREFIX sysconfdir=/etc
    stamp "$ENROOT"
fi
# Enroot's Slurm hook brings PMIx into the container (srun --mpi=pmix under Pyxis).
as_root ln -sf $PREFIX/share/enroot/hooks.d/50-slurm-pmi.sh /etc/enroot/hooks.d/50-slurm-pmi.sh
# What Enroot's `make setcap` (its enroot+caps package) does: an unprivileged `enroot import` converts
# layer whiteouts with these capabilities; imagekit's Pyxis importer falls back to it as the job user.
as_root setcap cap_sys_admin+pe $PREFIX/bin/enroot-mksquashovlfs
as_root setcap cap_sys_admin,cap_mknod+pe $PREFIX/bin/enroot-aufs2ovlfs
# Site configuration as Pyxis documents it for shared nodes: per-user runtime and data directories
# that exist without a login session (srun tasks have no XDG_RUNTIME_DIR).
as_root tee /etc/enroot/enroot.conf.d/50-imagekit-cluster.conf >/dev/null <<'EOF'
# Written by imagekit's scripts/setup-cluster.sh.
ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)
ENROOT_CACHE_PATH /var/tmp/enroot-cache/user-$(id -u)
ENROOT_DATA_PATH /var/tmp/enroot-data/user-$(id -u)
EOF
as_root install -d -m 1777 /run/enroot /var/tmp/enroot-cache /var/tmp/enroot-data

if ! built "$PYXIS" || [ ! -f $PREFIX/lib/slurm/spank_pyxis.so ]; then
    log "building Pyxis from $PYXIS"
    tar -xzf "$SOURCES/$PYXIS" -C "$work"
    src=$(echo "$work"/pyxis-*)
    quiet pyxis make -C "$src"
    quiet pyxis-install as_root make -C "$src" install prefix=$PREFIX
    stamp "$PYXIS"
fi

if ! built "$APPTAINER" || ! command -v apptainer >/dev/null; then
    log "building Apptainer from $APPTAINER (about 3.5 min on 2 cores)"
    tar -xJf "$SOURCES/$APPTAINER" -C "$work"
    src=$(echo "$work"/apptainer-*)
    # Offline: the vendored modules only, Debian's Go 1.22, never a toolchain download.
    gobuild() { env PATH="$(dirname "$GO"):$PATH" GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=vendor "$@"; }
    # shellcheck disable=SC2016 # $1 and $2 are the inner sh's arguments
    quiet apptainer-configure gobuild sh -c 'cd "$1" && ./mconfig --without-suid --prefix="$2"' _ "$src" "$PREFIX"
    quiet apptainer gobuild make -C "$src/builddir"
    quiet apptainer-install as_root make -C "$src/builddir" install
    stamp "$APPTAINER"
fi

# Apptainer gives root every capability the kernel knows ("root default capabilities = full"); a
# sandbox whose bounding set withholds one (CI runners, containers) makes every root `apptainer exec`
# fail with "Requesting capability set ...". There root runs without capabilities instead.
conf=$PREFIX/etc/apptainer/apptainer.conf
last=$(cat /proc/sys/kernel/cap_last_cap)
bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
if [ $(( 0x$bnd )) -ne $(( (1 << (last + 1)) - 1 )) ] && grep -q '^root default capabilities = full' "$conf"; then
    log "this machine's capability bounding set is not full (CapBnd $bnd): Apptainer's root runs without capabilities"
    as_root sed -i 's/^root default capabilities = full/root default capabilities = no/' "$conf"
fi

# The multi-node test cluster's shared file system client (scripts/multinode.py): a counting FUSE
# pass-through, rebuilt when its source changes.
COUNTFS=$PREFIX/bin/imagekit-countfs
if [ ! -x "$COUNTFS" ] || [ "$(cat "$STAMPS/countfs.c" 2>/dev/null)" != "$(sha256sum scripts/countfs.c | cut -d' ' -f1)" ]; then
    log "building imagekit-countfs (the multi-node cluster's shared file system client)"
    # shellcheck disable=SC2046 # pkg-config prints several words on purpose
    quiet countfs gcc -O2 -Wall -o "$work/imagekit-countfs" scripts/countfs.c $(pkg-config --cflags --libs fuse3)
    as_root install -m 0755 "$work/imagekit-countfs" "$COUNTFS"
    sha256sum scripts/countfs.c | cut -d' ' -f1 | as_root tee "$STAMPS/countfs.c" >/dev/null
fi

# The unprivileged job user of the tests (jobs as root hide permission and namespace problems).
if ! id "$TEST_USER" >/dev/null 2>&1; then
    log "adding the unprivileged test user $TEST_USER"
    as_root useradd --create-home --shell /bin/bash "$TEST_USER"
fi

log "ready: $(enroot version 2>/dev/null | head -n 1 | sed 's/^/enroot /'), pyxis $PREFIX/lib/slurm/spank_pyxis.so," \
    "$(apptainer --version), test user $TEST_USER"
