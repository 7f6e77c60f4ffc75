"""Stub images for the checks of components that cannot be built on this machine.

The real offline image (OpenMPI, UCX, PMIx, rdma-core from Debian) gets, on top,
stand-ins for what only exists with NVIDIA's packages, a GPU or a fabric: the
tools print the output formats documented by (and read from the sources of)
UCX's ``ucx_info``, Open MPI's ``ompi_info``/``mpirun``, PMIx's ``pmix_info``,
``nvidia-smi -L``, rdma-core's ``ibv_devinfo -l`` and nccl-tests' result footer;
the libraries are real ELF shared objects with the
vendor's SONAME, compiled here (libnccl.so.2 answers ``ncclGetVersion``).

``Facts`` holds what the stubs report. ``GOOD`` is what a correct image of the
CUDA stacks reports; ``BROKEN`` is the same formats with the facts of a broken
build (wrong version, CPU-only wheel, internal PMIx ...),
and ``BREAK_SCRIPT`` removes what presence checks look for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from imagekit.engines import docker as engine

SITE = "/usr/lib/python3/dist-packages"  # on every Debian python3's path, whatever its version
LIBDIR = "/usr/lib/x86_64-linux-gnu"
CUDA = "/usr/local/cuda-12.4"
NCCL_TESTS = ("all_reduce_perf", "all_gather_perf", "alltoall_perf", "broadcast_perf",
              "reduce_scatter_perf", "sendrecv_perf")

# Memory domain and component of each UCX transport, as ``ucx_info -d`` groups them.
UCX_DOMAINS = {
    "self": ("self", "self", "memory"), "tcp": ("tcp", "tcp", "eth0"), "sysv": ("sysv", "sysv", "memory"),
    "posix": ("posix", "posix", "memory"), "cma": ("cma", "cma", "memory"),
    "cuda_copy": ("cuda_cpy", "cuda_cpy", "cuda"), "cuda_ipc": ("cuda_ipc", "cuda_ipc", "cuda"),
    "gdr_copy": ("gdr_copy", "gdr_copy", "cuda"),
    "rc_verbs": ("mlx5_0", "ib", "mlx5_0:1"), "rc_mlx5": ("mlx5_0", "ib", "mlx5_0:1"),
    "dc_mlx5": ("mlx5_0", "ib", "mlx5_0:1"), "ud_verbs": ("mlx5_0", "ib", "mlx5_0:1"),
    "ud_mlx5": ("mlx5_0", "ib", "mlx5_0:1"),
}


@dataclass(frozen=True)
class Facts:
    ucx_version: str = "1.20.1"
    ucx_transports: tuple[str, ...] = tuple(UCX_DOMAINS)
    ompi_version: str = "5.0.10"
    pmls: tuple[str, ...] = ("cm", "ob1", "ucx")
    pmix_component: str = "ext3x"       # OpenMPI 4.1's component for an external PMIx >= 3
    with_pmix: str = "/usr/local/pmix"  # Open MPI 5's configure line (ompi_info --parsable): no pmix framework
    ras: tuple[str, ...] = ("simulator", "slurm")
    schizo: tuple[str, ...] = ("flux", "ompi", "orte", "slurm")  # 4.x: "slurm" is srun direct launch
    psec: tuple[str, ...] = ("munge", "native", "none")          # PMIx's security plugins
    ompi_cuda: bool = True
    pmix_version: str = "5.0.10"
    python_version: str = "3.10.12"     # Ubuntu 22.04's python3, the CUDA stacks' base
    torch_version: str = "2.5.1+cu124"
    torch_nccl: bool = True
    torch_cuda: bool = True
    hcas: tuple[str, ...] = ("mlx5_0", "mlx5_1")
    nccl_code: int = 23004              # NCCL 2.30.4: major*10000 + minor*100 + patch
    ucx_mt: bool = True                 # ucx_info -b: ENABLE_MT (built with --enable-mt)
    ucx_cuda_build: bool = True         # ucx_info -b: HAVE_CUDA
    torch_nccl_version: tuple = (2, 21, 5)  # torch.cuda.nccl.version(): the nvidia-nccl-cu12 torch 2.5.1 pins


GOOD = Facts()
BROKEN = Facts(
    ucx_version="1.16.0", ucx_transports=("self", "tcp", "sysv", "posix", "cma"),  # no CUDA build, no HCA
    ompi_version="4.1.2", pmls=("cm", "ob1"), pmix_component="pmix3x",  # distro-like MPI, internal PMIx
    ras=("simulator",), schizo=("ompi", "orte"), psec=("native", "none"), ompi_cuda=False, pmix_version="4.1.2", with_pmix="internal", python_version="3.9.2",
    torch_version="2.5.1+cpu", torch_nccl=False, torch_cuda=False,      # the CPU wheel
    hcas=(),                                                             # "0 HCAs found:"
    ucx_mt=False, ucx_cuda_build=False,                                  # UCX's default configure
    torch_nccl_version=(2, 23, 4),                                       # a system NCCL preloaded over torch's
)

# Presence checks fail because the thing is gone (or where the loader does not look);
# "absent" checks fail because a forbidden file is baked in.
BREAK_SCRIPT = f"""set -e
rm -f /usr/local/bin/nvidia-smi
rm -f {CUDA}/lib64/libcudart.so*
rm -f /usr/local/gdrcopy/lib/libgdrapi.so*
mkdir -p /opt/misplaced && mv {LIBDIR}/libnccl.so* /opt/misplaced/
rm -f {LIBDIR}/libucp.so.0* {LIBDIR}/libpmix.so.2* {LIBDIR}/libibverbs.so.1*
rm -f {LIBDIR}/libibverbs/libmlx5-rdmav*.so
rm -f /usr/bin/pmix_info /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/orterun /usr/bin/mpirun.openmpi
rm -rf /usr/lib/python3/dist-packages/mpi4py {SITE}/numpy
rm -f /usr/local/nccl-tests/bin/*_perf
rm -f /usr/local/ucx/lib/ucx/libuct_cuda.so.0 /usr/local/nvbandwidth/bin/nvbandwidth
rm -f /usr/sbin/sshd /usr/bin/ssh
rm -f /usr/sbin/ibstat /usr/bin/ib_write_bw
rm -f /etc/profile.d/00-imagekit-environment.sh
sed -i 's/^PasswordAuthentication no/PasswordAuthentication yes/' /etc/ssh/sshd_config.d/imagekit.conf
ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
mkdir -p /root/.ssh && ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519
mkdir -p /root/.docker && echo '{{"auths":{{}}}}' > /root/.docker/config.json
ldconfig
"""

# The repo NCCL of the CUDA stacks lives in the multiarch directory; the offline image's wheel
# NCCL (/usr/local/nccl) would otherwise answer for libnccl.so.2 first.
SETUP_SCRIPT = f"""set -e
rm -rf /usr/local/nccl /etc/ld.so.conf.d/nccl.conf
ln -s cuda-12.4 /usr/local/cuda
ln -sf libcudart.so.12.4.127 {CUDA}/lib64/libcudart.so.12
ln -sf libgdrapi.so.2.4 /usr/local/gdrcopy/lib/libgdrapi.so.2
ln -sf libnccl.so.2.28.9 {LIBDIR}/libnccl.so.2
chmod 755 /usr/local/bin/* /usr/local/pmix/bin/* /usr/local/nccl-tests/bin/*
ldconfig
"""

STUB_C = """/* Stand-in for a vendor library that cannot be installed here: only its SONAME matters,
 * and for NCCL the version it reports. */
