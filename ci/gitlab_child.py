"""The GitLab child pipeline for ci/gitlab-ci.yml: `imagekit matrix --json` on stdin, YAML on stdout.

One job per matrix row: build, check and export (Enroot squashfs, SIF, report), and on the default
branch push to $IMAGEKIT_REGISTRY. The row's values become the job's variables, so the script is
the same for every job and no stack name reaches a shell line unquoted.
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


def child_pipeline(rows: list[dict]) -> dict:
    """The child pipeline's document for the matrix ``rows``."""
    doc: dict = {"stages": ["build"]}
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
    return doc


def main() -> None:
    yaml.safe_dump(child_pipeline(json.load(sys.stdin)), sys.stdout, sort_keys=False, width=200)


if __name__ == "__main__":
    main()
