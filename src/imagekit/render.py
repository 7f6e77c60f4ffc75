"""Render a Stack to a Dockerfile or Singularity definition with HPCCM, in-process.

HPCCM keeps format, distro and arch as process-wide globals that
``baseimage()`` changes, so every render resets them first and builds its
stages afresh (a stage renders with the format active when it is printed).
The same ``populate`` function serves ``recipes/stack.py`` under plain HPCCM,
so both produce byte-identical output.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from imagekit import __version__, image_facts
from imagekit.util import quoting
from imagekit.components import _blocks
# The BuildKit secret's name lives with the blocks that mount it; `imagekit build` passes the bundle under it.
from imagekit.components._blocks import CA_SECRET_ID  # noqa: F401
from imagekit.util.errors import UsageError
from imagekit.image_facts import writer

FORMATS = ("docker", "singularity")
SINGULARITY_VERSION = "3.2"  # first with multi-stage definitions


def reset_hpccm(fmt: str) -> None:
    import hpccm.config
    from hpccm.common import container_type, cpu_arch, linux_distro
    from packaging.version import Version

    hpccm.config.g_ctype = {"docker": container_type.DOCKER,
                            "singularity": container_type.SINGULARITY}[fmt]
    hpccm.config.g_singularity_version = Version(SINGULARITY_VERSION)
    hpccm.config.g_cpu_arch = cpu_arch.X86_64
    hpccm.config.g_cpu_target = None
    hpccm.config.g_linux_distro = linux_distro.UBUNTU
    hpccm.config.g_linux_version = Version("22.04")
    hpccm.config.g_wd = "/var/tmp"
    hpccm.config.g_singularity_tmp_fallback = True


# The owner of the layers imagekit itself adds to every stage (apt set-up, the login environment).
OWN_LAYERS = "imagekit"
# The owner of the stack file's own distro packages (its `packages:` key).
PACKAGES = "packages"
# Where they go among the components (by Component.order): with the Python environment (python: 80).
PACKAGES_ORDER = 80


def stage_parts(stack, target: str) -> list[tuple[str, list]]:
    """The blocks of one stage between its ``FROM`` and its labels, each with its owner (a
    component's name or OWN_LAYERS), in layer order: ``populate`` renders them, and ``imagekit
    report`` aligns an image's history with them."""
    if target == "devel":
        parts = [(OWN_LAYERS, _blocks.apt_cache_setup())]
    else:
        parts = [(OWN_LAYERS, _blocks.runtime_slim())] if stack.base.family == "deb" else []
    components = [(name, list(c.devel() if target == "devel" else c.runtime()), c.order)
                  for name, c in stack.components.items()]
    names = stack.package_names(target)
    # After the layers built from source (CUDA, fabric, MPI, NCCL), so that adding a package keeps them
    # cached; before the Python environment, so that a pip package can build against one (h5py).
    at = next((i for i, (_, _, order) in enumerate(components) if order >= PACKAGES_ORDER), len(components))
    packages = [(PACKAGES, _blocks.apt_install(stack, names, "the stack's own distro packages (packages:)"))] if names else []
    parts += [(name, blocks) for name, blocks, _ in components[:at]] + packages
    parts += [(name, blocks) for name, blocks, _ in components[at:]]
    return parts + [(OWN_LAYERS, _blocks.login_environment())]


def populate(devel, runtime, stack, *, single_stage: bool = False) -> None:
    """Fill two hpccm Stages (devel, runtime) for ``stack`` in the current HPCCM format."""
    from hpccm.primitives import baseimage, comment, label

    base = stack.base
    common = {"_distro": base.hpccm_distro, "_arch": base.arch, "_bootstrap": base.bootstrap}
    labels = writer.recipe_labels(stack)
    # Only the file's name: the full path depends on the checkout and on how the
    # stack was named, and would change the recipe hash (io.imagekit.recipe.sha256).
    devel += comment(f"imagekit {__version__}: stack {stack.name} ({Path(stack.file).name}); "
                     "generated, do not edit", reformat=False)
    for target, stage in (("devel", devel), ("runtime", runtime)):
        if target == "runtime" and single_stage:
            return
        stage += baseimage(image=base.image if target == "devel" else base.runtime, _as=target, **common)
        for _, blocks in stage_parts(stack, target):
            for block in blocks:
                stage += block
        stage += label(metadata=_quoted({**labels, image_facts.TARGET: target}))


def _quoted(labels: dict[str, str]) -> dict[str, str]:
    """HPCCM writes label values verbatim: Docker needs them quoted (and ``$`` escaped, or it
    substitutes build variables), Singularity's %labels takes the rest of the line as is."""
    if not _blocks.docker():
        return {k: quoting.definition_line(v, "recipe", f"label {k}") for k, v in labels.items()}
    return {k: quoting.dockerfile_string(v, "recipe", f"label {k}") for k, v in labels.items()}


def render(stack, fmt: str = "docker", *, single_stage: bool = False) -> str:
    """The recipe text; deterministic for a given stack, format and imagekit version."""
    import hpccm

    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}", f"use one of: {', '.join(FORMATS)}")
    reset_hpccm(fmt)
    devel, runtime = hpccm.Stage(), hpccm.Stage()
    populate(devel, runtime, stack, single_stage=single_stage)
    parts = [str(devel)] + ([str(runtime)] if len(runtime) else [])
    return "\n\n".join(parts) + "\n"


def recipe_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
