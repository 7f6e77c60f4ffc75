"""The GitLab child pipeline for ci/gitlab-ci.yml: `imagekit matrix --json` on stdin, YAML on stdout.

One job per matrix row: build, check and export (Enroot squashfs, SIF, report), and on the default
branch push to $IMAGEKIT_REGISTRY. The row's values become the job's variables, so the script is
the same for every job and no stack name reaches a shell line unquoted.

With IMAGEKIT_VALIDATE=1 (a scheduled or manual pipeline), one GPU validate job per row follows its build
job, as the GitHub workflow's validate job does: on a runner tagged with the row's system model (the
catalogue model whose ``stacks:`` names it: the V100 image on a V100 runner) and judged by that model,
never by one model for every leg. It runs what the image carries: nccl-tests across nodes against the
model's band and transport, the CUDA-aware MPI ring, a torch.distributed all-reduce.
"""

from __future__ import annotations

import json
import sys

import yaml

SCRIPT = [
    'export IMAGEKIT_STACKS_PATH="$IMAGEKIT_STACKS_DIR"',
    "apk add --no-cache python3 py3-pip squashfs-tools debootstrap bash",
    "python3 -m pip install --break-system-packages '.[test]'",
    'if [ -n "$IMAGEKIT_REGISTRY" ]; then '
    'printf "%s" "$CI_REGISTRY_PASSWORD" | docker login "${IMAGEKIT_REGISTRY%%/*}" -u "$CI_REGISTRY_USER" '
    "--password-stdin; fi",
    'imagekit build "$STACK_FILE" --variant "$VARIANT" --platform "$PLATFORM" --json > build.json',
    'imagekit check "$IMAGE" --junit "checks-$ID.xml"',
    "mkdir -p out",
    'imagekit export "$IMAGE" --to enroot -o "out/$ID.sqsh" --json',
    'imagekit export "$IMAGE" --to sif -o "out/$ID.sif" --json',
    'imagekit report "$IMAGE" --json > "out/$ID.report.json"',
    'if [ "$CI_COMMIT_BRANCH" = "$CI_DEFAULT_BRANCH" ] && [ -n "$IMAGEKIT_REGISTRY" ]; then '
    'imagekit push "$IMAGE" --to "$IMAGEKIT_REGISTRY/$VARIANT:${CI_COMMIT_SHA:0:12}$PUSH_SUFFIX" --json; fi',
]

# An offline stack's base is bootstrapped here first (debian-cuda12's toolkit is Debian 13's, in non-free).
BASE = [
    'base=$(imagekit show "$VARIANT" --platform "$PLATFORM" --json '
    "| python3 -c 'import json, sys; print(json.load(sys.stdin)[\"base\"][\"image\"])')",
    'case "$base" in imagekit/debian:trixie*) imagekit base debian:trixie --components main,contrib,non-free '
    '--arch "${PLATFORM#linux/}" ;; *) imagekit base debian:bookworm --arch "${PLATFORM#linux/}" ;; esac',
]


# What a validate job runs (the GitHub workflow's validate steps), with the image's carries as shell variables.
VALIDATE = [
    'test -n "$SYSTEM" || { echo "no system model lists $ID: add it to a model\'s stacks:" >&2; exit 1; }',
    'test "$NODES" -ge 2 || { echo "IMAGEKIT_VALIDATE_NODES must be at least 2 (the inter-node path)" >&2; exit 1; }',
    "python3 -m pip install .",
    'eval "$(python3 scripts/image_carries.py "out/$ID.report.json")"',
    'imagekit preflight --image "./out/$ID.sqsh"',
    'if [ "$nccl_tests" = true ]; then gpus=$(nvidia-smi -L | wc -l); for i in 1 2 3; do '
    "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET,TUNING "
    'srun --mpi=pmix -N "$NODES" --ntasks-per-node="$gpus" --gpus-per-task=1 --container-image="./out/$ID.sqsh" '
    'all_reduce_perf -b 8 -e 8G -f 2 -g 1 > "nccl-$i.log"; done; '
    'imagekit validate nccl-1.log nccl-2.log nccl-3.log --systems-dir systems --system "$SYSTEM" '
    '--expect-transport "$TRANSPORT" --min-runs 3 --json > verdict.json; fi',
    'if [ "$cuda_mpi" = true ]; then srun --mpi=pmix -N "$NODES" --ntasks-per-node=2 --gpus-per-task=1 '
    '--container-image="./out/$ID.sqsh" imagekit-cuda-mpi-ring | tee cuda-mpi.log; '
    'grep -q "ring of [0-9]* bytes of GPU memory and allreduce passed" cuda-mpi.log; fi',
    'if [ "$pytorch" = true ]; then MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 srun --mpi=pmix -N 1 --ntasks=2 '
    '--gpus-per-task=1 --container-image="./out/$ID.sqsh" --container-env=MASTER_ADDR,MASTER_PORT '
    '--container-mounts="$PWD/scripts:/imagekit-scripts:ro" python3 /imagekit-scripts/torch_allreduce.py '
    '| tee torch.log; grep -q "torch.distributed all_reduce over nccl on 2 ranks: ok" torch.log; fi',
]


def validate_job(row: dict) -> dict:
    """The GPU validate job of one matrix row: on its system model's runners, judged by that model."""
    return {
        "stage": "validate",
        "rules": [{"if": '$IMAGEKIT_VALIDATE == "1"'}],
        "needs": [{"job": f"build:{row['id']}", "artifacts": True}],
        # GPU runners with Slurm and Pyxis, of the row's architecture, labelled with the system model.
        "tags": ["gpu", row["arch"], row["system"]],
        "variables": {"ID": row["id"], "SYSTEM": row["system"], "NODES": "$IMAGEKIT_VALIDATE_NODES",
                      "TRANSPORT": "$IMAGEKIT_VALIDATE_TRANSPORT"},
        "script": VALIDATE,
        "artifacts": {"when": "always", "expire_in": "1 week",
                      "paths": ["nccl-*.log", "cuda-mpi.log", "torch.log", "verdict.json"]},
    }


def child_pipeline(rows: list[dict]) -> dict:
    """The child pipeline's document for the matrix ``rows``."""
    doc: dict = {"stages": ["build", "validate"]}
    for row in rows:
        doc[f"build:{row['id']}"] = {
            "stage": "build",
            "image": "$IMAGEKIT_DOCKER_IMAGE",
            "services": ["docker:dind"],
            # The runner of the row's architecture: its RUN steps run natively there.
            "tags": [row["arch"]],
            "variables": {"STACK_FILE": row["file"], "VARIANT": row["variant"], "ID": row["id"],
                          "PLATFORM": row["platform"], "IMAGE": row["image"], "PUSH_SUFFIX": row["push_suffix"]},
            "script": SCRIPT[:3] + (BASE if row["offline"] else []) + SCRIPT[3:],
            "artifacts": {"when": "always", "expire_in": "1 week",
                          "paths": ["out/", "build.json", "build/logs/"],
                          "reports": {"junit": f"checks-{row['id']}.xml"}},
        }
        if row.get("system"):
            doc[f"validate:{row['id']}"] = validate_job(row)
    return doc


def main() -> None:
    yaml.safe_dump(child_pipeline(json.load(sys.stdin)), sys.stdout, sort_keys=False, width=200)


if __name__ == "__main__":
    main()