#ifdef NCCL_CODE
int ncclGetVersion(int *version) { *version = NCCL_CODE; return 0; }
/* NCCL's own VERSION_STRING, which the library carries as text. */
const char imagekit_nccl_version[] = NCCL_VERSION_STRING;
#endif
int imagekit_stub_library(void) { return 0; }
"""


def _sh(body: str) -> str:
    return "#!/bin/sh\n# imagekit test stub: prints the real tool's documented output format.\n" + body


def _ucx_info(f: Facts) -> str:
    version = "\n".join([f"# Library version: {f.ucx_version}", "# Library path: /usr/local/ucx/lib/libucs.so.0",
                         f"# API headers version: {f.ucx_version}", "# Git branch '', revision 0000000",
                         "# Configured with: --prefix=/usr/local/ucx --disable-static"])
    # ucx_info -b prints config.h: one #define per line.
    build = "\n".join([f"#define ENABLE_MT                 {int(f.ucx_mt)}", "#define HAVE_CMA                  1"]
                      + (["#define HAVE_CUDA                 1", "#define HAVE_CUDA_H               1"]
                         if f.ucx_cuda_build else []))
    lines, domain = [], None
    for tl in f.ucx_transports:
        md, component, device = UCX_DOMAINS[tl]
        if md != domain:
            lines += ["#", f"# Memory domain: {md}", f"#     Component: {component}"]
            domain = md
        kind = "network" if component in ("ib", "tcp") else ("accelerator" if device == "cuda" else "intra-node")
        lines += ["#", f"#      Transport: {tl}", f"#         Device: {device}", f"#           Type: {kind}"]
    return _sh(f"""case "$1" in
  -v) cat <<'EOF'
{version}
EOF
  ;;
  -d) cat <<'EOF'
{chr(10).join(lines)}
EOF
  ;;
  -b) cat <<'EOF'
{build}
EOF
  ;;
  *) echo "ucx_info stub: only -v, -d and -b" >&2; exit 1 ;;
