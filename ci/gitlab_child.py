"""The GitLab child pipeline for ci/gitlab-ci.yml: `imagekit matrix --json` on stdin, YAML on stdout.

Per matrix row one `build:` job on the row's runner tags: build (its cache from the registry), check,
export (Enroot squashfs, SIF, report; signed when IMAGEKIT_SIGNING_KEY is set), and on the default branch
push with both exports beside the image. Per variant of several arches one `index:` job joins its
per-arch pushes under one tag. Per row with a system model (IMAGEKIT_VALIDATE) one `validate:` job on the
row's GPU runner tags, on schedules and manual runs. The row's values become the job's variables, so the
script is the same for every job and no stack name reaches a shell line unquoted.
"""

from __future__ import annotations

import json
import sys

import yaml

# What the job image lacks (docker:27 is Alpine): the tools and imagekit itself.
SETUP = [
    "apk add --no-cache python3 py3-pip squashfs-tools debootstrap bash",
    "python3 -m pip install --break-system-packages '.[test]'",
]

# The signing key: a File variable (a path) or the key's text (copied to KEY_COPY, which after_script
# removes); "$@" carries `--sign KEY` to every command that signs.
KEY_COPY = "/tmp/imagekit-signing-$CI_JOB_ID.key"
SIGNING = (
    'set --; if [ -n "$IMAGEKIT_SIGNING_KEY" ]; then key="$IMAGEKIT_SIGNING_KEY"; '
    'if [ ! -f "$key" ]; then key="$KEY_COPY"; (umask 077 && printf "%s\\n" "$IMAGEKIT_SIGNING_KEY" > "$key"); fi; '
    'set -- --sign "$key"; echo "signing with IMAGEKIT_SIGNING_KEY"; '
    'else echo "not signing: IMAGEKIT_SIGNING_KEY is not set"; fi'
)

LOGIN = (
    'if [ -n "$IMAGEKIT_REGISTRY" ]; then '
    'printf "%s" "${IMAGEKIT_REGISTRY_PASSWORD:-$CI_REGISTRY_PASSWORD}" | docker login "${IMAGEKIT_REGISTRY%%/*}" '
    '-u "${IMAGEKIT_REGISTRY_USER:-$CI_REGISTRY_USER}" --password-stdin; fi'
)

BUILD = [
    'export IMAGEKIT_STACKS_PATH="$IMAGEKIT_STACKS_DIR"',
    LOGIN,
    SIGNING,
    'if [ -n "$IMAGEKIT_REGISTRY" ]; then cache="$IMAGEKIT_REGISTRY/$ID:cache"; '
    'imagekit build "$STACK_FILE" --variant "$VARIANT" --platform "$PLATFORM" --cache-from "$cache" --inline-cache '
    '--json > build.json; else imagekit build "$STACK_FILE" --variant "$VARIANT" --platform "$PLATFORM" --json '
    '> build.json; fi',
    'imagekit check "$IMAGE" --junit "checks-$ID.xml"',
    "mkdir -p out",
    'imagekit export "$IMAGE" --to enroot -o "out/$ID.sqsh" "$@" --json',
    'imagekit export "$IMAGE" --to sif -o "out/$ID.sif" "$@" --json',
    'imagekit report "$IMAGE" --json > "out/$ID.report.json"',
    'if [ "$CI_COMMIT_BRANCH" = "$CI_DEFAULT_BRANCH" ] && [ -n "$IMAGEKIT_REGISTRY" ]; then '
    'imagekit push "$IMAGE" --to "$IMAGEKIT_REGISTRY/$VARIANT:$(printf %.12s "$CI_COMMIT_SHA")$PUSH_SUFFIX" '
    '--with enroot,sif "$@" --json && imagekit push "$IMAGE" --to "$IMAGEKIT_REGISTRY/$ID:cache" --json; fi',
]

