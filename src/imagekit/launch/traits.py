"""What a launch needs to know of its image, read once from its facts: its MPI, base, CUDA and network.

The targets write settings that must match the image: the hostfile and ssh words of its MPI (Open MPI
4's ORTE or 5's PRRTE), the Flux view of its base OS, the EDF hook variant of its CUDA major and
whether it brings its own NCCL network plugin. :class:`ImageTraits` is that much of
:class:`~imagekit.image_facts.ImageFacts`, a frozen value the workload carries; an image whose facts
were not read has the traits of "not known", and each target then writes what works either way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from imagekit.image_facts import BASE, ImageFacts
from imagekit.launch.mpi import MpiFlavour


@dataclass(frozen=True)
class ImageTraits:
    """The image's MPI, its base (``distro:suite``) and architecture, its CUDA major, whether it has NCCL
    and its own NCCL network plugin, and its libfabric's providers; None or empty: not known."""

    mpi: MpiFlavour = MpiFlavour()
    base: str | None = None
    arch: str | None = None
    cuda_major: int | None = None
    nccl: bool = False
    net_plugin: bool = False
    fabric_providers: tuple[str, ...] = ()

    @classmethod
    def of(cls, facts: ImageFacts | None) -> "ImageTraits":
        if facts is None or facts.labels is None:
            return cls()
        cuda = facts.provider("cuda")
        major = (cuda.fact("major") if cuda is not None else None) or facts.role_version("cuda") or ""
        m = re.match(r"\D*(\d+)", major)
        fabric = facts.provider("libfabric")
        providers = tuple(p for p in ((fabric.fact("providers") or "") if fabric else "").split(",") if p)
        return cls(mpi=MpiFlavour.of(facts), base=facts.labels.get(BASE) or None,
                   arch=facts.arch or facts.config_arch, cuda_major=int(m.group(1)) if m else None,
                   nccl=facts.has_role("nccl"), net_plugin=facts.has_role("nccl-net-plugin"),
                   fabric_providers=providers)