esac
""")


def _ompi_info(f: Facts) -> str:
    comp = f"(MCA v2.1.0, API v2.0.0, Component v{f.ompi_version})"
    rows = [("Package", "Open MPI root@buildhost Distribution"), ("Open MPI", f.ompi_version),
            ("Prefix", "/usr/local/openmpi")]
    rows += [("MCA pmix", f"{c} {comp}") for c in ("isolated", f.pmix_component)]
    rows += [("MCA ras", f"{c} {comp}") for c in f.ras]
    rows += [("MCA pml", f"{c} {comp}") for c in f.pmls]
    rows += [("MCA schizo", f"{c} (MCA v2.1.0, API v1.0.0, Component v{f.ompi_version})") for c in f.schizo]
    text = "\n".join(f"{k:>24}: {v}" for k, v in rows)
    cuda = str(f.ompi_cuda).lower()
    parsable = "\n".join([
        f"mca:opal:base:param:opal_built_with_cuda_support:value:{cuda}",
        "mca:opal:base:param:opal_built_with_cuda_support:synonym:name:mpi_built_with_cuda_support",
        f"mca:mpi:base:param:mpi_built_with_cuda_support:value:{cuda}",
        "mca:mpi:base:param:mpi_built_with_cuda_support:source:default",
        "mca:mpi:base:param:mpi_built_with_cuda_support:status:read-only",
        "mca:mpi:base:param:mpi_built_with_cuda_support:type:bool",
        f"config:cli:'--prefix=/usr/local/openmpi' '--with-pmix={f.with_pmix}' '--with-ucx=/usr/local/ucx'",
    ])
    return _sh(f"""case "$*" in
  *--parsable*) cat <<'EOF'
{parsable}
EOF
  ;;
  *) cat <<'EOF'
{text}
EOF
  ;;
esac
""")


def _mpirun(f: Facts) -> str:
    # Only the version banner is stubbed: ranks are started by the image's real OpenMPI.
    return _sh(f"""if [ "$1" = --version ]; then
  printf 'mpirun (Open MPI) {f.ompi_version}\\n\\nReport bugs to the Open MPI project\\n'
  exit 0
fi
exec /usr/bin/mpirun "$@"
""")


def _prte_info(f: Facts) -> str:
    # Open MPI 5 launches through PRRTE, whose prte_info lists the resource managers it can read.
    comp = f"(MCA v2.1.0, API v2.0.0, Component v{f.ompi_version})"
    rows = [("PRRTE", "3.0.13"), ("Prefix", "/usr/local/openmpi")] + [("MCA ras", f"{c} {comp}") for c in f.ras]
    return _sh("cat <<'EOF'\n" + "\n".join(f"{k:>24}: {v}" for k, v in rows) + "\nEOF\n")


def _pmix_info(f: Facts) -> str:
    rows = [("Package", "PMIx root@buildhost Distribution"), ("PMIX", f.pmix_version),
            ("PMIX Standard", "4.2"), ("PMIX Standard ABI", "Stable (0.0), Provisional (0.0)"),
            ("Prefix", "/usr/local/pmix")]
    rows += [("MCA psec", f"{c} (MCA v2.1.0, API v1.0.0, Component v{f.pmix_version})") for c in f.psec]
    return _sh("cat <<'EOF'\n" + "\n".join(f"{k:>24}: {v}" for k, v in rows) + "\nEOF\n")


def _python3(f: Facts) -> str:
    # The CUDA stacks' base has Ubuntu 22.04's Python; everything but the version runs the real one.
    return _sh(f"""case "$1" in --version|-V) echo "Python {f.python_version}"; exit 0 ;; esac