# An offline stack's base is bootstrapped here first (debian-cuda12's toolkit is Debian 13's, in non-free).
BASE = [
    'base=$(imagekit show "$STACK_FILE" --variant "$VARIANT" --platform "$PLATFORM" --json '
    "| python3 -c 'import json, sys; print(json.load(sys.stdin)[\"base\"][\"image\"])')",
    'case "$base" in imagekit/debian:trixie*) imagekit base debian:trixie --components main,contrib,non-free '
    '--arch "${PLATFORM#linux/}" ;; *) imagekit base debian:bookworm --arch "${PLATFORM#linux/}" ;; esac',
]

INDEX = [
    'tag="$(printf %.12s "$CI_COMMIT_SHA")"; repo="$IMAGEKIT_REGISTRY/$VARIANT"',
    LOGIN,
    'imagekit push "docker://$repo:$tag-amd64" "docker://$repo:$tag-arm64" --to "$repo:$tag" --json',
]

def _row_variables(row: dict) -> dict[str, str]:
    return {"STACK_FILE": row["file"], "VARIANT": row["variant"], "ID": row["id"], "PLATFORM": row["platform"],
            "IMAGE": row["image"], "PUSH_SUFFIX": row["push_suffix"]}


# What a validate job runs (the GitHub workflow's validate steps), on a shell runner of a Slurm login node
# with Pyxis, with the image's carries as shell variables, gated on the row's own system model.
VALIDATE = [
    'test -n "$SYSTEM" || { echo "this row has no system model (IMAGEKIT_VALIDATE: ROW=SYSTEM)" >&2; exit 1; }',
    'NODES=${IMAGEKIT_VALIDATE_NODES:-2}; TRANSPORT=${IMAGEKIT_VALIDATE_TRANSPORT:-IB}',
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


def child_pipeline(rows: list[dict]) -> dict:
    """The child pipeline's document for the matrix ``rows``."""
    doc: dict = {"stages": ["build", "index", "validate"]}
    for row in rows:
        doc[f"build:{row['id']}"] = {
            "stage": "build",
            "image": "$IMAGEKIT_DOCKER_IMAGE",
            "services": ["docker:dind"],
            # dind's TLS certificates, shared through the runner's /certs/client volume.
            "variables": {**_row_variables(row), "DOCKER_TLS_CERTDIR": "/certs", "KEY_COPY": KEY_COPY},
            # The runner of the row's architecture: its RUN steps run natively there.
            "tags": list(row["runner"]),
            "script": SETUP + (BASE if row["offline"] else []) + BUILD,
            "after_script": ['rm -f "$KEY_COPY"'],
            "artifacts": {"when": "always", "expire_in": "1 week",
                          "paths": ["out/", "build.json", "build/logs/"],
                          "reports": {"junit": f"checks-{row['id']}.xml"}},
        }
    for variant in sorted({r["variant"] for r in rows if r["index"]}):
        builds = [f"build:{r['id']}" for r in rows if r["variant"] == variant]
        doc[f"index:{variant}"] = {
            "stage": "index",
            "image": "$IMAGEKIT_DOCKER_IMAGE",
            "services": ["docker:dind"],
            "variables": {"VARIANT": variant, "DOCKER_TLS_CERTDIR": "/certs"},
            "needs": builds,
            "rules": [{"if": '$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH && $IMAGEKIT_REGISTRY != ""'}],
            "script": SETUP + INDEX,
        }
    for row in [r for r in rows if r["system"]]:
        doc[f"validate:{row['id']}"] = {
            "stage": "validate",
            "variables": {**_row_variables(row), "SYSTEM": row["system"]},
            "tags": list(row["gpu_runner"]),
            "needs": [{"job": f"build:{row['id']}", "artifacts": True}],
            # A child pipeline's own source is always parent_pipeline: the parent's is passed down.
            "rules": [{"if": '$IMAGEKIT_PARENT_SOURCE == "schedule" || $IMAGEKIT_PARENT_SOURCE == "web"'}],
            "script": VALIDATE,
            "artifacts": {"when": "always", "expire_in": "1 week",
                          "paths": ["nccl-*.log", "cuda-mpi.log", "torch.log", "verdict.json"]},
        }
    return doc


def main() -> None:
    yaml.safe_dump(child_pipeline(json.load(sys.stdin)), sys.stdout, sort_keys=False, width=200)


if __name__ == "__main__":
    main()
