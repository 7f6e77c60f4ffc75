"""HPCCM recipe for an imagekit stack; works with plain HPCCM.

    hpccm --recipe recipes/stack.py --userarg stack=stacks/debian-mpi.yaml
    hpccm --recipe recipes/stack.py --userarg stack=stacks/nccl-tests.yaml variant=nccl-tests-cu124-x86_64 \
          --format singularity --singularity-version 3.2
    hpccm --recipe recipes/stack.py --userarg stack=stacks/debian-mpi.yaml platform=linux/arm64

Output is identical to `imagekit render` (same stack, variant, platform, format and mirror: `mirror=DIR`
takes upstream files from sources/ beside the recipe, as `imagekit render --mirror DIR -o` stages them).
"""
# pylint: disable=undefined-variable  (HPCCM provides Stage0, Stage1 and USERARG)

import logging

import hpccm.config
from hpccm.common import container_type
from packaging.version import Version

from imagekit import render, stack

if hpccm.config.g_ctype == container_type.SINGULARITY and hpccm.config.g_singularity_version < Version("3.2"):
    logging.warning("imagekit recipes are multi-stage: using --singularity-version 3.2")
    hpccm.config.g_singularity_version = Version("3.2")

_stack = stack.load(USERARG["stack"], variant=USERARG.get("variant"), mirror=USERARG.get("mirror"),
                    platform=USERARG.get("platform"))
render.populate(Stage0, Stage1, _stack)
