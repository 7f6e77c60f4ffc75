#!/usr/bin/env python3
"""What an image carries, for the GPU validation job's step conditions, from `imagekit report --json`.

    python scripts/image_carries.py out/VARIANT.report.json >> "$GITHUB_OUTPUT"

Prints ``nccl_tests=true|false``, ``cuda_mpi=true|false`` (a CUDA-aware Open MPI, which builds the
imagekit-cuda-mpi-ring probe) and ``pytorch=true|false``, one a line.
"""

from __future__ import annotations

import json
import sys


def carries(report: dict) -> dict[str, bool]:
    components = {c["name"]: c for c in report.get("components", [])}
    mpi = components.get("openmpi", {})
    return {
        "nccl_tests": "nccl-tests" in components,
        "cuda_mpi": (mpi.get("facts") or {}).get("cuda") == "true",
        "pytorch": "pytorch" in components,
    }


def main(path: str) -> None:
    with open(path) as f:
        report = json.load(f)
    for key, value in carries(report).items():
        print(f"{key}={str(value).lower()}")


if __name__ == "__main__":
    main(sys.argv[1])
