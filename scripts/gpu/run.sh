#!/bin/bash
# A bundle from scripts/gpu/bundle.sh, on a real GPU with no container engine, started the way Enroot
# starts it: /etc/environment from the image's Env, a login shell, the host's driver libraries added.
set -u
# Usage (on the GPU machine, as root, from the checkout): bash scripts/gpu/run.sh [BUNDLE_DIR]
B=${1:-build/gpu-bundle}
OUT=${OUT:-$(mktemp -d /tmp/ikgpu-out-XXXXXX)}; mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
echo "== host"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; uname -r
# As root, in world-writable /tmp: fresh directories of our own, never a name another user could plant.
R=$(mktemp -d /tmp/ikroot-XXXXXX); aside=$(mktemp -d /tmp/ikaside-XXXXXX)
t0=$(date +%s); python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)" "$B/rootfs.tar.xz" | tar -x -C $R; echo "unpacked in $(( $(date +%s)-t0 )) s"
L=$R/usr/lib/x86_64-linux-gnu
for l in libcuda.so.1 libnvidia-ml.so.1 libnvidia-ptxjitcompiler.so.1 libnvidia-nvvm.so.4; do
  p=$(ldconfig -p | awk -v l=$l '$1==l{print $NF; exit}'); [ -n "$p" ] && cp -L "$p" $L/ && echo "driver lib $l <- $p"
done
cp -L "$(command -v nvidia-smi)" $R/usr/bin/ 2>/dev/null
N=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null)/lib/libnccl.so.2
[ -f "$N" ] || N=$(find / -xdev -name libnccl.so.2 2>/dev/null | grep -v ikroot | head -1)
echo "NCCL from the device: $N"; mkdir -p $R/usr/local/nccl/lib; cp -L "$N" $R/usr/local/nccl/lib/libnccl.so.2
mount --rbind /dev $R/dev || { echo "no rbind /dev: copying nodes"; cp -a /dev/nvidia* /dev/null /dev/zero /dev/urandom $R/dev/ ; }
mount -t proc proc $R/proc || echo "no proc mount"
mount --rbind /sys $R/sys || echo "no sys mount"
mkdir -p $R/dev/shm; mount -t tmpfs tmpfs $R/dev/shm 2>/dev/null
chroot $R ldconfig
cp "$B/image.env" "$R/etc/environment"
mapfile -t E < "$B/image.env"
run() { echo; echo "== $1"; shift; timeout 120 chroot $R env -i HOME=/root TERM=dumb "${E[@]}" bash -lc "$*"; echo "rc=$?"; }
M="mpirun --allow-run-as-root --oversubscribe"
run "versions" 'ucx_info -v | head -2; ompi_info | grep -E "^ +(Open MPI|PMIx|Prte):" ; ompi_info --parsable --all | grep mpi_built_with_cuda_support:value'
echo; echo "== the image's own run checks (label io.imagekit.checks), each in a login shell"
python3 - "$R" "$B" <<'PY'
import json, re, subprocess, sys
root = sys.argv[1]
env = [l.rstrip("\n") for l in open(sys.argv[2] + "/image.env") if l.strip()]
for c in json.load(open(sys.argv[2] + "/checks.json")):
    if c.get("kind") != "run":
        continue
    p = subprocess.run(["timeout", "120", "chroot", root, "env", "-i", "HOME=/root", "TERM=dumb", *env, "bash", "-lc", c["run"]],
                       capture_output=True, text=True)
    out = p.stdout + p.stderr
    ok = p.returncode == 0 and (not c.get("expect") or re.search(c["expect"], out, re.M))
    print(f"{'PASS' if ok else 'FAIL'} {c['id']:<28} rc={p.returncode} needs={c.get('needs') or '-'}"
          + ("" if ok else f"  | {out.strip()[-240:]!r}"))
PY
run "plain-nvcc kernel program" 'imagekit-nvcc-kernel'
run "CUDA-aware MPI ring, 2 ranks, 4 MiB GPU memory" "$M -np 2 imagekit-cuda-mpi-ring"
run "CUDA-aware MPI ring, 2 ranks, 256 MiB GPU memory" "$M -np 2 imagekit-cuda-mpi-ring 268435456"
run "UCX transports seen" 'ucx_info -d | grep -E "Transport|Device" | sort | uniq -c | head -30'
for f in $R/usr/local/ucx/lib/ucx/libuct_cuda.so*; do mv "$f" "$aside/"; done
run "BROKEN: UCX's CUDA module removed (must fail)" "$M -np 2 imagekit-cuda-mpi-ring"
mv "$aside"/libuct_cuda.so* $R/usr/local/ucx/lib/ucx/
if [ -x $R/opt/libfabric/bin/fi_info ]; then
  # A fabric image (debian-efa): its gpu checks above moved CUDA memory over libfabric's shm provider
  # (libfabric.cuda_transfer) and had NCCL load aws-ofi-nccl with GPUDirect RDMA (aws-ofi-nccl.nccl_loads_it).
  # The same transfer with the name libfabric dlopens taken away (round 3's runtime, J1) must fail.
  run "libfabric CUDA interface on a GPU (FI_LOG_LEVEL=info)" 'env -u FI_PROVIDER FI_LOG_LEVEL=info FI_HMEM=cuda fi_info -p shm -c FI_HMEM 2>&1 | grep -iE "hmem|cuda|provider:" | head'
  mv $R/usr/local/cuda/lib64/libcudart.so "$aside/"; chroot $R ldconfig
  run "BROKEN: no libcudart.so, libfabric's CUDA memory off (must fail)" 'p=$((20000 + $$ % 10000)); fi_rdm_pingpong -p shm -D cuda -S 1048576 -I 20 -E=$p & s=$!; sleep 1; fi_rdm_pingpong -p shm -D cuda -S 1048576 -I 20 -E=$p 127.0.0.1; c=$?; wait $s; [ $c -eq 0 ]'
  mv "$aside/libcudart.so" $R/usr/local/cuda/lib64/; chroot $R ldconfig
fi
run "NCCL all_reduce_perf, 1 GPU, 8 B - 1 GiB" 'NCCL_DEBUG=VERSION all_reduce_perf -b 8 -e 1G -f 4 -g 1'
run "NCCL all_gather/sendrecv/alltoall under mpirun -np 1" "for t in all_gather sendrecv alltoall; do $M -np 1 \${t}_perf -b 1M -e 256M -f 4 -g 1 | grep -E '^ +[0-9]|wrong|Avg|Out of'; done"
umount -R $R/dev $R/sys $R/proc 2>/dev/null; umount $R/dev/shm 2>/dev/null
echo "done"
