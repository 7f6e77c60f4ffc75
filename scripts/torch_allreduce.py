#!/usr/bin/env python3
"""A torch.distributed all-reduce over NCCL, one rank per GPU, started by srun (the GPU validation job).

Each rank takes its place from Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) and the rendezvous from
MASTER_ADDR/MASTER_PORT, all-reduces a tensor of ones on its GPU and checks the sum; rank 0 prints
``torch.distributed all_reduce over nccl on N ranks: ok``. Exit 1 on a wrong sum.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    local = int(os.environ.get("SLURM_LOCALID", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world)
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    ok = bool(torch.all(x == world).item())
    dist.destroy_process_group()
    if rank == 0:
        print(f"torch.distributed all_reduce over nccl on {world} ranks: {'ok' if ok else 'WRONG SUM'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