exec /usr/bin/python3 "$@"
""")


def _nvidia_smi() -> str:
    return _sh("""if [ "$1" = -L ]; then
  echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-3f1c2a9e-7b0d-4e55-9a61-0c8d2b7e4f10)"
  exit 0
fi
echo "nvidia-smi stub: only -L" >&2; exit 2
""")


def ibv_devinfo_list(hcas: tuple[str, ...]) -> str:
    """``ibv_devinfo -l`` as rdma-core prints it: "%d HCA%s found:", a tab and a name a line, an empty line."""
    n = len(hcas)
    return f"{n} HCA{'s' if n != 1 else ''} found:\n" + "".join(f"\t{h}\n" for h in hcas) + "\n"


def _ibv_devinfo(f: Facts) -> str:
    return _sh(f"""case "$1" in
  -l|--list) cat <<'EOF'
{ibv_devinfo_list(f.hcas)[:-1]}
EOF
  ;;
  *) echo "ibv_devinfo stub: only -l" >&2; exit 255 ;;
esac
""")


def _cuda_mpi_ring(f: Facts) -> str:
    """imagekit-cuda-mpi-ring (data/cuda-mpi-ring.c): `--built` answers from the MPI it was compiled against;
    under mpirun each rank reports and rank 0 prints the verdict, as the real probe does on a GPU."""
    ok = "passed" if f.ompi_cuda else "FAILED"
    built = ("built against a CUDA-aware MPI (MPIX_CUDA_AWARE_SUPPORT 1), CUDA runtime 12040" if f.ompi_cuda
             else "built against an MPI without CUDA support (no MPIX_CUDA_AWARE_SUPPORT), CUDA runtime 12040")
    return _sh(f"""if [ "$1" = --built ]; then
  echo "imagekit-cuda-mpi-ring: {built}"; {"exit 0" if f.ompi_cuda else "exit 1"}
fi
rank=${{OMPI_COMM_WORLD_RANK:-0}}; size=${{OMPI_COMM_WORLD_SIZE:-1}}
echo "imagekit-cuda-mpi-ring: rank $rank of $size on stubhost, GPU 0 (NVIDIA H100 80GB HBM3): {"ok" if f.ompi_cuda else "FAILED"}"
[ "$rank" = 0 ] && echo "imagekit-cuda-mpi-ring: $size ranks, ring of 4194304 bytes of GPU memory and allreduce {ok}"
{"exit 0" if f.ompi_cuda else "exit 1"}
""")


def _nvbandwidth() -> str:
    # nvbandwidth's per-testcase summary line ("SUM <testcase> <GB/s>").
    return _sh("""echo "Running device_to_device_memcpy_read_ce."
echo "SUM device_to_device_memcpy_read_ce 6004.93"
""")


def _nccl_test(name: str) -> str:
    # nccl-tests' header, two result rows and the footer (writeResultFooter: "# %-20s : %g %s").
    return _sh(f"""cat <<'EOF'
# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid      1 on  stubhost device  0 [0x18] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1     9.10    0.00    0.00      0     8.95    0.00    0.00      0
     1048576        262144     float     sum      -1    14.71   71.28    0.00      0    14.52   72.22    0.00      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0 
