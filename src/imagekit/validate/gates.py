"""Gates: the limits a run must meet (the options of ``imagekit validate`` and ``launch … --validate``),
with the baseline file and the system model they name already read. The verdict is :mod:`judge`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from imagekit.util.errors import UsageError
from imagekit.util.settings import Site
from imagekit.util.sizes import parse_size
from imagekit.validate import summary
from imagekit.validate import system as systems
from imagekit.validate.baseline import Baseline, load_baseline

if TYPE_CHECKING:
    from collections.abc import Iterable

    from imagekit.validate.system import System


@dataclass(frozen=True)
class GateOptions:
    """The gate options as ``imagekit validate`` and ``launch … --validate`` name them, unread: the
    baseline is a path and the system a name until :meth:`Gates.load` reads them. ``site``: whose
    system directories a system name is looked up in (the CLI's --systems-dir and environment)."""

    min_busbw: Optional[float] = None
    max_latency_us: Optional[float] = None
    expect_transport: "Iterable[str]" = ()
    baseline: "str | Path | None" = None
    collective: Optional[str] = None
    small_size: str = "1K"
    saturation: float = summary.DEFAULT_SATURATION
    system: Optional[str] = None
    min_runs: Optional[int] = None
    straggler_threshold: float = 0.15
    nodes: Optional[int] = None
    gpus_per_node: Optional[int] = None
    site: Site = field(default_factory=Site.from_env)


@dataclass
class Gates:
    min_busbw: Optional[float] = None  # GB/s, compared with each run's peak
    max_latency_us: Optional[float] = None  # compared with every small size
    expect_transport: list[str] = field(default_factory=list)
    small_size: int = summary.DEFAULT_SMALL_SIZE
    saturation_fraction: float = summary.DEFAULT_SATURATION
    collective: Optional[str] = None  # name for nccl-tests runs whose output does not say
    # The run's shape for outputs that list no ranks (published tables, excerpts): --nodes, --gpus-per-node
    nodes: Optional[int] = None
    gpus_per_node: Optional[int] = None
    baseline: Optional[Baseline] = None
    image_nccl: Optional[str] = None  # the NCCL the image records: the run must have loaded it
    image: Optional[str] = None
    system: Optional["System"] = None  # --system: the reference the runs are judged against
    min_runs: Optional[int] = None  # fail unless each collective ran at least this often
    straggler_threshold: float = 0.15
    spike_factor: float = 1.5

    @classmethod
    def load(cls, options: GateOptions = GateOptions()) -> "Gates":
        """Gates from the gate options' values, as ``imagekit validate`` and ``launch … --validate`` name
        them; the baseline file and the system model are read here, so a bad gate (a bad --small-size, an
        unknown --system, an unreadable baseline) fails before any job runs: a UsageError or, for a bad
        model or baseline, a StackError naming its file and key."""
        try:
            small = parse_size(options.small_size)
        except ValueError as exc:
            raise UsageError(f"--small-size: {exc}") from None
        if (options.nodes or options.gpus_per_node) and not options.system:
            raise UsageError("--nodes/--gpus-per-node give the run's shape to --system, which is missing",
                             "add --system NAME (imagekit validate --list-systems)")
        if options.gpus_per_node and not options.nodes:
            raise UsageError("--gpus-per-node needs --nodes", "add --nodes N")
        return cls(min_busbw=options.min_busbw, max_latency_us=options.max_latency_us,
                   expect_transport=list(options.expect_transport), small_size=small,
                   saturation_fraction=options.saturation, collective=options.collective,
                   baseline=load_baseline(options.baseline) if options.baseline else None,
                   system=systems.load(options.system, options.site) if options.system else None,
                   min_runs=options.min_runs,
                   straggler_threshold=options.straggler_threshold, nodes=options.nodes,
                   gpus_per_node=options.gpus_per_node)

    @property
    def bandwidth_gated(self) -> bool:
        base = self.baseline
        return self.system is not None or self.min_busbw is not None or (
            base is not None and (base.defaults.min_busbw is not None
                                  or any(lim.min_busbw is not None or lim.sizes for lim in base.benchmarks.values())))

    @property
    def effective_small_size(self) -> int:
        """The small-size limit the verdict uses: the baseline's when it sets one."""
        base = self.baseline
        return base.small_size if base and base.small_size is not None else self.small_size

    @property
    def effective_saturation(self) -> float:
        base = self.baseline
        return (base.saturation_fraction if base and base.saturation_fraction is not None
                else self.saturation_fraction)
