"""Launch profiles: the environment (and Slurm placement) a kind of job needs, by name.

A profile is data, not code: environment variables every rank's container gets, and for
multi-node NVLink systems the number of nodes one NVLink domain holds, which the Slurm
launcher turns into a ``--segment`` request so that the job's one ``srun`` step gets each
run of nodes from one domain. ``--env`` values given by the user win over a profile's.

- ``nvl72``: GB200/GB300 NVL72. ``NVIDIA_IMEX_CHANNELS`` is read by libnvidia-container
  (Enroot's hook, the NVIDIA container toolkit) from the container's environment, and makes
  it create and inject ``/dev/nvidia-caps-imex-channels/channelN``: without it NCCL cannot
  import the other trays' memory and falls back to the NICs. ``NCCL_MNNVL_ENABLE=1`` makes
  multi-node NVLink mandatory (NCCL fails instead of silently using InfiniBand), as
  CoreWeave's GB200 job scripts do "to fail clearly if GB200 is not correctly functioning";
  ``NCCL_CUMEM_ENABLE=1`` (MNNVL needs cuMem buffers) and ``NCCL_NET_GDR_C2C=1`` (GPUDirect
  RDMA through Grace's C2C link for traffic that leaves the rack) come from the same scripts.
- ``nccl-bootstrap``: jobs whose collectives are NCCL's and whose MPI only starts the ranks
  (nccl-tests, torch.distributed launched by srun/mpirun): UCX limited to shared memory and
  TCP, so it opens no RDMA device and installs no CUDA memory hooks in a job that never
  gives it a GPU buffer (CoreWeave: "NCCL does not use UCX at all ... it can lead to
  crashes"), HCOLL off, and NCCL's bootstrap socket off loopback and container bridges
  (AWS's recipes). A CUDA-aware MPI job keeps the image's full UCX: do not use it there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from imagekit.errors import UsageError


@dataclass(frozen=True)
class Profile:
    name: str
    summary: str
    env: dict[str, str] = field(default_factory=dict)
    # Nodes in one multi-node NVLink domain (NVL72: 18 compute trays); None when NVLink ends at the node.
    domain_nodes: int | None = None
    gpus_per_node: int | None = None   # GPUs a node of the domain has (NVL72: 4)


PROFILES: dict[str, Profile] = {
    "nvl72": Profile(
        "nvl72", "GB200/GB300 NVL72: an IMEX channel in every container, multi-node NVLink required, and "
        "each run of up to 18 nodes from one rack (Slurm --segment)",
        env={"NVIDIA_IMEX_CHANNELS": "0", "NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1",
             "NCCL_NET_GDR_C2C": "1"},
        domain_nodes=18, gpus_per_node=4),
    "nccl-bootstrap": Profile(
        "nccl-bootstrap", "MPI only starts the ranks, NCCL does the collectives: UCX on shared memory and TCP "
        "only, HCOLL off, NCCL's socket off loopback and container bridges",
        env={"UCX_TLS": "self,sm,tcp", "OMPI_MCA_coll_hcoll_enable": "0",
             "NCCL_SOCKET_IFNAME": "^lo,docker,veth"}),
}


def get(names: tuple[str, ...] | list[str]) -> list[Profile]:
    """The named profiles, in order; a clear error for an unknown name."""
    out = []
    for name in names:
        if name not in PROFILES:
            raise UsageError(f"unknown launch profile {name!r}",
                             "profiles: " + "; ".join(f"{p.name} ({p.summary})" for p in PROFILES.values()))
        out.append(PROFILES[name])
    return out


def environment(profiles: list[Profile], user_env: dict[str, str]) -> dict[str, str]:
    """The profiles' variables under the user's own (``--env`` wins), profiles first in order given."""
    env: dict[str, str] = {}
    for profile in profiles:
        env.update(profile.env)
    return {**env, **user_env}


def segment(profiles: list[Profile], nodes: int, gpus_per_node: int) -> int | None:
    """The Slurm ``--segment`` size that keeps each run of nodes in one NVLink domain, or None.

    Slurm's topology/block plugin places a job in segments of that many nodes, each segment inside one
    block (the site defines one block per NVL72 rack): a job of up to a rack's nodes is one segment, a
    larger one is split into equal segments no larger than a rack. A node count that cannot be split so
    (a prime above 18) would spread ranks over racks where NCCL expects NVLink, so it is refused.
    """
    domains = [p for p in profiles if p.domain_nodes]
    if not domains:
        return None
    profile = domains[0]
    size = profile.domain_nodes or 0
    if profile.gpus_per_node and gpus_per_node > profile.gpus_per_node:
        raise UsageError(f"--gpus-per-node {gpus_per_node}: a node of an {profile.name} domain has "
                         f"{profile.gpus_per_node} GPUs", f"pass --gpus-per-node {profile.gpus_per_node}")
    if nodes <= size:
        return nodes
    best = max(d for d in range(1, size + 1) if nodes % d == 0)
    if best * 2 <= size and nodes % size:
        raise UsageError(f"{nodes} nodes cannot be split into equal runs of at most {size} nodes (one "
                         f"{profile.name} rack each) without runs of {best}",
                         f"use a multiple of {size} nodes (one whole rack each), or a node count with a divisor "
                         f"between {size // 2 + 1} and {size}")
    return best