#
# Collective test concluded: {name}
EOF
""")


def rootfs_files(f: Facts) -> dict[str, str]:
    """Text files of the stub layer, by absolute path inside the image."""
    files = {
        "/usr/local/bin/ucx_info": _ucx_info(f),
        "/usr/local/bin/ompi_info": _ompi_info(f),
        "/usr/local/bin/mpirun": _mpirun(f),
        "/usr/local/bin/python3": _python3(f),
        "/usr/local/bin/nvidia-smi": _nvidia_smi(),
        "/usr/local/bin/ibv_devinfo": _ibv_devinfo(f),
        "/usr/local/pmix/bin/pmix_info": _pmix_info(f),
        "/usr/local/bin/prte_info": _prte_info(f),
        f"{SITE}/torch/__init__.py": f'"""Stub of PyTorch {f.torch_version} (imagekit tests)."""\n'
                                     f'__version__ = "{f.torch_version}"\nfrom . import cuda, distributed\n',
        f"{SITE}/torch/cuda.py": f"def is_available():\n    return {f.torch_cuda}\n\n\n"
                                 f"class nccl:\n    @staticmethod\n    def version():\n"
                                 f"        return {f.torch_nccl_version!r}\n",
        f"{SITE}/torch/distributed.py": f"def is_nccl_available():\n    return {f.torch_nccl}\n",
        f"{SITE}/numpy/__init__.py": '"""Stub of numpy (imagekit tests)."""\n__version__ = "1.21.5"\n',
        "/etc/ld.so.conf.d/gdrcopy.conf": "/usr/local/gdrcopy/lib\n",
        "/usr/local/bin/imagekit-cuda-mpi-ring": _cuda_mpi_ring(f),
        "/usr/local/ucx/lib/ucx/libuct_cuda.so.0": "stand-in for UCX's CUDA transports module\n",
        "/usr/local/nvbandwidth/bin/nvbandwidth": _nvbandwidth(),
    }
    files.update({f"/usr/local/nccl-tests/bin/{b}": _nccl_test(b) for b in NCCL_TESTS})
    return files


def compile_libraries(out: Path, nccl_code: int) -> dict[str, Path]:
    """Real ELF shared objects with the vendors' SONAMEs, built with the host's gcc."""
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed on the host to compile the stub libraries (apt-get install gcc)"
    src = out / "stub.c"
    src.write_text(STUB_C)
    libs = {f"{CUDA}/lib64/libcudart.so.12.4.127": ("libcudart.so.12", []),
            "/usr/local/gdrcopy/lib/libgdrapi.so.2.4": ("libgdrapi.so.2", []),
            f"{LIBDIR}/libnccl.so.2.28.9": ("libnccl.so.2", [
                f"-DNCCL_CODE={nccl_code}",
                f'-DNCCL_VERSION_STRING="NCCL version {nccl_code // 10000}.{nccl_code // 100 % 100}.'
                f'{nccl_code % 100}+cuda12.4"'])}
    built = {}
    for dest, (soname, defines) in libs.items():
        target = out / Path(dest).name
        subprocess.run([gcc, "-shared", "-fPIC", "-O2", f"-Wl,-soname,{soname}", *defines, "-o", str(target),
                        str(src)], check=True, capture_output=True, text=True)
        built[dest] = target
    return built


def build(base: str, tag: str, facts: Facts, script: str, context: Path, libraries: dict[str, Path] | None = None,
          env: dict[str, str] | None = None) -> str:
    """``FROM base`` + the stub files of ``facts`` (+ libraries) + ``script``, tagged ``tag``."""
    root = context / "rootfs"
    for path, text in rootfs_files(facts).items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if text.startswith("#!"):
            target.chmod(0o755)
    for path, built in (libraries or {}).items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(built, target)
    (context / "script.sh").write_text(script)
    lines = [f"FROM {base}", "COPY rootfs/ /", "COPY script.sh /tmp/stub-script.sh",
             "RUN sh /tmp/stub-script.sh && rm /tmp/stub-script.sh"]
    lines += [f"ENV {k}={v}" for k, v in (env or {}).items()]
    (context / "Dockerfile").write_text("\n".join(lines) + "\n")
    done = subprocess.run([engine.docker_cli(), "build", "-q", "-t", tag, str(context)],
                          capture_output=True, text=True, env={**os.environ, "DOCKER_BUILDKIT": "1"})
    assert done.returncode == 0, f"stub image {tag} did not build:\n{done.stderr[-3000:]}"
    return tag


def remove(*tags: str) -> None:
    subprocess.run([engine.docker_cli(), "rmi", "-f", *tags], capture_output=True)
