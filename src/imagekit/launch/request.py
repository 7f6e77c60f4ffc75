"""What a launch is asked: :class:`LaunchRequest`, the library's front door for every target."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from imagekit.launch.common import Mount
from imagekit.util.settings import Site
from imagekit.validate import Gates


@dataclass(frozen=True)
class LaunchRequest:
    """What every launch is asked: the image, the command (empty: the image's benchmark, with
    ``gates``), the gates that judge the job's output (None: no ``--validate``), and whether preflight
    runs. Made from the CLI's options, or directly; ``Gates.load`` has checked the gates already, so a
    bad gate fails before any image is read or job is started. ``site``: the site preflight looks stacks
    up in (the CLI's --stacks-dir and environment).

    The workload's own values: the container ``runtime`` (a name; None: the target's default), the
    job's environment ``env`` (``--env``, which wins over the ``profiles``' variables), ``mounts`` and
    ``workdir``. ``options``: the target's own (the scheduler's and the rank starter's), by name."""

    image: str
    command: tuple[str, ...] = ()
    gates: Gates | None = None
    preflight: bool = True
    site: Site = dataclasses.field(default_factory=Site.from_env)
    runtime: str | None = None
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    profiles: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    workdir: str | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "profiles", tuple(self.profiles))
        object.__setattr__(self, "mounts", tuple(self.mounts))

    @property
    def validate(self) -> bool:
        return self.gates is not None
