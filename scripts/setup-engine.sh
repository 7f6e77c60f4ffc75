#!/usr/bin/env bash
# Make sure a Docker engine answers on /var/run/docker.sock.
# Installs Debian's docker.io (20.10, BuildKit built in) and starts dockerd
# when no engine is running; idempotent. Needs root (or sudo) for apt and dockerd.
set -euo pipefail

log=${IMAGEKIT_DOCKERD_LOG:-/var/log/imagekit-dockerd.log}
sock=/var/run/docker.sock

engine_up() {
    # Debian's client, never /usr/local/bin/docker: the latter lacks buildx.
    /usr/bin/docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if [ -x /usr/bin/docker ] && engine_up; then
    echo "docker engine: running ($(/usr/bin/docker version --format '{{.Server.Version}}'))"
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1 || [ ! -x /usr/bin/docker ]; then
    echo "docker engine: installing Debian's docker.io"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi

if [ -S "$sock" ] && ! engine_up; then
    as_root rm -f "$sock"    # stale socket from a dead engine
fi

echo "docker engine: starting dockerd (log: $log)"
as_root sh -c "nohup dockerd >'$log' 2>&1 &"
for _ in $(seq 1 60); do
    if engine_up; then
        echo "docker engine: running ($(/usr/bin/docker version --format '{{.Server.Version}}'))"
        exit 0
    fi
    sleep 0.5
done
echo "docker engine: dockerd did not answer within 30 s; last lines of $log:" >&2
tail -n 20 "$log" >&2 || true
exit 1
