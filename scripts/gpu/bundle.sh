#!/usr/bin/env bash
# Pack a CUDA stack's runtime image for a GPU machine that has no container engine (the project's lent
# device): its root file system (less libnccl.so, which the GPU machine's NCCL wheel replaces to keep the
# bundle under the transfer limit), a program built with *plain* nvcc in the devel image (the lib-link
# regression of issue 38), the image's Env and its check label. scripts/gpu/run.sh runs it there.
#
#   bash scripts/gpu/bundle.sh [RUNTIME_IMAGE [DEVEL_IMAGE [OUT_DIR]]]
#   bash scripts/gpu/bundle.sh imagekit/debian-cuda:latest imagekit/debian-cuda:devel build/gpu-bundle
#   bash scripts/gpu/bundle.sh imagekit/debian-efa:latest imagekit/debian-cuda12:devel build/gpu-bundle-efa
#     (the EFA image: run.sh also moves CUDA memory over libfabric's shm provider and loads aws-ofi-nccl)
set -euo pipefail
RT=${1:-imagekit/debian-cuda:latest}; DV=${2:-imagekit/debian-cuda:devel}; OUT=${3:-build/gpu-bundle}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp"
cp "$here/kernel.cu" "$work/k.cu"
# No -L and no -lcudart: nvcc.profile's own search path must find libcudart_static.
docker run --rm -v "$work:/k" -w /k --entrypoint bash "$DV" -c \
    'nvcc -gencode arch=compute_90,code=sm_90 k.cu -o imagekit-nvcc-kernel && cuobjdump --list-elf imagekit-nvcc-kernel'
cid=$(docker create "$RT" true)
mkdir "$work/root"
docker export "$cid" | tar -x -C "$work/root"; docker rm "$cid" >/dev/null
cp "$work/imagekit-nvcc-kernel" "$work/root/usr/local/bin/"
find "$work/root" -name 'libnccl.so*' -type f -delete
docker image inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$RT" | grep -v '^$' > "$OUT.tmp/image.env"
docker image inspect -f '{{index .Config.Labels "io.imagekit.checks"}}' "$RT" > "$OUT.tmp/checks.json"
tar -C "$work/root" -c . | xz -T2 -6 > "$OUT.tmp/rootfs.tar.xz"
cp "$here/run.sh" "$OUT.tmp/"
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
du -sh "$OUT"
